"""The search cache (search/cache.py) on a folder several machines share: concurrent
writers of one key leave a whole entry, readers never see a part, a failed write leaves
no temp file, entries are readable by the other users, and a reader does not discard an
entry that another writer replaced after it was read."""
import multiprocessing as mp
import os
import warnings

import pytest

import mirage.search.cache as C
from mirage.search.config import make_config
from test_search import rmsnorm_ref

CFG = make_config("mlp")


def programs(copies):
    return [rmsnorm_ref(2, 256, 256) for _ in range(copies)]


def _write(folder, copies, n):
    ref = rmsnorm_ref(2, 256, 256)
    for _ in range(n):
        C.store(folder, ref, CFG, programs(copies))


def test_concurrent_writers_of_one_key_leave_a_whole_entry(tmp_path):
    folder = str(tmp_path)
    ref = rmsnorm_ref(2, 256, 256)
    # what each writer stores: entries of 1 to 4 programs (each the reference itself)
    whole = set()
    for copies in range(1, 5):
        with open(C.store(folder, ref, CFG, programs(copies))) as f:
            whole.add(f.read())
    assert len(whole) == 4
    ctx = mp.get_context("fork")
    writers = [ctx.Process(target=_write, args=(folder, copies, 40)) for copies in range(1, 5)]
    for w in writers:
        w.start()
    reads = 0
    p = C.path(folder, ref, CFG)
    while any(w.is_alive() for w in writers):
        with open(p) as f:
            assert f.read() in whole  # the old entry or a new one, never a part or a mix
        reads += 1
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert reads > 10
    assert sorted(os.listdir(folder)) == [os.path.basename(p)]  # no temp file left behind
    graphs = C.load(folder, ref, CFG)  # parsed and verified against the reference
    assert graphs is not None and 1 <= len(graphs) <= 4


def test_entries_are_readable_as_the_umask_allows(tmp_path):
    old = os.umask(0o022)
    try:
        p = C.store(str(tmp_path), rmsnorm_ref(2, 256, 256), CFG, programs(1))
    finally:
        os.umask(old)
    assert os.stat(p).st_mode & 0o777 == 0o644


def test_a_failed_write_keeps_the_old_entry_and_leaves_no_temp_file(tmp_path, monkeypatch):
    ref = rmsnorm_ref(2, 256, 256)
    p = C.store(str(tmp_path), ref, CFG, programs(1))
    before = open(p).read()

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        C.store(str(tmp_path), ref, CFG, programs(2))
    assert os.listdir(tmp_path) == [os.path.basename(p)]
    assert open(p).read() == before


def test_a_bad_entry_is_discarded_unless_a_writer_replaced_it_meanwhile(tmp_path, monkeypatch):
    ref = rmsnorm_ref(2, 256, 256)
    p = C.path(str(tmp_path), ref, CFG)
    real_parse = C.parse_cached

    # alone, a reader removes the bad entry
    with open(p, "w") as f:
        f.write("not mlir")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert C.load(str(tmp_path), ref, CFG) is None
    assert "discarded" in str(w[0].message) and not os.path.exists(p)

    # another machine writes a good entry while this one reads the bad one: it is kept
    with open(p, "w") as f:
        f.write("not mlir")

    def parse_while_another_writes(text):
        C.store(str(tmp_path), ref, CFG, programs(1))
        return real_parse(text)

    monkeypatch.setattr(C, "parse_cached", parse_while_another_writes)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert C.load(str(tmp_path), ref, CFG) is None
    monkeypatch.setattr(C, "parse_cached", real_parse)
    graphs = C.load(str(tmp_path), ref, CFG)
    assert graphs is not None and len(graphs) == 1


def test_an_entry_of_another_program_is_checked_and_discarded(tmp_path):
    # this user's MAC covers the key (the reference's MLIR): an entry copied under another
    # program's key is not trusted, and the checks find the other signature
    folder = str(tmp_path)
    small, other = rmsnorm_ref(2, 256, 256), rmsnorm_ref(4, 256, 256)
    os.replace(C.store(folder, small, CFG, programs(1)), C.path(folder, other, CFG))
    with pytest.warns(UserWarning, match="takes or returns other tensors"):
        assert C.load(folder, other, CFG) is None
    assert os.listdir(folder) == []


def test_entries_checked_without_the_formal_verifier_are_not_taken_by_a_verifying_run(tmp_path, monkeypatch):
    import mirage.search.check as CHK

    folder, ref = str(tmp_path), rmsnorm_ref(2, 256, 256)
    monkeypatch.setattr(CHK, "USE_FORMAL_VERIFIER", False)
    C.store(folder, ref, CFG, programs(1))
    assert len(C.load(folder, ref, CFG)) == 1
    monkeypatch.setattr(CHK, "USE_FORMAL_VERIFIER", True)
    assert C.load(folder, ref, CFG) is None  # another key: searched (and verified) again
    C.store(folder, ref, CFG, programs(2))
    assert len(C.load(folder, ref, CFG)) == 2 and len(os.listdir(folder)) == 2


def test_entries_of_another_search_code_are_not_taken(tmp_path, monkeypatch):
    # a changed cost model (or any search source) keys its own entries: the old picks stay
    # on disk for the old code but are not handed to the new one
    folder, ref = str(tmp_path), rmsnorm_ref(2, 256, 256)
    C.store(folder, ref, CFG, programs(1))
    assert len(C.load(folder, ref, CFG)) == 1
    assert len(C.search_code_hash()) == 16
    monkeypatch.setattr(C, "search_code_hash", lambda: "another version0")
    assert C.load(folder, ref, CFG) is None
