"""Scaling of the search over Ray workers: the GQA and QKNorm searches of
search_benchmarks.py (full-size programs, preset `attention`) run with `executor="ray"`
and 1, 2, 4, ... workers, up to the CPUs of the cluster; per worker count the time of
the enumeration (the part split into work items) and of the whole search, speedup and
parallel efficiency against one worker, and the load average. Every run of a program
must visit the same states and pick the same best candidate (checked, shown).

    PYTHONPATH=python python benchmarks/search_scaling.py                      # Ray on this machine
    PYTHONPATH=python python benchmarks/search_scaling.py --workers 1 2 4 8 16 --max-block-ops 8
    MIRAGE_RAY_ADDRESS=<head>:6379 PYTHONPATH=python python benchmarks/search_scaling.py
    PYTHONPATH=python python benchmarks/search_scaling.py --executor local    # the local pool, no Ray

`--max-block-ops` (default 7; the preset's is 11) bounds the block graphs so that a
one-worker run takes a minute or two, not an hour (GQA: 392,274 states at 7, 1.8 M at 9).
`--no-checks` leaves out the checks of the best candidates (verify=False), so that a run
times the seeds, the work items and the ranking.

`--independent [N ...]` measures what the machine itself gives: per worker count N > 1
(or only those named: a batch of 16 one-worker searches at once takes as long as one
search of 16 x the work), N independent one-worker searches of the same program at once (each its own process, the
local executor, started together). Their mean time t_N against the one-worker run alone
(T_1) is the machine's own speedup with N busy CPUs, N·T_1/t_N (N on a machine whose CPUs
do not slow each other down); the search's efficiency against the machine is
t_N / (N·T_N), T_N being the N-worker search: 1.0 when the search split over N workers
loses nothing beyond what N busy CPUs lose anyway.

`--trace DIR` (local executor) records, in every process of a search (the driver; the
workers, forked, inherit it), each work unit's and each call's CPU (`time.process_time()`)
and wall time, in DIR/<pid>.jsonl, and adds per run: the units' CPU (and against the same
units in the one-worker run), the workers' CPU outside their calls, when their first
calls began (a unit cut into pieces: its pieces' CPU together), how many units handed
work back to idle workers (driver._Donated), and the full garbage collections (count, CPU)
and page faults inside the units (executor._local_init says why), how long the workers waited
between their calls (the driver had dealt them nothing) and after their last call, and the
driver process's CPU. How the 16-worker search's extra CPU was found
(results/search_scaling.md). `--donate-min SECONDS` sets driver.DONATE_MIN (inf: no unit
hands work back), to compare.

The runs of a program after its first deal from the group times its run before recorded
(driver._LEARNED: the largest groups first), as any search of the same program and units
after one in the same process does; `--cold` forgets them before each run, so that every
run deals as a first search. The trace lines say which.

Needs `pip install '.[ray]'` (not with `--executor local`). Writes
benchmarks/results/search_scaling.md (or --out; `--executor local`: search_scaling_local.md).
"""
import argparse
import contextlib
import datetime
import gc
import glob
import io
import json
import multiprocessing as mp
import os
import platform
import re
import resource
import sys
import time
import warnings

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "python"), os.path.dirname(__file__)]

from search_benchmarks import BENCHMARKS  # noqa: E402
from mirage.search import driver as D, superoptimize  # noqa: E402

PLAIN = {"item": D._run_item, "units": D._run_units, "check": D._check_item}  # the driver's, wrapped by --trace
TRACE = {}  # "dir": where --trace writes


def _log(rec):
    with open(os.path.join(TRACE["dir"], f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


FULL_GC = [0, 0.0, 0.0, 0.0]  # this process's full collections: how many, their CPU; when the one running began


def _on_gc(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            FULL_GC[2:] = time.process_time(), time.time()
        else:
            FULL_GC[0] += 1
            FULL_GC[1] += time.process_time() - FULL_GC[2]
            _log(["gc", 1, FULL_GC[3], time.time(), FULL_GC[2], time.process_time()])


def _traced_item(unit, piece=None):  # a piece of a unit (driver._Piece) is logged as its unit
    c, t = time.process_time(), time.time()
    gc0, faults = FULL_GC[:2], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = PLAIN["item"](unit) if piece is None else PLAIN["item"](unit, piece)
    _log(["unit", repr(unit), t, time.time(), c, time.process_time(), FULL_GC[0] - gc0[0], FULL_GC[1] - gc0[1],
          resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults])
    return out


class _Donated(D._Donated):
    """The driver's, remembered: how many units handed work back (`run`)."""
    last = None

    def __init__(self, *args):
        super().__init__(*args)
        _Donated.last = self


D._Donated = _Donated


class _Lanes(D._Lanes):
    """The driver's, remembered: whether the search dealt from an earlier one's times (`run`)."""
    learned = False

    def __init__(self, *args):
        super().__init__(*args)
        _Lanes.learned = all(t is not None for t in self.learned)


D._Lanes = _Lanes


def _traced_units(units):  # module-level: the pool sends it to the workers by name
    c, t = time.process_time(), time.time()
    out = PLAIN["units"](units)
    _log(["call", len(units), t, time.time(), c, time.process_time()])
    return out


def _traced_check(arg):
    c, t = time.process_time(), time.time()
    out = PLAIN["check"](arg)
    _log(["check", 1, t, time.time(), c, time.process_time()])
    return out


def trace_summary(t0, one=None):
    """(units' CPU per unit, a line on the run that started at `t0`): its units' CPU (against
    `one`, the per-unit CPU of a one-worker run), per worker process the CPU outside its
    calls and checks (from its start to its last call's end) and when its first call began."""
    units, outside, first, spans = {}, 0.0, [], {}
    gaps, ends = [], []  # per pool process: its waits between calls, when its last call ended
    full, faults = [0, 0.0], 0  # in the units: full collections (count, CPU), page faults
    stalls = []  # the driver's full collections (wall seconds): with a pool, it deals no call meanwhile
    for path in glob.glob(os.path.join(TRACE["dir"], "*.jsonl")):
        with open(path) as f:
            recs = [r for r in map(json.loads, f) if r[2] >= t0]
        if path.endswith(f"/{os.getpid()}.jsonl"):
            stalls += [r[3] - r[2] for r in recs if r[0] == "gc"]
        calls = sorted((r for r in recs if r[0] in ("call", "check")), key=lambda r: r[2])
        for r in recs:
            if r[0] == "unit":  # a unit's pieces, on several workers, add up
                units[r[1]] = units.get(r[1], 0.0) + r[5] - r[4]
                a, b = spans.get(r[1], (r[2] - t0, r[3] - t0))
                spans[r[1]] = (min(a, r[2] - t0), max(b, r[3] - t0))
                full[0], full[1], faults = full[0] + r[6], full[1] + r[7], faults + r[8]
        if calls:
            outside += calls[-1][5] - sum(r[5] - r[4] for r in calls)
            first.append(calls[0][2] - t0)
            # wall time between a call's end and the next call's start: the driver had dealt it nothing
            gaps.append(sum(max(0.0, b[2] - a[3]) for a, b in zip(calls, calls[1:])))
            ends.append(calls[-1][3] - t0)
    total = sum(units.values())
    line = f"units {len(units)}, their CPU {total:.2f} s"
    if one:
        line += f" (x{total / sum(one.get(k, 0.0) for k in units):.2f} of the same units in the one-worker run)"
    if first:
        line += (f"; {len(first)} pool processes, CPU outside their calls and checks {outside:.2f} s, "
                 f"first calls at {min(first):.2f}-{max(first):.2f} s")
        span = sum(max(ends) - f for f in first)  # the workers' time from their first call to the last end
        if span > 0:
            line += (f", waiting between their calls {sum(gaps):.2f} s ({sum(gaps) / span:.2f} of their time "
                     f"from their first call to the last call's end), after their last call "
                     f"{sum(max(ends) - e for e in ends):.2f} s ({sum(max(ends) - e for e in ends) / span:.2f})")
    if units:  # what bounds many workers: the largest unit, against an equal share of all units' CPU
        big = max(units, key=units.get)
        line += (f"; largest unit {units[big]:.2f} s of CPU ({100 * units[big] / total:.1f} % of the units'), "
                 f"ran {spans[big][0]:.2f}-{spans[big][1]:.2f} s; last unit ended at "
                 f"{max(e for _, e in spans.values()):.2f} s; in the units {full[0]} full garbage collections, "
                 f"{full[1]:.2f} s of CPU, {faults} page faults")
    if stalls:
        line += f"; the driver's full collections {len(stalls)}, {sum(stalls):.2f} s (longest {max(stalls):.2f} s)"
    return units, line

PROGRAMS = ("gqa", "qknorm_attention")


def cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its ended children (the local pool's
    workers, once joined)."""
    rs = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(r.ru_utime for r in rs), sum(r.ru_stime for r in rs)


DRIVER_CPU = [0.0]  # the last `run`'s CPU in this process (all its threads: the pool's too), user + system


def run(name, workers, a, executor=None):
    """(result, enumeration seconds, load before, load after, (user, system) CPU seconds of
    all its processes) of one search (None on Ray, whose workers are not this process's children)."""
    log = io.StringIO()  # the search's progress lines: the enumeration's time is on its "done" line
    load = os.getloadavg()[0]
    c0 = cpu()
    own = resource.getrusage(resource.RUSAGE_SELF)
    with contextlib.redirect_stderr(log), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verify=False says that it returns unchecked candidates
        res = superoptimize(BENCHMARKS[name].reference(1), "attention", workers=workers,
                            executor=executor or a.executor, time_limit=a.time_limit,
                            max_block_ops=a.max_block_ops, measure=False, verify=not a.no_checks, verbose=True)
    done = re.search(r"\[search\] enumeration done in ([0-9.]+) s", log.getvalue())
    used = None if (executor or a.executor) == "ray" else tuple(x - y for x, y in zip(cpu(), c0))
    now = resource.getrusage(resource.RUSAGE_SELF)
    DRIVER_CPU[0] = now.ru_utime + now.ru_stime - own.ru_utime - own.ru_stime
    return res, float(done.group(1)), load, os.getloadavg()[0], used


def independent(name, n, a):
    """[(seconds, states, best key)] of `n` one-worker searches run at once, each in a
    process of its own (forked: imports done, nothing of Ray's used), started together."""
    ctx = mp.get_context("fork")
    start, q = ctx.Barrier(n), ctx.Queue()

    def one():
        gc.freeze()  # as a pool's worker does (executor._local_init): its collections skip what it inherited
        start.wait()
        t0 = time.monotonic()
        res = run(name, 1, a, executor="local")[0]
        q.put((time.monotonic() - t0, res.stats.states, res.candidates[0].key))

    ps = [ctx.Process(target=one) for _ in range(n)]
    for p in ps:
        p.start()
    out = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return out


def counts(cpus: int) -> list[int]:
    out = [1]
    while out[-1] * 2 < cpus:
        out.append(out[-1] * 2)
    return out + [cpus] if cpus > 1 else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(PROGRAMS))
    ap.add_argument("--workers", type=int, nargs="*", help="worker counts (default 1, 2, 4, ... up to the CPUs)")
    ap.add_argument("--max-block-ops", type=int, default=7)
    ap.add_argument("--executor", choices=("ray", "local"), default="ray")
    ap.add_argument("--time-limit", type=float, default=7200, help="never reached: the searches run to the end")
    ap.add_argument("--no-checks", action="store_true", help="verify=False: no checks of the best candidates")
    ap.add_argument("--independent", type=int, nargs="*", metavar="N",
                    help="also N independent one-worker searches at once per worker count N > 1, or per N named "
                         "(the machine's scaling)")
    ap.add_argument("--trace", metavar="DIR", help="per-unit and per-call CPU and wall time of every process (local)")
    ap.add_argument("--donate-min", type=float, metavar="SECONDS",
                    help=f"driver.DONATE_MIN (default {D.DONATE_MIN:g}): how long a unit runs before it may hand the "
                         "rest of its work to idle workers; inf: never")
    ap.add_argument("--cold", action="store_true",
                    help="every search deals as a first search: the group times of the earlier runs of the "
                         "program (driver._LEARNED) forgotten before each")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.donate_min is not None:
        D.DONATE_MIN = a.donate_min  # before the pool forks its workers, which read it
    if a.trace:
        if a.executor != "local":
            ap.error("--trace needs --executor local (Ray's workers are not forked from this process)")
        os.makedirs(a.trace, exist_ok=True)
        TRACE["dir"] = a.trace
        gc.callbacks.append(_on_gc)  # forked workers inherit it
        D._run_item, D._run_units, D._check_item = _traced_item, _traced_units, _traced_check
    results = os.path.join(os.path.dirname(__file__), "results")
    a.out = a.out or os.path.join(results, "search_scaling.md" if a.executor == "ray" else "search_scaling_local.md")
    if a.executor == "ray":
        import ray

        address = os.environ.get("MIRAGE_RAY_ADDRESS")
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"object_store_memory": 2**30}))  # the searches pass little data
        cpus = int(ray.cluster_resources()["CPU"])
        where = (f"Ray cluster: {len([n for n in ray.nodes() if n['Alive']])} node(s), {cpus} CPUs "
                 f"({'MIRAGE_RAY_ADDRESS=' + address if address else 'started on this machine'}).")
    else:
        cpus = os.cpu_count()
        where = "The local process pool (executor=\"local\")."
    ws = a.workers or counts(cpus)
    # warm-up: Ray starts its worker processes, imports are done (the verifier's too,
    # unless --no-checks), not counted below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        superoptimize(BENCHMARKS["gqa"].reference(1), "attention", workers=max(ws), executor=a.executor,
                      max_block_ops=6, measure=False, verify=not a.no_checks)
    D._LEARNED.clear()  # the first run of each program deals cold, whatever --max-block-ops
    # the worker counts of --independent: those named, else every count > 1 (none without it)
    at_n = set() if a.independent is None else set(a.independent or [w for w in ws if w > 1]) - {1}
    flags = (" --no-checks" if a.no_checks else "") + \
        ("" if a.donate_min is None else f" --donate-min {a.donate_min:g}") + (" --cold" if a.cold else "") + \
        ("" if a.independent is None else " --independent" + "".join(f" {n}" for n in a.independent))
    out = [f"# Search scaling over {'Ray workers' if a.executor == 'ray' else 'local worker processes'}", "",
           f"Date: {datetime.datetime.now():%Y-%m-%d %H:%M}. Driver: {platform.node()} ({platform.machine()}, "
           f"{os.cpu_count()} cores). {where}",
           f"Command: `PYTHONPATH=python python benchmarks/search_scaling.py {' '.join(a.names)} "
           f"--workers {' '.join(map(str, ws))} --max-block-ops {a.max_block_ops} --executor {a.executor}{flags}`", "",
           f"Each search: `superoptimize(BENCHMARKS[name].reference(1), \"attention\", executor=\"{a.executor}\", "
           f"workers=w, max_block_ops={a.max_block_ops}, measure=False{', verify=False' if a.no_checks else ''})` "
           "to its end (no time limit reached). *Enumeration*: the work items (split over the workers"
           f"{'' if a.no_checks else '; with more than one, the checks of the best candidates so far run beside them'}"
           "); *search*: "
           "the whole call: seeds, the items' size probe, enumeration, ranking"
           f"{'' if a.no_checks else ', the checks of the best 3 candidates not done by then (in parallel)'}; *other*: "
           "search - enumeration (the driver's serial phases and the pool's start). Speedup and "
           "efficiency (speedup / workers) against one worker. Load: the 1-minute load average before / after "
           "the run (other processes on the machine take cores from the workers). *CPU*: the CPU time of the "
           "search's processes, user + system (driver and local workers; not measured on Ray)."
           + (" *N at once*: N independent one-worker searches run together, mean (min-max) time t_N; "
              "*machine*: the machine's speedup with N busy CPUs, N x T_1 / t_N; *vs machine*: the search's "
              "efficiency against that, t_N / (N x T_N)." if at_n else ""), ""]
    for name in a.names:
        more = " N at once | machine | vs machine |" if at_n else ""
        out += [f"## {name}", "",
                "| workers | enumeration | speedup | efficiency | search | speedup | efficiency | other | CPU "
                f"|{more} states | best | load |",
                "|---|---|---|---|---|---|---|---|---|" + "---|" * (3 * bool(at_n)) + "---|---|---|"]
        base = None
        at_once = {}  # N -> the times of N independent one-worker searches
        traces, one = [], None  # --trace: a line per run; the one-worker run's CPU per unit
        for w in ws:
            t0, wall0 = time.monotonic(), time.time()
            _Donated.last = None
            if a.cold:
                D._LEARNED.clear()
            _Lanes.learned = False
            res, enum, l0, l1, used = run(name, w, a)
            learned = _Lanes.learned
            total = time.monotonic() - t0
            dn, _Donated.last = _Donated.last, None
            given = (f"; {dn.cut} unit(s) handed work back to idle workers ({dn.pieces} calls of pieces), "
                     f"{dn.again} run again whole") if dn is not None else ""
            if w > 1:
                given = ("; dealt from the group times of the run before" if learned else "; dealt cold") + given
            if a.trace:
                per_unit, line = trace_summary(wall0, one)
                line += f"; the driver's CPU {DRIVER_CPU[0]:.2f} s (the whole search)"
                one = per_unit if w == 1 and one is None else one
                traces.append(f"- {w} worker(s): {line}{given}")
                print(traces[-1], flush=True)
            elif given:
                traces.append(f"- {w} worker(s){given}")
            if base is None:
                base = (enum, total, res.stats.states, res.candidates[0].key)
            same = (res.stats.states, res.candidates[0].key) == base[2:]
            row = (f"| {w} | {enum:.1f} s | {base[0] / enum:.2f} | {base[0] / enum / w:.2f} | "
                   f"{total:.1f} s | {base[1] / total:.2f} | {base[1] / total / w:.2f} | {total - enum:.1f} s | "
                   f"{'-' if used is None else f'{sum(used):.1f} s (sys {used[1]:.1f})'} | ")
            if at_n:
                if w in at_n and w not in at_once:
                    at_once[w] = independent(name, w, a)
                    if any((s, k) != base[2:] for _, s, k in at_once[w]):
                        row += "(an independent search DIFFERS from 1 worker) "
                if w in at_once:
                    ts = [t for t, _, _ in at_once[w]]
                    mean = sum(ts) / len(ts)
                    row += (f"{mean:.1f} s ({min(ts):.1f}-{max(ts):.1f}) | {w * base[1] / mean:.2f} | "
                            f"{mean / (w * total):.2f} | ")
                else:
                    row += "- | - | - | "
            row += (f"{res.stats.states}{'' if same else ' (DIFFERS from 1 worker)'}"
                    f"{' (stopped: ' + res.stats.stopped + ')' if res.stats.stopped else ''} | "
                    f"{res.candidates[0].time_us:.2f} us "
                    f"{'(reference)' if res.candidates[0].key == 'reference' else ''}| {l0:.1f} / {l1:.1f} |")
            out.append(row)
            print(row, flush=True)
        if traces:
            out += ["", f"Trace (--trace {a.trace}):" if a.trace else "Work handed back (driver._Donated):", ""] + traces
        out.append("")
        # after each program: a run cut short by a time limit keeps the tables done
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
