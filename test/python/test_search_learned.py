"""The deal after an earlier search of the same units (driver._LEARNED): a search that ran
every unit records its groups' times, and the next search of the same program and units
deals the largest groups first (driver._Lanes). Only the order of the calls changes: every
unit is still dealt once, a group in one call, and the search finds what one worker finds."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mirage.search import driver as D  # noqa: E402
from test_search_ray import PROGRAMS, _items, assert_same, search  # noqa: E402
from test_search_scaling_groups import deal_all  # noqa: E402


@pytest.fixture(scope="module")
def gqa():
    ref, cfg, pro, bound, gen, items = _items("gqa")
    units, meta = D.split(gen, items)
    return ref, units, meta


def test_learned_times_deal_the_largest_groups_first_and_every_unit_once(gqa):
    _, units, meta = gqa
    plain = D._Lanes(units, meta, workers=4)
    rnd = random.Random(0)
    times = {g[0]: rnd.random() for g in plain.groups}
    big = sorted(times)[-3:]  # three groups far larger than the others, the largest first
    for j, k in enumerate(big):
        times[k] = 100.0 * len(times) * (3 - j)
    for seed in range(5):
        lanes = D._Lanes(units, meta, workers=4, learned=times)
        calls = deal_all(lanes, 4, random.Random(seed))
        assert [c[0] for c in calls[:3]] == big  # largest first, before any other group
        assert sorted(k for c in calls for k in c) == list(range(len(units)))
        assert sorted(map(tuple, calls)) == sorted(map(tuple, plain.groups))  # each group whole, in one call


def test_times_missing_for_a_group_leave_the_deal_as_before(gqa):
    _, units, meta = gqa
    plain = D._Lanes(units, meta, workers=4)
    times = {g[0]: 1.0 for g in plain.groups[1:]}  # the first group not known
    lanes = D._Lanes(units, meta, workers=4, learned=times)
    assert lanes.lanes == plain.lanes


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_search_after_one_of_the_same_units_deals_from_its_times_and_finds_the_same(name, monkeypatch):
    monkeypatch.setattr(D, "_LEARNED", {})
    made = []

    class Lanes(D._Lanes):  # records whether each search dealt from learned times
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(all(t is not None for t in self.learned))

    monkeypatch.setattr(D, "_Lanes", Lanes)
    one = search(name, workers=1)
    assert len(D._LEARNED) == 1 and all(t >= 0 for t in next(iter(D._LEARNED.values())).values())
    again = search(name, workers=3)
    assert made == [False, True]
    assert_same(again, one)
