"""Run the reference implementation's own scripts, unchanged, on this implementation.

The scripts are those of mirage-project/mirage (`demo/reference_mugraphs/*.py`,
`benchmark/*.py`). They are read from a checkout (or a bare git directory) given on
the command line and written to a work folder, never into this repository; each runs in
a child process as `python script.py` would run it (its own folder first on sys.path,
no arguments, `__name__ == "__main__"`, a fresh working directory), with this
implementation importable as `mirage`.

    (no option)      on a machine without a GPU, each script runs twice:
                     "strict" stops it at its first CUDA use (a torch CUDA tensor, .cuda(),
                     torch.cuda.*, a μGraph launch g(inputs=...)); "deep" places the
                     script's CUDA tensors on the CPU instead and stops it at the first
                     thing that needs a GPU to run (a μGraph launch, torch.cuda.synchronize,
                     CUDA events and streams, a call into flash_attn / flashinfer), after
                     checking that the launch's arguments are accepted. Prints a table
                     (--markdown FILE, --json FILE write it; --only PART picks scripts).
    --build DIR      as deep, but each μGraph launch compiles the graph (once) to a PTX
                     bundle (sm_90) and returns zeros, so the script goes on to its next
                     launch; then a "replay" pass hides MLIR, as on a GPU machine without
                     it, and checks that every launch finds its bundle. Search results and
                     bundles go to DIR/cache, the scripts to DIR/scripts, their working
                     folders (checkpoint files) to DIR/work.
    --run DIR        on a GPU machine (torch + CUDA, no MLIR needed): runs the scripts of
                     --build unchanged, checks each distinct μGraph's first launch against
                     the reference interpreter (numpy float64 on the same inputs), and
                     writes DIR/run.md.

Searches are bounded by MIRAGE_SEARCH_TIME_LIMIT (seconds), which `superoptimize`
honours when the script does not pass `time_limit` itself (docs/compat.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GLOBS = ("demo/reference_mugraphs/", "benchmark/")
GPU_ONLY_MODULES = ("flash_attn", "flashinfer")  # GPU kernel libraries some demos import


# -- the scripts ---------------------------------------------------------------------------

def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def extract(reference: str, dest: str) -> tuple[str, list[str]]:
    """Write the reference's scripts under `dest` (same relative paths); returns the
    commit (or 'unknown') and the relative paths."""
    reference = os.path.abspath(reference)
    git_dir = None
    if os.path.isdir(os.path.join(reference, ".git")):
        git_dir = os.path.join(reference, ".git")
    elif os.path.isfile(os.path.join(reference, "HEAD")) and os.path.isdir(os.path.join(reference, "objects")):
        git_dir = reference
    if git_dir is None and not os.path.isdir(reference):
        sys.exit(f"mirage_scripts: {reference}: not a checkout of mirage-project/mirage nor its git directory")
    commit = _git(git_dir, "rev-parse", "HEAD").strip() if git_dir else "unknown"
    if git_dir and not os.path.isdir(os.path.join(reference, "demo")):  # bare: read from the commit
        names = [p for p in _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD").split()
                 if p.endswith(".py") and any(p.startswith(g) and "/" not in p[len(g):] for g in GLOBS)]
        for p in names:
            os.makedirs(os.path.join(dest, os.path.dirname(p)), exist_ok=True)
            with open(os.path.join(dest, p), "w") as f:
                f.write(_git(git_dir, "show", f"HEAD:{p}"))
    else:
        names = []
        for g in GLOBS:
            folder = os.path.join(reference, g)
            for n in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                if n.endswith(".py"):
                    os.makedirs(os.path.join(dest, g), exist_ok=True)
                    shutil.copy(os.path.join(folder, n), os.path.join(dest, g, n))
                    names.append(g + n)
    if not names:
        sys.exit(f"mirage_scripts: no scripts under {', '.join(GLOBS)} in {reference}")
    return commit, sorted(names)


# -- the child: one script under the harness -----------------------------------------------

class GPUCall(BaseException):
    """The script reached something that needs a GPU. A BaseException, so that a script's
    own `except Exception` does not swallow the stop."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class Recorder:
    """How far the script got: the μGraph API calls it made, in order."""

    def __init__(self):
        self.graphs = 0
        self.events: list[str] = []
        self.checks: list[dict] = []

    def note(self, text: str) -> None:
        if not self.events or self.events[-1] != text:  # a loop's repeats once
            self.events.append(text)


def _wrap(owner, name: str, before=None, after=None):
    """Replace `owner.name` by a function that calls `before(*args, **kw)` and
    `after(result, seconds, *args, **kw)` around the original."""
    orig = getattr(owner, name)

    def wrapper(*args, **kw):
        if before is not None:
            before(*args, **kw)
        t0 = time.monotonic()
        out = orig(*args, **kw)
        if after is not None:
            after(out, time.monotonic() - t0, *args, **kw)
        return out

    setattr(owner, name, wrapper)


def _kernels(g) -> int:
    return sum(1 for op in g.ops if op.kind not in ("input", "output"))


def _install_mirage_hooks(rec: Recorder, mode: str) -> None:
    import mirage as mi
    from mirage.core.graph import KNGraph

    def new_graph(out, dt):
        rec.graphs += 1

    _wrap(mi, "new_kernel_graph", after=new_graph)
    _wrap(KNGraph, "superoptimize", before=lambda g, *a, **k: rec.note("superoptimize called"),
          after=lambda best, dt, g, *a, **k: rec.note(
              f"superoptimize returned in {dt:.1f} s ({_kernels(g)} -> {_kernels(best)} kernels"
              f"{', from cache/checkpoint' if best.search.from_cache else ''}"
              f"{', stopped: ' + best.search.stats.stopped if best.search.stats.stopped else ''})"))
    if mode == "build":
        _wrap(KNGraph, "superoptimize", after=_keep_stopped_search)
    if hasattr(mi, "generate_cuda_program"):
        _wrap(mi, "generate_cuda_program",
              after=lambda p, dt, *a, **k: rec.note(f"generate_cuda_program returned ({p.get('target')}, "
                                                    f"{len(p['code'])} chars of code)"))
    _wrap(KNGraph, "visualize", after=lambda path, dt, *a, **k: rec.note(f"visualize wrote {os.path.basename(path)}"))

    if mode == "run":
        seen = set()

        def check(out, dt, g, *a, **k):
            h = g.get_owner_independent_hash()
            if h not in seen:
                seen.add(h)
                try:
                    rec.checks.append(_check_launch(g, k.get("inputs", a[0] if a else None), out))
                except Exception as e:  # noqa: BLE001 (the check's own failure is reported, the script goes on)
                    rec.checks.append({"graph": g.name, "kernels": _kernels(g), "outputs": [],
                                       "error": f"{type(e).__name__}: {e}"[:300]})
                rec.note(f"μGraph launched ({_kernels(g)} kernels)")

        _wrap(KNGraph, "__call__", after=check)
        return

    if mode in ("build", "replay"):
        import mirage.cuda_program as CP

        if mode == "replay":
            CP.mlir_available = lambda: False  # as on a GPU machine without the MLIR wheels
        done = set()

        def launch_on_cpu(g, *args, **kw):
            import torch
            from mirage import api

            target, _, _ = api.prepare_call(g, *args, **kw)
            key = (g.get_owner_independent_hash(), target)
            if key not in done:
                done.add(key)
                CP.prebuilt_bundle(g, target, build=mode == "build")
                rec.note(f"μGraph {'compiled' if mode == 'build' else 'bundle found'} for {target} "
                         f"({_kernels(g)} kernels)")
            # zeros of the outputs' shapes: the script goes on to its next launch
            return [torch.zeros(t.shape, dtype=getattr(torch, t.dtype.name)) for t in g.outputs]

        KNGraph.__call__ = launch_on_cpu
        return

    def stop(g, *args, **kw):
        from mirage import api

        api.prepare_call(g, *args, **kw)  # the arguments Mirage's call takes, checked as a launch would
        raise GPUCall("μGraph launch g(inputs=...)")

    KNGraph.__call__ = stop


def _keep_stopped_search(best, dt, ref, *args, **kw) -> None:
    """--build: a search stopped by its time limit writes no checkpoint, so the GPU run
    would search again and might launch a μGraph no bundle was built for. The stopped
    search's verified candidates become the script's checkpoint instead."""
    from mirage.search.cache import store_checkpoint

    path = kw.get("previous_checkpoint")
    res = best.search
    if path and res.stats.stopped and not os.path.exists(path):
        store_checkpoint(path, ref, [c.graph for c in res.candidates[:res.config.top_k]])


def _check_launch(g, inputs, outputs) -> dict:
    """The launch's outputs against the reference interpreter in float64 on the same inputs:
    the largest error relative to the largest reference value, per output."""
    import numpy as np

    xs = [t.detach().to("cpu").double().numpy() for t in inputs]
    want = g.evaluate(xs)
    res = {"graph": g.name, "kernels": _kernels(g), "outputs": []}
    for o, w in zip(outputs, want):
        got = o.detach().to("cpu").double().numpy()
        finite = np.isfinite(got) & np.isfinite(w)
        scale = float(np.abs(w[np.isfinite(w)]).max()) if np.isfinite(w).any() else float("nan")
        err = float(np.abs(got - w)[finite].max()) / scale if finite.any() and scale else float("nan")
        res["outputs"].append({"shape": list(got.shape), "rel_err": err,
                               "nonfinite_got": int((~np.isfinite(got)).sum()),
                               "nonfinite_ref": int((~np.isfinite(w)).sum())})
    return res


def _install_torch_hooks(mode: str) -> None:
    """strict: any CUDA use stops the script. deep/build: CUDA tensors are made on the CPU
    (a TorchFunctionMode rewrites the device of factory calls, .cuda() and .to()); what
    still reaches CUDA (synchronize, events, streams, device queries) stops it."""
    try:
        import torch
    except ImportError:
        return

    def cuda_use(*a, **k):
        raise GPUCall("CUDA use (torch)")

    torch.cuda._lazy_init = cuda_use  # every torch CUDA entry point calls it first
    torch.cuda.Event = lambda *a, **k: cuda_use()
    if mode == "strict":
        return
    from torch.overrides import TorchFunctionMode

    def cpu(d):
        return "cpu" if d is not None and torch.device(d).type == "cuda" else d

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = cpu(kwargs["device"])
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple(cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()  # for the rest of the child process


def _stub_gpu_only_modules(script: str) -> list[str]:
    """flash_attn and flashinfer, where the script names them and they are not installed:
    modules whose every function stops the script (they are GPU kernels and nothing else)."""
    import importlib.util
    import types

    def stub(name):
        def attr(a):
            if a.startswith("__"):  # module protocol (torch.compile walks sys.modules' __file__)
                raise AttributeError(a)

            def gpu_call(*args, **kw):
                raise GPUCall(f"{name}.{a}")
            return gpu_call

        m = types.ModuleType(name)
        m.__getattr__ = attr
        return m

    with open(script) as f:
        source = f.read()
    stubbed = []
    for name in GPU_ONLY_MODULES:
        if name in source and importlib.util.find_spec(name) is None:
            sys.modules[name] = stub(name)
            stubbed.append(name)
    return stubbed


def _where(tb, script: str) -> str:
    frames = [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) == script]
    if not frames:
        return ""
    f = frames[-1]
    return f"line {f.lineno}: `{(f.line or '').strip()}`"


def child(script: str, mode: str, report: str) -> None:
    import runpy

    script = os.path.abspath(script)
    rec = Recorder()
    out = {"script": script, "mode": mode, "stubbed": []}
    t0 = time.monotonic()
    try:
        if mode != "run":
            _install_torch_hooks(mode)
            out["stubbed"] = _stub_gpu_only_modules(script)
        _install_mirage_hooks(rec, mode)
        sys.argv = [script]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")
        out.update(result="finished", where="")
    except GPUCall as e:
        out.update(result="GPU call", what=e.what, where=_where(e.__traceback__, script))
    except SyntaxError as e:  # the script itself does not compile
        out.update(result="error", what=f"SyntaxError: {e.msg}", where=f"line {e.lineno}")
    except BaseException as e:  # noqa: BLE001 (the report names it)
        msg = str(e).strip().splitlines()
        out.update(result="error", what=f"{type(e).__name__}: {msg[0] if msg else ''}"[:300],
                   where=_where(e.__traceback__, script))
    out.update(seconds=round(time.monotonic() - t0, 1), graphs=rec.graphs, events=rec.events, checks=rec.checks)
    with open(report, "w") as f:
        json.dump(out, f, indent=1)


# -- the parent ------------------------------------------------------------------------------

def run_one(script: str, mode: str, cwd: str, env: dict, timeout: float) -> dict:
    os.makedirs(cwd, exist_ok=True)
    report = os.path.join(cwd, f".harness-{mode}.json")
    if os.path.exists(report):
        os.remove(report)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", script, "--mode", mode, "--report", report]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        tail = (p.stdout + p.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "") + (e.stderr or "")
        return {"script": script, "mode": mode, "result": "timeout", "what": f"over {timeout:.0f} s",
                "where": "", "events": [], "graphs": 0, "seconds": round(time.monotonic() - t0, 1),
                "tail": out[-3000:], "checks": []}
    if not os.path.exists(report):
        return {"script": script, "mode": mode, "result": "error", "what": f"harness died (rc {p.returncode})",
                "where": "", "events": [], "graphs": 0, "seconds": round(time.monotonic() - t0, 1),
                "tail": tail, "checks": []}
    with open(report) as f:
        res = json.load(f)
    res["tail"], res["stdout"] = tail, p.stdout[-1000:]
    return res


def _env(cache: str | None, time_limit: float | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    if cache:
        env["MIRAGE_CACHE_DIR"] = cache
        env.pop("MIRAGE_CACHE", None)
    if time_limit:
        env["MIRAGE_SEARCH_TIME_LIMIT"] = str(time_limit)
    return env


def _cell(r: dict) -> str:
    if r["result"] == "GPU call":
        head = f"**ran to first GPU call** ({r['what']}, {r['where']})"
    elif r["result"] == "finished":
        head = "**ran to the end**"
    else:
        head = f"**{r['result']}**: {r['what']} ({r['where'] or 'before the script ran'})"
    done = [f"{r['graphs']} kernel graph(s) built"] + r["events"]
    if r.get("stubbed"):
        done.append("stubbed (not installed): " + ", ".join(r["stubbed"]))
    return head + "; " + "; ".join(done) + f"; {r['seconds']} s"


def table(results: list[dict], modes: list[str]) -> str:
    lines = ["| script | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    by = {}
    for r in results:
        by.setdefault(r["name"], {})[r["mode"]] = r
    for name, rs in by.items():
        lines.append(f"| `{name}` | " + " | ".join(_cell(rs[m]).replace("|", "\\|") for m in modes) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", nargs="?", help="checkout of mirage-project/mirage, or its git directory")
    ap.add_argument("--build", metavar="DIR")
    ap.add_argument("--run", metavar="DIR")
    ap.add_argument("--only", action="append", help="run only scripts whose path contains this (repeatable)")
    ap.add_argument("--time-limit", type=float, default=120.0,
                    help="MIRAGE_SEARCH_TIME_LIMIT for each search (s; default 120)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per script and mode (s; default 900)")
    ap.add_argument("--work", help="work folder (default: a temporary one)")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--markdown", help="write the results table (with date, machine, load, command) here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.mode, a.report)
        return 0
    if a.run:
        return gpu_run(a)
    if not a.reference:
        ap.error("give the reference checkout (or its git directory), or --run DIR")
    root = os.path.abspath(a.build or a.work or tempfile.mkdtemp(prefix="mirage-scripts-"))
    scripts_dir = os.path.join(root, "scripts")
    if os.path.isdir(scripts_dir):
        shutil.rmtree(scripts_dir)
    commit, names = extract(a.reference, scripts_dir)
    names = [n for n in names if not a.only or any(s in n for s in a.only)]
    modes = ["build", "replay"] if a.build else ["strict", "deep"]
    cache = os.path.join(root, "cache")  # one search cache for the modes: the deep run reuses the results
    results = []
    load0 = _load()
    for n in names:
        for m in modes:
            r = run_one(os.path.join(scripts_dir, n), m, os.path.join(root, "work", n.replace("/", "__")),
                        _env(cache, a.time_limit), a.timeout)
            r["name"] = n
            results.append(r)
            print(f"{n} [{m}]: {_cell(r)}", flush=True)
    meta = {"commit": commit, "modes": modes, "time_limit": a.time_limit, "root": root}
    if a.build:
        with open(os.path.join(root, "build.json"), "w") as f:
            json.dump({**meta, "results": results}, f, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**meta, "results": results}, f, indent=1)
    text = table(results, modes)
    print(f"\nreference commit {commit}\n\n{text}")
    if a.markdown:
        import platform

        with open(a.markdown, "w") as f:
            f.write(f"Reference: mirage-project/mirage at {commit}. Date: "
                    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {platform.node()} "
                    f"({platform.machine()}, {os.cpu_count()} cores, no GPU). Load average (1 min) before / "
                    f"after: {load0} / {_load()}. MIRAGE_SEARCH_TIME_LIMIT={a.time_limit:g}.\n"
                    f"Command: `python benchmarks/mirage_scripts.py {' '.join(sys.argv[1:])}`\n\n{text}\n")
    return 0


def _load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def gpu_run(a) -> int:
    """--run DIR: the scripts of --build, unchanged, on this machine's GPU."""
    root = os.path.abspath(a.run)
    with open(os.path.join(root, "build.json")) as f:
        built = json.load(f)
    results = []
    for n in dict.fromkeys(r["name"] for r in built["results"]):  # each script once (build and replay rows)
        if a.only and not any(s in n for s in a.only):
            continue
        r = run_one(os.path.join(root, "scripts", n), "run", os.path.join(root, "work", n.replace("/", "__")),
                    _env(os.path.join(root, "cache"), a.time_limit), a.timeout)
        r["name"] = n
        results.append(r)
        print(f"{n}: {_cell(r)}\n{r['tail'][-600:]}", flush=True)
    lines = [f"reference commit {built['commit']}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             "| script | result | first launch of each μGraph vs numpy float64 (max error / max value) "
             "| last lines printed |",
             "|---|---|---|---|"]
    for r in results:
        checks = "; ".join(f"{c['graph']} ({c['kernels']} kernels): " + c.get("error", "") + ", ".join(
            f"{o['rel_err']:.2e}" + (f" ({o['nonfinite_got']} non-finite, reference {o['nonfinite_ref']})"
                                     if o['nonfinite_got'] or o['nonfinite_ref'] else "")
            for o in c["outputs"]) for c in r["checks"]) or "—"
        printed = " / ".join(ln.strip() for ln in r.get("stdout", "").strip().splitlines()[-2:]).replace("|", "/")
        lines.append(f"| `{r['name']}` | {_cell(r).replace('|', '/')} | {checks} | `{printed[-300:]}` |")
    text = "\n".join(lines)
    with open(os.path.join(root, "run.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(root, "run.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
