"""Garbage collections around the local pool: a worker freezes what it inherited from the
driver (executor._local_init), so that its collections do not write to (and copy) every
page of the driver's heap, and the driver does not collect while it deals the work."""
import gc
import os
import sys

from mirage.search import driver as D
from mirage.search import executor as X

sys.path.insert(0, os.path.dirname(__file__))
from test_search_ray import search  # noqa: E402


def _tracked(ident: int) -> tuple:
    """In a worker: its frozen objects' count, and whether the collector walks object `ident`."""
    return gc.get_freeze_count(), any(id(o) == ident for o in gc.get_objects())


def test_workers_skip_the_objects_they_inherit_and_the_driver_does_not():
    inherited = [[k] for k in range(1000)]  # containers of the driver, tracked by its collector
    before = gc.get_freeze_count()  # Python 3.12 freezes objects of its own at start
    pool = X.make("local", 2, D._ignore_sigint, (), None)
    try:
        assert gc.get_freeze_count() == before
        assert any(o is inherited for o in gc.get_objects())
        pool.submit(_tracked, id(inherited))
        frozen, walked = pool.next_done(timeout=60)[1]
        assert frozen >= 1000 and not walked
    finally:
        pool.close()


def test_the_driver_puts_off_its_collections_while_it_deals(monkeypatch):
    # a full collection of the driver's heap would leave the workers whose calls return
    # meanwhile waiting (driver._collections_put_off); after the enumeration it collects again
    seen = []

    class Lanes(D._Lanes):
        def take(self, lane=None):
            seen.append(gc.isenabled())
            return super().take(lane)

    monkeypatch.setattr(D, "_Lanes", Lanes)
    assert gc.isenabled()
    res = search("gqa", workers=2)
    assert seen and not any(seen) and gc.isenabled()
    assert res.candidates[0].key != "reference"
