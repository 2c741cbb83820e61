#!/usr/bin/env python3
"""Checks of issue 11's "Done when" (results: benchmarks/results/arch_check.md).

    # an old commit's python/ beside the installed compiled libraries, and a module run with it
    python benchmarks/arch_check.py export cb359d9 /tmp/t_cb
    python benchmarks/arch_check.py run /tmp/t_cb mirage.lower benchmarks/programs/X.mlir -o B/cb/X
    #   --force-pv-a kmaj|rmaj: the layout experiment (see `force_pv_a`)
    # per-kernel comparison of two versions' lowerings (B/<v>/<p>.gpu.mlir and B/<v>/<p>/main/main.ptx)
    python benchmarks/arch_check.py kernels B cb ba PROGRAM...
    # the shared-memory layout of the A operand of the attention's P @ V kernels
    python benchmarks/arch_check.py atile B cb,ba,head PROGRAM:KERNEL...
    # where operator names occur outside the op table, ODS and tests
    python benchmarks/arch_check.py ops [--root DIR] gelu silu rms_norm
    # one program of examples/benchmarks.py lowered by an old tree: sha256 of its GPU MLIR and PTX
    python benchmarks/arch_check.py run /tmp/t_cb benchmarks/arch_check.py bench gqa fused 8
    # import cycles at a commit (modules and packages)
    python benchmarks/arch_check.py cycles 3b894ef
"""
from __future__ import annotations

import argparse
import ast
import collections
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def git(*args) -> str:
    return subprocess.run(("git",) + args, capture_output=True, text=True, check=True, cwd=ROOT).stdout


# -- an old tree -----------------------------------------------------------------------

def export(commit: str, dest: str) -> int:
    """python/ of `commit` under dest/python, with the installed package's compiled libraries
    (mirage/_lib) and generated dialect bindings copied in: the C++ changed since cb359d9 only
    by the #tb.layout/#tb.smem attributes, which the default lowering path never meets."""
    import mirage.config

    os.makedirs(dest, exist_ok=True)
    tar = subprocess.run(("git", "archive", commit, "python"), capture_output=True, check=True, cwd=ROOT).stdout
    subprocess.run(("tar", "-x", "-C", dest), input=tar, check=True)
    lib = mirage.config.lib_dir()
    shutil.copytree(lib, os.path.join(dest, "python", "mirage", "_lib"), dirs_exist_ok=True)
    gen = os.path.join(os.path.dirname(os.path.dirname(lib)), "mirage", "mlir", "dialects")
    for f in os.listdir(gen):
        if f.endswith(("_ops_gen.py", "_enum_gen.py")):
            shutil.copy(os.path.join(gen, f), os.path.join(dest, "python", "mirage", "mlir", "dialects"))
    print(os.path.join(dest, "python"))
    return 0


def force_pv_a(pref: str) -> None:
    """Experiment, not a fix: the layout ILP is told the innermost dim of the A operand of
    the attention's P @ V matmul (its K chunk 241 = 4097 keys / 17), where neither candidate
    row is a multiple of 16 bytes, so the model scores both as element loads, a tie:
    kmaj = the row dim (-2) innermost, rmaj = the K dim (-1) innermost."""
    from mirage.optimize import layout as L

    orig = L._Costs._op

    def _op(self, op):
        orig(self, op)
        if op.kind == "matmul":
            a = op.inputs[0]
            r = len(a.shape)
            if r >= 2 and a.shape[-1] == 241 and all(
                    (a.shape[d] * a.dtype.itemsize) % 16 or a.dtype.itemsize != 2 for d in (r - 1, r - 2)):
                want = r - 2 if pref == "kmaj" else r - 1
                self._add(a, lambda d, s: 0 if d == want else 10**6)
    L._Costs._op = _op


def run_with(tree: str, module: str, args, force: str | None) -> int:
    """Run `python -m module args` (or the script `module`.py) with `tree`'s mirage (the editable install's finder, which
    maps mirage to this checkout, is dropped)."""
    import runpy

    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    for m in [m for m in sys.modules if m == "mirage" or m.startswith("mirage.")]:
        del sys.modules[m]
    sys.path.insert(0, os.path.abspath(os.path.join(tree, "python") if os.path.isdir(os.path.join(tree, "python")) else tree))
    import mirage

    if not mirage.__file__.startswith(sys.path[0]):
        raise SystemExit(f"mirage imported from {mirage.__file__}, not {sys.path[0]}")
    if force:
        force_pv_a(force)
    sys.argv = [module] + list(args)
    if module.endswith(".py"):  # a script
        runpy.run_path(module, run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


# -- per-kernel comparison -----------------------------------------------------------------

def _split(text: str, start: str, skip: str | None = None) -> dict:
    out, cur, name = {}, [], None
    for line in text.splitlines():
        m = re.search(start, line)
        if m:
            if name:
                out[name] = "\n".join(cur)
            name, cur = m.group(1), []
        if name and not (skip and skip in line):
            cur.append(line)
    if name:
        out[name] = "\n".join(cur)
    return out


def gpu_funcs(path: str) -> dict:
    return _split(open(path).read(), r"gpu\.func @(\w+)")


def ptx_entries(path: str) -> dict:
    # block labels carry the function's index in the module, and a function's text ends
    # with the next one's `.globl` comment: neither is the kernel's code
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", open(path).read())
    return _split(text, r"\.entry (\w+)\(", skip="// .globl")


def kernels(b: str, va: str, vb: str, programs) -> int:
    for p in programs:
        ga, gb = gpu_funcs(os.path.join(b, va, p + ".gpu.mlir")), gpu_funcs(os.path.join(b, vb, p + ".gpu.mlir"))
        pa = ptx_entries(os.path.join(b, va, p, "main", "main.ptx"))
        pb = ptx_entries(os.path.join(b, vb, p, "main", "main.ptx"))
        print(f"{p}: {va} {len(ga)} kernels, {vb} {len(gb)}; only in {va}: {sorted(set(ga) - set(gb))}; "
              f"only in {vb}: {sorted(set(gb) - set(ga))}")
        print(f"   same name, other GPU MLIR: {[k for k in ga if k in gb and ga[k] != gb[k]]}; "
              f"other PTX: {[k for k in pa if k in pb and pa[k] != pb[k]]}")
    return 0


def atile(b: str, versions, pairs) -> int:
    """The first multiply of the A-tile index in the scalar K loop (an f32 iter_args loop
    reading shared memory): K loop variable x rows = the row dim innermost, row x K chunk =
    the K dim innermost."""
    for pk in pairs:
        p, k = pk.split(":")
        for v in versions.split(","):
            a = gpu_funcs(os.path.join(b, v, p + ".gpu.mlir"))[k].splitlines()
            consts = dict(m.groups() for m in (re.search(r"%(c\d+_inde_) = arith.constant (\d+)", x) for x in a) if m)
            found = "no scalar K loop"
            for i, line in enumerate(a):
                if "iter_args" in line and "-> (f32)" in line and any("memref.load %m" in x for x in a[i + 1:i + 5]):
                    iv = re.search(r"scf\.for %(\w+) =", line).group(1)
                    m = next(m for m in (re.search(r"arith\.muli %(\w+), %(\w+)", x) for x in a[i + 1:i + 4]) if m)
                    n = consts.get(m.group(2), m.group(2))
                    found = (f"K var x {n}: row dim innermost (kmaj)" if m.group(1) == iv
                             else f"row x {n}: K dim innermost (rmaj)")
                    break
            print(f"{p} {k} {v}: {found}")
    return 0


def bench(name: str, kind: str, bs: int) -> int:
    import hashlib
    import json

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from benchmarks import BENCHMARKS
    from mirage.lower import convert_to_gpu
    from mirage.lower.pipeline import run_pipeline

    low = convert_to_gpu(getattr(BENCHMARKS[name], kind)(bs))
    h = lambda s: hashlib.sha256(s.encode()).hexdigest()[:16]  # noqa: E731
    print(json.dumps({"key": f"{name}/{kind}/bs{bs}", "gpu": h(low.module), "ptx": h(run_pipeline(low.module, "sm_90"))}))
    return 0


# -- operator names --------------------------------------------------------------------------

# the files the op table's docstring (core/ops.py) names as genuine special cases
SPECIAL = ("python/mirage/frontend/torch_import.py", "python/mirage/mlir/tosa.py", "python/mirage/lift/",
           "python/mirage/verify/smt.py", "python/mirage/core/graph.py")


def ops(names, root: str = ROOT) -> int:
    """Each occurrence of an operator name in python/ include/ lib/ outside the table
    (core/ops.py) and the ODS (.td), classified with Python's tokenizer: `str` = the whole
    name as a string literal (code that dispatches on it), `name` = an identifier of that
    name (g.gelu(...), ar.exp(...), np.exp), `prose` = in a comment, docstring or longer
    string; C++ files count matches. `root`: a checkout (default this one, with whatever
    is uncommitted in it; `git archive HEAD python include lib | tar -x -C DIR` for HEAD alone)."""
    def files():
        for top in ("python", "include", "lib"):
            for d, _, fs in os.walk(os.path.join(root, top)):
                if "__pycache__" not in d:
                    yield from (os.path.relpath(os.path.join(d, f), root) for f in fs
                                if f.endswith((".py", ".td", ".cpp", ".h")))
    for op in names:
        w = re.compile(r"\b%s\b" % re.escape(op))
        hits = collections.defaultdict(collections.Counter)
        for rel in files():
            if rel.endswith(".td") or rel == "python/mirage/core/ops.py":
                continue
            text = open(os.path.join(root, rel), encoding="utf-8").read()
            if not w.search(text):
                continue
            if not rel.endswith(".py"):
                hits[rel]["c++"] += len(w.findall(text))
                continue
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.STRING:
                    s = tok.string.lstrip("rbuRBUfF")
                    if op in (s[1:-1], s[3:-3]):
                        hits[rel]["str"] += 1
                    elif w.search(tok.string):
                        hits[rel]["prose"] += len(w.findall(tok.string))
                elif tok.type == tokenize.COMMENT and w.search(tok.string):
                    hits[rel]["prose"] += len(w.findall(tok.string))
                elif tok.type == tokenize.NAME and tok.string == op:
                    hits[rel]["name"] += 1
        code = [f for f, c in hits.items() if (c["str"] or c["name"] or c["c++"]) and not f.startswith(SPECIAL)]
        print(f"== {op}: {len(hits)} files outside ops.py/ODS; code hits outside the listed special cases: {len(code)}")
        for f, c in sorted(hits.items()):
            print(f"   {f}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                  + (" [listed special case]" if f.startswith(SPECIAL) else ""))
    return 0


# -- import cycles ----------------------------------------------------------------------------

def cycles(commit: str) -> int:
    """Strongly connected components of python/mirage's import graph at `commit`: modules
    (module-level imports only, then every import statement as test_imports.py reads them;
    `from pkg import x` goes to pkg.x where that module exists), and packages (mirage.<pkg>,
    mirage.mlir.passes its own, as the test groups them) with and without the edges into
    the top-level `mirage` package, which the test leaves out."""
    files = [f for f in git("ls-tree", "-r", "--name-only", commit, "python/mirage").split()
             if f.endswith(".py") and not f.endswith(("_ops_gen.py", "_enum_gen.py"))]
    mods = {}
    for f in files:
        rel = f[len("python/"):-3].split("/")
        mods[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = (f, rel)

    def edges(toplevel_only):
        E = collections.defaultdict(set)
        for name, (f, rel) in mods.items():
            if name.endswith("__main__"):
                continue
            tree = ast.parse(git("show", f"{commit}:{f}"))
            for node in (tree.body if toplevel_only else ast.walk(tree)):
                targets = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    pkg = rel[:-1]
                    base = pkg[:len(pkg) - node.level + 1] if node.level else []
                    mod = ".".join(base + ([node.module] if node.module else []))
                    targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
                for t in targets:
                    while t and t not in mods:
                        t = t.rpartition(".")[0]
                    if t and t != name:
                        E[name].add(t)
        return E

    def sccs(E):
        idx, low, stack, on, out = {}, {}, [], set(), []

        def visit(v):
            idx[v] = low[v] = len(idx)
            stack.append(v)
            on.add(v)
            for w in E.get(v, ()):
                if w not in idx:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], idx[w])
            if low[v] == idx[v]:
                c = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    c.append(w)
                    if w == v:
                        break
                if len(c) > 1:
                    out.append(sorted(c))
        sys.setrecursionlimit(10000)
        for v in list(E) + [m for s in E.values() for m in s]:
            if v not in idx:
                visit(v)
        return sorted(out, key=len, reverse=True)

    def pkg(m):
        if m.startswith("mirage.mlir.passes"):
            return "mirage.mlir.passes"
        p = m.split(".")
        return ".".join(p[:2]) if len(p) > 1 else m

    for top in (True, False):
        E = edges(top)
        cs = sccs(E)
        print(f"{commit}, {'module-level imports' if top else 'all imports (function-level too)'}: "
              f"{len(cs)} module cycle(s), sizes {[len(c) for c in cs]}")
        for c in cs:
            print(f"   {len(c)}: {', '.join(c)}")
        for skip_top in (True, False):
            P = collections.defaultdict(set)
            for a, bs in E.items():
                for b in bs:
                    if pkg(a) != pkg(b) and not (skip_top and pkg(b) == "mirage"):
                        P[pkg(a)].add(pkg(b))
            print(f"   package cycles ({'edges into mirage/__init__ left out, as test_imports' if skip_top else 'edges into mirage/__init__ counted'}): {sccs(P)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("export")
    s.add_argument("commit")
    s.add_argument("dest")
    s = sub.add_parser("run")
    s.add_argument("tree")
    s.add_argument("--force-pv-a", choices=("kmaj", "rmaj"))
    s.add_argument("module")
    s.add_argument("args", nargs=argparse.REMAINDER)
    s = sub.add_parser("kernels")
    s.add_argument("dir")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("programs", nargs="+")
    s = sub.add_parser("atile")
    s.add_argument("dir")
    s.add_argument("versions")
    s.add_argument("pairs", nargs="+")
    s = sub.add_parser("bench")
    s.add_argument("name")
    s.add_argument("kind", choices=("reference", "fused"))
    s.add_argument("bs", type=int)
    s = sub.add_parser("ops")
    s.add_argument("--root", default=ROOT)
    s.add_argument("names", nargs="+")
    s = sub.add_parser("cycles")
    s.add_argument("commit")
    a = ap.parse_args(argv)
    if a.cmd == "export":
        return export(a.commit, a.dest)
    if a.cmd == "run":
        return run_with(a.tree, a.module, a.args, a.force_pv_a)
    if a.cmd == "kernels":
        return kernels(a.dir, a.a, a.b, a.programs)
    if a.cmd == "atile":
        return atile(a.dir, a.versions, a.pairs)
    if a.cmd == "bench":
        return bench(a.name, a.kind, a.bs)
    if a.cmd == "ops":
        return ops(a.names, a.root)
    return cycles(a.commit)


if __name__ == "__main__":
    sys.exit(main())
