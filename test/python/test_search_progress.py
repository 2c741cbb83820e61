"""Progress of a search on stderr (`mirage.search.progress`): a line per phase
(enumeration, checks, GPU timing; per subprogram in a partitioned search) when stderr is
not a terminal, a tqdm bar when it is, nothing when verbose is off."""
import io
import os
import re
import sys
import time

from mirage.search import superoptimize
from mirage.search.progress import Progress

sys.path.insert(0, os.path.dirname(__file__))
from test_search import maxnorm_ref, rmsnorm_ref  # noqa: E402

# small limits: each search below takes well under a second
SMALL = dict(workers=1, time_limit=60, max_block_ops=7)


def _lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("[search]") or ln.startswith("[partition]")]


def _index(lines, prefix, start=0):
    for k in range(start, len(lines)):
        if lines[k].startswith(prefix):
            return k
    raise AssertionError(f"no line starting with {prefix!r} after line {start} in:\n" + "\n".join(lines))


def test_every_phase_prints_a_line(capsys):
    timed = []

    def fake_gpu(res):  # stands in for the GPU timing (this machine may have none)
        timed.append(len(res.candidates))
        return {i: 10.0 - i for i in range(len(res.candidates))}

    res = superoptimize(rmsnorm_ref(2, 256, 256), "mlp", verbose=True, measure=fake_gpu, **SMALL)
    err = capsys.readouterr().err
    lines = _lines(err)
    k = _index(lines, "[search] enumeration: ")
    n_items = int(re.search(r"enumeration: (\d+) work items, 1 worker", lines[k]).group(1))
    k = _index(lines, "[search] enumeration done in ", k + 1)
    m = re.search(r": (\d+)/(\d+) items, candidates (\d+), .*states (\d+), pruned\[", lines[k])
    assert m, lines[k]
    assert int(m.group(1)) == int(m.group(2)) == n_items  # every work item ran
    assert int(m.group(4)) == res.stats.states  # the last status is the search's final count
    k = _index(lines, "[search] checks: the best of ", k + 1)
    k = _index(lines, "[search] checks done in ", k + 1)
    m = re.search(r": (\d+)/(\d+) verified, (\d+) checked, (\d+) rejected", lines[k])
    assert m, lines[k]
    assert int(m.group(1)) == int(m.group(2)) == res.config.top_k == 3
    assert int(m.group(3)) == res.stats.verified + res.stats.rejected
    k = _index(lines, "[search] GPU timing: ", k + 1)
    assert f"{timed[0]} candidates" in lines[k]
    k = _index(lines, "[search] GPU timing done in ", k + 1)
    assert f"{timed[0]}/{timed[0]} candidates, {timed[0]} timed" in lines[k]
    assert "superoptimize rmsnorm_linear" in err  # the report after the phases
    assert all(c.measured_us == c.measured_us for c in res.candidates)  # the timing did run


def test_verbose_off_prints_nothing(capsys):
    res = superoptimize(rmsnorm_ref(2, 256, 256), "mlp", measure=lambda r: {0: 1.0}, **SMALL)
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""
    assert res.stats.states > 0 and res.candidates[0].measured_us == 1.0


def test_partitioned_search_shows_each_subprogram(capsys):
    res = superoptimize(maxnorm_ref(), "mlp", verbose=True, measure=False, **SMALL)
    assert [op.kind for op in res.best.ops] == ["graph_def", "reduce_max", "graph_def"]
    lines = _lines(capsys.readouterr().err)
    k = 0
    for part in (1, 2):  # each subprogram's search shows its enumeration and its checks
        k = _index(lines, f"[partition] subprogram {part}/2:", k)
        k = _index(lines, "[search] enumeration: ", k + 1)
        k = _index(lines, "[search] enumeration done in ", k + 1)
        k = _index(lines, "[search] checks: ", k + 1)
        k = _index(lines, "[search] checks done in ", k + 1)
        assert ": 1/1 verified" in lines[k]  # a subprogram keeps its best (top_k=1)
        if part == 1:
            assert _index(lines, "[partition] subprogram 2/2:") > k


def test_plain_lines_are_rate_limited_and_a_long_step_still_reports():
    buf = io.StringIO()
    p = Progress(True, stream=buf, interval=5.0)
    p.phase("enumeration", 100, "items", "100 work items")
    for k in range(100):
        p.advance(status=f"candidates {k}")
    p.end()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines  # start and end only: no line for each of 100 quick steps
    assert lines[0] == "[search] enumeration: 100 work items"
    assert re.fullmatch(r"\[search\] enumeration done in \d+\.\d s: 100/100 items, candidates 99", lines[1])

    # nothing advances for a while (one formal check can take a minute): a line every
    # `interval` seconds says the phase still runs
    buf = io.StringIO()
    p = Progress(True, stream=buf, interval=0.2)
    with p.phase("checks", 3, "verified"):
        time.sleep(1.1)
    lines = buf.getvalue().splitlines()
    ticks = [ln for ln in lines if re.fullmatch(r"\[search\] checks \(\d+ s\): 0/3 verified", ln)]
    assert 2 <= len(ticks) <= 6, lines  # about 5 (every 0.2 s for 1.1 s), on a loaded machine fewer
    assert lines[-1].startswith("[search] checks done in ")
    n = len(lines)
    time.sleep(0.5)
    assert len(buf.getvalue().splitlines()) == n  # the phase ended: its ticker stopped


def test_terminal_gets_a_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    buf = Tty()
    p = Progress(True, stream=buf)
    with p.phase("checks", 3, "verified", "the best of 5"):
        for k in range(3):
            p.advance(status=f"{k + 1} checked")
    text = buf.getvalue()
    last = text.replace("\n", "\r").split("\r")
    last = [s for s in last if s.strip()][-1]
    assert last.startswith("[search] checks: 100%|") and "3/3 verified" in last and "3 checked" in last, last
    assert text.endswith("\n")  # the finished bar stays, on its own line


def test_off_prints_nothing_and_starts_no_thread():
    import threading

    buf = io.StringIO()
    before = threading.active_count()
    p = Progress(False, stream=buf, interval=0.01)
    with p.phase("enumeration", 10, "items"):
        assert threading.active_count() == before
        p.advance(status="x")
        time.sleep(0.05)
    assert buf.getvalue() == ""


def test_ctrl_c_as_the_ticker_starts_leaves_the_phase_closable(monkeypatch):
    # Ctrl-C inside Thread.start (it waits for the new thread) left a thread that join()
    # refused ("cannot join thread before it is started"): the search's clean-up raised
    # that instead of returning what it had found (seen in mirage-opt's Ctrl-C test)
    import threading

    import pytest

    def interrupted(self):
        raise KeyboardInterrupt

    out = io.StringIO()
    p = Progress(True, stream=out)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        p.phase("enumeration", 3, "items")
    monkeypatch.undo()
    p.end()
    assert out.getvalue().splitlines()[-1].startswith("[search] enumeration done in ")
