"""A seeded, bounded fuzzer of `mirage-opt` (issue 16).

Mutates the repository's valid `.mlir` inputs (the chunks of `examples/*.mlir` and
`test/**/*.mlir` that parse and verify) and runs each mutant through five modes: no pass
(parse + verify), `--mirage-superoptimize` (tiny time limit and search limits),
`--mirage-verify`, `--convert-mirage-to-gpu` and `--mirage-smem-plan`. Every run ends in
one outcome:

- `ok`: the module was printed and no error was reported;
- `located`: a user diagnostic with a place (`file:line:col`, or `loc(` in its text);
- `unlocated`: an error without a place;
- `internal`: a bug: the pass catch-all's "internal error in pass", or a Python
  exception escaping the driver (what `mirage-opt` prints as "internal error");
- `crash`: the process running the case died (a segfault or abort in C++);
- `hang`: the case ran past the per-run timeout.

Cases run in-process in a forked worker (much faster than one `mirage-opt` process per
run); the parent kills and restarts the worker on a crash or a hang. A case is a pure
function of (seed, index), so a failure is reproduced with `case(seeds, seed, index)`.
Used by `test/python/test_fuzz_mirage_opt.py` (a few hundred cases in CI) and
`benchmarks/fuzz_mirage_opt.py` (the long run).
"""
from __future__ import annotations

import glob
import multiprocessing as mp
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPLIT = re.compile(r"^// -----\s*$", re.M)
OUTCOMES = ("ok", "located", "unlocated", "internal", "crash", "hang")

# Small limits so that a superoptimize run is a fraction of a second; the time limit is
# also what the pass must honour (runs over it are counted as `late`). `cache-dir=none`:
# every run searches, and random programs do not fill the user's result cache.
SUPER_TIME_LIMIT = 0.3
MODES = {
    "parse": [],
    "superoptimize": [f"--mirage-superoptimize=time-limit={SUPER_TIME_LIMIT} max-kernel-ops=2 max-block-ops=5 "
                      "max-graph-defs=1 workers=1 verbose=0 cache-dir=none"],
    "verify": ["--mirage-verify=max-trials=4"],
    "convert-mirage-to-gpu": ["--convert-mirage-to-gpu"],
    "smem-plan": ["--mirage-smem-plan"],
}
# a superoptimize run this much past its time limit is `late` (interpreter overhead,
# parsing and printing are outside the search's clock)
LATE_GRACE = 1.5


# -- seeds ----------------------------------------------------------------------------------

def seed_files(root: str = ROOT) -> list[str]:
    files = sorted(glob.glob(os.path.join(root, "examples", "*.mlir")))
    files += sorted(f for f in glob.glob(os.path.join(root, "test", "**", "*.mlir"), recursive=True)
                    if f"{os.sep}Output{os.sep}" not in f)
    return files


def seeds(root: str = ROOT, runner: "Runner | None" = None) -> list[tuple[str, str]]:
    """[(name, text)]: every `// -----` chunk of the seed files that parses and verifies
    (mutating an input that is already invalid tests little); comments (lit RUN/CHECK
    lines, expected-* annotations) are dropped so that cases are smaller. The chunks are
    parsed in `runner`'s worker, so that this process creates no MLIR context before it
    forks workers."""
    out = []
    files = seed_files(root)
    if not files:  # an installed package has no examples/ or test/ beside it
        raise FileNotFoundError(f"no .mlir seed files under {root!r}: pass the repository's root")
    own = runner is None
    runner = runner or Runner()
    for f in files:
        rel = os.path.relpath(f, root)
        for k, chunk in enumerate(SPLIT.split(open(f).read())):
            text = "\n".join(l for l in chunk.split("\n") if not l.lstrip().startswith("//")).strip() + "\n"
            if "func.func" not in text:
                continue
            if runner.run(text, [])[0] == "ok":
                out.append((f"{rel}#{k}", text))
    if own:
        runner.close()
    return out


# -- mutators -------------------------------------------------------------------------------
# Each takes (rng, text) and returns the mutated text (or the same text if it found
# nothing to change); `case` stacks one to three of them.

INT = re.compile(r"(?<![\w.%#@^])-?\d+(?![\w.])")
SHAPE = re.compile(r"tensor<((?:\d+x)*)(\w+)>")
MAP = re.compile(r"<((?:\s*[xyzi]\s*->\s*-?\d+\s*,?)*)>")
OPNAME = re.compile(r"\b(kn|tb|th)\.(\w+)")
DTYPES = ["f16", "bf16", "f32", "f64", "i32", "i8", "f8E4M3FN", "i1", "index"]
HUGE = [2 ** 63 - 1, 2 ** 63 - 2, 2 ** 62, 2 ** 32 + 1, 2 ** 31, -1, -64, -(2 ** 63), 0, 1025, 65536]


def _sub_one(rng, pattern, text, repl):
    ms = list(pattern.finditer(text))
    if not ms:
        return text
    m = rng.choice(ms)
    return text[:m.start()] + repl(m) + text[m.end():]


def byte_flip(rng, text):
    if not text:
        return text
    b = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        b[i] = rng.choice([b[i] ^ (1 << rng.randrange(7)), rng.choice(b"{}()<>[],:%@=-x0123456789 \n\"")])
    return b.decode("utf-8", "replace")


def line_edit(rng, text):
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    what = rng.randrange(4)
    if what == 0:
        del lines[i]
    elif what == 1:
        lines.insert(j, lines[i])
    elif what == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:  # truncate a line
        lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
    return "\n".join(lines)


def swap_int(rng, text):
    ints = INT.findall(text)
    if not ints:
        return text
    return _sub_one(rng, INT, text, lambda m: rng.choice(ints + ["0", "1", "2", "3", "-1", "7", "128"]))


def huge_int(rng, text):
    return _sub_one(rng, INT, text, lambda m: str(rng.choice(HUGE)))


def swap_dims(rng, text):
    def repl(m):
        dims = [d for d in m.group(1).split("x") if d]
        if dims and rng.random() < 0.7:
            k = rng.randrange(len(dims))
            dims[k] = str(rng.choice([1, 2, 3, 4, 8, 16, 64, 4096, int(dims[k]) * 2, max(1, int(dims[k]) // 2),
                                      0, 2 ** 40]))
        elif dims and rng.random() < 0.5:
            rng.shuffle(dims)
        elif dims:
            del dims[rng.randrange(len(dims))]
        else:
            dims = ["4"]
        return "tensor<" + "".join(d + "x" for d in dims) + m.group(2) + ">"
    return _sub_one(rng, SHAPE, text, repl)


def swap_map(rng, text):
    def repl(m):
        keys = ["x", "y", "z", "i"]
        n = rng.randint(0, 3)
        entries = {rng.choice(keys): rng.choice([-1, 0, 1, 2, 3, 5]) for _ in range(n)}
        return "<" + ", ".join(f"{k} -> {v}" for k, v in entries.items()) + ">"
    return _sub_one(rng, MAP, text, repl)


def _op_names():
    from ..core.ops import OPS

    return sorted(OPS)


def swap_op(rng, text):
    names = _op_names()
    def repl(m):
        if rng.random() < 0.5:  # the same op at another level
            return rng.choice(["kn", "tb", "th"]) + "." + m.group(2)
        return m.group(1) + "." + rng.choice(names)
    return _sub_one(rng, OPNAME, text, repl)


def swap_dtype(rng, text):
    old = rng.choice(["f16", "f32", "bf16"])
    new = rng.choice(DTYPES)
    ms = [m for m in re.finditer(rf"(?<=x){old}(?=>)", text)]
    if not ms:
        return text
    if rng.random() < 0.5:  # everywhere: a consistent, maybe unsupported, dtype
        return re.sub(rf"(?<=x){old}(?=>)", new, text)
    m = rng.choice(ms)
    return text[:m.start()] + new + text[m.end():]


TERMINATOR = re.compile(r"^\s*(return|func\.return|tb\.output|th\.yield)\b.*$\n?", re.M)


def drop_terminator(rng, text):
    return _sub_one(rng, TERMINATOR, text, lambda m: "")


FUNC = re.compile(r"(func\.func @[\w$.]+\([^)]*\))\s*->\s*(\([^)]*\)|tensor<[^>]*>)")
RETURN = re.compile(r"^(\s*)return\b.*$", re.M)


def no_results(rng, text):
    """A function that returns nothing (the last function's results and its return)."""
    ms = list(FUNC.finditer(text))
    if not ms:
        return text
    m = ms[-1]
    text = text[:m.start()] + m.group(1) + text[m.end():]
    rs = [r for r in RETURN.finditer(text) if r.start() > m.start()]
    if rs:
        r = rs[0]
        text = text[:r.start()] + r.group(1) + "return" + text[r.end():]
    return text


ARG = re.compile(r"(%[\w]+): (tensor<[^>]*>)")


def add_tosa(rng, text):
    """A TOSA op on a function argument, its result returned or left unused."""
    ms = list(ARG.finditer(text))
    rs = list(RETURN.finditer(text))
    if not ms or not rs:
        return text
    a = rng.choice(ms)
    v, ty = a.group(1), a.group(2)
    op = rng.choice(["tosa.exp", "tosa.abs", "tosa.negate", "tosa.log", "tosa.sigmoid"])
    if op == "tosa.negate":
        line = f"  %tosa_v = tosa.negate {v}, %tosa_z, %tosa_z : ({ty}, {_scalar(ty)}, {_scalar(ty)}) -> {ty}"
        line = (f"  %tosa_z = \"tosa.const\"() <{{values = dense<0.0> : {_scalar(ty)}}}> : () -> {_scalar(ty)}\n"
                + line)
    else:
        line = f"  {'%tosa_v'} = {op} {v} : ({ty}) -> {ty}"
    r = rng.choice(rs)
    text = text[:r.start()] + line + "\n" + text[r.start():]
    if rng.random() < 0.5:  # return the TOSA value instead of the first result (same type or not)
        r = next(x for x in RETURN.finditer(text) if x.start() > r.start())
        body = r.group(0)
        text = text[:r.start()] + re.sub(r"return\s+%[\w]+", "return %tosa_v", body, count=1) + text[r.end():]
    return text


def _scalar(ty: str) -> str:
    m = re.match(r"tensor<(?:\d+x)*(\w+)>", ty)
    return f"tensor<1x{m.group(1) if m else 'f16'}>"


MUTATORS = {
    "byte_flip": byte_flip, "line_edit": line_edit, "swap_int": swap_int, "huge_int": huge_int,
    "swap_dims": swap_dims, "swap_map": swap_map, "swap_op": swap_op, "swap_dtype": swap_dtype,
    "drop_terminator": drop_terminator, "no_results": no_results, "add_tosa": add_tosa,
}


def case(seed_list, seed: int, index: int) -> tuple[str, str, tuple[str, ...]]:
    """(seed name, mutated text, mutator names) of case `index` of the run seeded `seed`."""
    rng = random.Random(f"{seed}/{index}")
    name, text = seed_list[rng.randrange(len(seed_list))]
    muts = tuple(rng.choice(sorted(MUTATORS)) for _ in range(rng.choice([1, 1, 1, 2, 2, 3])))
    for m in muts:
        text = MUTATORS[m](rng, text)
    return name, text, muts


# -- one run, in-process ---------------------------------------------------------------------

LOCATED = re.compile(r"loc\(")


def run_case(text: str, argv: list[str], fname: str = "fuzz.mlir") -> tuple[str, str]:
    """(outcome, first error or '') of `mirage-opt fname argv` on `text`, in this process
    (crashes and hangs are the caller's: see `Runner`)."""
    from ..mlir import diagnostics as D
    from ..mlir import opt as M

    ours = M.registry()
    try:
        args = M.parse_args(argv + [fname], ours)
        with D.collect() as sink:
            out = M.process_chunk(text, args, ours, fname, sink)
    except M.UsageError as e:
        return "unlocated", f"usage error: {e}"
    except Exception as e:  # escaped the driver: mirage-opt's "internal error"
        return "internal", f"{type(e).__name__}: {e}"
    for d in sink.diags:
        if d.file in ("-", ""):  # as mirage-opt prints them
            d.file = fname
    errors = [d for d in sink.diags if d.severity == "error"]
    if out is not None and not errors:
        return "ok", ""
    if not errors:
        return "unlocated", "failed without an error"
    for d in errors:
        if "internal error in pass" in d.message:
            return "internal", d.format()
    for d in errors:
        if not d.line and not LOCATED.search(d.message):
            return "unlocated", d.format()
    return "located", errors[0].format()


# -- worker process with a timeout -------------------------------------------------------------

def _worker(conn):
    import faulthandler

    os.setpgid(0, 0)  # a process group: a hang kills the search's own child processes too
    faulthandler.disable()  # a crash is reported by the parent, without a dump from here
    # the passes' progress and MLIR's own printing would flood the fuzzer's output
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        text, argv = job
        t = time.monotonic()
        outcome, msg = run_case(text, argv)
        conn.send((outcome, msg, time.monotonic() - t))


# Runners of several threads fork their workers one at a time: a worker forked while
# another runner holds both ends of its new pipe would keep that pipe open, and the
# other worker's death would look like a hang.
_START = threading.Lock()


class Runner:
    """Runs cases in a forked worker; a case that kills the worker is a `crash`, one that
    takes longer than `timeout` seconds a `hang` (the worker is killed and restarted)."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.proc = None

    def _start(self):
        from ..mlir import opt as M

        M.registry()  # import the passes once, before forking
        ctx = mp.get_context("fork")
        with _START:
            self.conn, child = ctx.Pipe()
            # not a daemon: the superoptimize pass starts child processes of its own
            self.proc = ctx.Process(target=_worker, args=(child,))
            self.proc.start()
            child.close()

    def _stop(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone, or not yet its own group
                self.proc.kill()
            self.proc.join()
            self.conn.close()
            self.proc = None

    def run(self, text: str, argv: list[str]) -> tuple[str, str, float]:
        if self.proc is None:
            self._start()
        t = time.monotonic()
        try:
            self.conn.send((text, argv))
            # the worker's own children (a search's pool) may hold the pipe open after it
            # died: look at the worker itself too
            while not self.conn.poll(0.25):
                if not self.proc.is_alive():
                    raise EOFError
                if time.monotonic() - t > self.timeout:
                    self._stop()
                    return "hang", f"no answer in {self.timeout:g} s", time.monotonic() - t
            return self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.proc.join(1.0)
            code = self.proc.exitcode
            self._stop()
            return "crash", f"worker died (exit code {code})", time.monotonic() - t

    def close(self):
        self._stop()


# -- a run ----------------------------------------------------------------------------------

@dataclass
class Report:
    cases: int = 0
    counts: dict = field(default_factory=lambda: {m: Counter() for m in MODES})
    examples: dict = field(default_factory=dict)  # (mode, outcome) -> [(index, seed, mutators, message)]
    late: list = field(default_factory=list)  # superoptimize runs past time limit + grace
    seconds: float = 0.0

    def bad(self) -> dict:
        """{(mode, outcome): count} for the outcomes that are bugs."""
        return {(m, o): c[o] for m, c in self.counts.items() for o in ("internal", "unlocated", "crash", "hang")
                if c[o]}

    def table(self) -> str:
        rows = ["| mode | " + " | ".join(OUTCOMES) + " | runs |", "|---" * (len(OUTCOMES) + 2) + "|"]
        for m, c in self.counts.items():
            rows.append(f"| {m} | " + " | ".join(str(c[o]) for o in OUTCOMES) + f" | {sum(c.values())} |")
        return "\n".join(rows)


def fuzz(n: int, seed: int = 0, modes=None, timeout: float = 30.0, jobs: int = 1, root: str = ROOT,
         progress=None, keep_examples: int = 5, seed_list=None, deadline: float | None = None) -> Report:
    """Run cases 0..n-1 of the run seeded `seed` through `modes` (names of MODES); with
    `deadline` (time.monotonic), no case starts after it (`Report.cases` says how many ran)."""
    modes = list(modes or MODES)
    seed_list = seed_list if seed_list is not None else seeds(root)
    rep = Report(counts={m: Counter() for m in modes})
    t0 = time.monotonic()
    lock = threading.Lock()
    next_index = [0]

    def work():
        runner = Runner(timeout)
        try:
            while True:
                with lock:
                    i = next_index[0]
                    if i >= n or (deadline is not None and time.monotonic() > deadline):
                        return
                    next_index[0] += 1
                name, text, muts = case(seed_list, seed, i)
                for m in modes:
                    outcome, msg, secs = runner.run(text, MODES[m])
                    with lock:
                        rep.counts[m][outcome] += 1
                        ex = rep.examples.setdefault((m, outcome), [])
                        if outcome != "ok" and len(ex) < keep_examples:
                            ex.append((i, name, muts, msg))
                        if m == "superoptimize" and outcome != "hang" and secs > SUPER_TIME_LIMIT + LATE_GRACE:
                            rep.late.append((i, name, muts, round(secs, 2)))
                with lock:
                    rep.cases += 1
                    if progress is not None:
                        progress(rep)
        finally:
            runner.close()

    threads = [threading.Thread(target=work) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rep.seconds = time.monotonic() - t0
    return rep
