"""`python -m mirage.lift module:kernel --grid G ARG... [-D NAME=VALUE ...]`

Lift a Triton kernel from the command line and print its report. ARG is an array
`f32[3,6]` (also f16, f64), an int or a float, in the kernel's argument order; `-D`
gives a tl.constexpr. `python -m mirage.lift --case softmax` lifts a corpus kernel with
its own launch (`--list` lists them).
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys

import numpy as np

from .errors import LiftError

_DT = {"f32": np.float32, "f16": np.float16, "f64": np.float64}


def parse_arg(text: str):
    m = re.fullmatch(r"(f16|f32|f64)\[([\d, ]*)\]", text.strip())
    if m:
        shape = tuple(int(s) for s in m.group(2).split(",") if s.strip())
        return np.zeros(shape, _DT[m.group(1)])
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"argument {text!r}: expected f32[d0,d1,...], an int or a float") from None


def parse_define(text: str):
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text!r}: expected NAME=VALUE")
    return name, parse_arg(value)


def load_kernel(spec: str):
    mod, colon, name = spec.partition(":")
    if not colon:
        raise LiftError(f"{spec!r}: expected module:kernel (e.g. mirage.lift.corpus:softmax_kernel)")
    try:
        m = importlib.import_module(mod)
    except ImportError as e:
        raise LiftError(f"cannot import {mod}: {e}") from None
    if not hasattr(m, name):
        raise LiftError(f"module {mod} has no {name}")
    return getattr(m, name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mirage.lift", description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", nargs="?", help="module:kernel")
    ap.add_argument("args", nargs="*", type=parse_arg, help="launch arguments")
    ap.add_argument("--grid", type=lambda s: tuple(int(x) for x in s.split(",")), help="grid, e.g. 4 or 2,3")
    ap.add_argument("-D", dest="defines", action="append", type=parse_define, default=[], help="constexpr NAME=VALUE")
    ap.add_argument("--case", help="lift a kernel of mirage.lift.corpus with its launch")
    ap.add_argument("--list", action="store_true", help="list the corpus kernels")
    a = ap.parse_intermixed_args(argv)
    try:
        from .api import lift_triton

        if a.list or a.case:
            from . import corpus

            if a.list:
                for c in corpus.CASES + corpus.BUGGED:
                    print(f"{c.name:22s} {c.formula}")
                return 0
            c = corpus.case(a.case)
            r = lift_triton(c.kernel, c.grid, *c.make(np.random.default_rng(0)), **c.constexprs)
        else:
            if not a.kernel or a.grid is None:
                ap.error("give module:kernel and --grid (or --case NAME)")
            r = lift_triton(load_kernel(a.kernel), a.grid, *a.args, **dict(a.defines))
    except (LiftError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(r.report())
    return 0 if r.verified else 2


if __name__ == "__main__":
    sys.exit(main())
