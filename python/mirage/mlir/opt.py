"""mirage-opt: an `mlir-opt`-style driver where upstream passes and this project's
Python passes mix in one pipeline.

    mirage-opt [input.mlir|-] [-o out] [--pass-pipeline='builtin.module(a, b{opt=v})']
               [--<pass>[=opt=v ...]] [--split-input-file] [--verify-diagnostics]
               [--mlir-print-ir-after-all] [--help]

Errors in the input or in a pass are reported as `file:line:col: error: ...` with a
non-zero exit, never as a Python traceback (set MIRAGE_DEBUG=1 to see one).
"""
from __future__ import annotations

import os
import re
import sys
import traceback
from dataclasses import dataclass

from . import diagnostics as D
from .registry import Interrupted, Pass, PassFailure, registry

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)
EXPECT = re.compile(r"expected-(error|warning|remark|note)\s*(?:@(above|below|[+-]\d+))?\s*\{\{(.*?)\}\}")


class UsageError(Exception):
    pass


# -- command line ---------------------------------------------------------------------------

@dataclass
class Args:
    input: str = "-"
    output: str = "-"
    pipeline: list = None  # [(name, {opt: value})] or ("upstream", text)
    split: bool = False
    verify_diags: bool = False
    print_after_all: bool = False


def split_top_level(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def parse_options(text: str) -> dict[str, str]:
    """`a=1 b=x` or `a=1,b=x` -> {'a': '1', 'b': 'x'}."""
    out = {}
    for item in re.split(r"[\s,]+", text.strip()):
        if not item:
            continue
        k, eq, v = item.partition("=")
        out[k] = v if eq else "true"
    return out


def parse_pipeline(text: str, ours: dict) -> list:
    text = text.strip()
    m = re.fullmatch(r"builtin\.module\((.*)\)", text, re.S)
    if m:
        text = m.group(1)
    elems = []
    for e in split_top_level(text):
        m = re.fullmatch(r"([\w.-]+)(?:\{(.*)\})?", e, re.S)
        if m and m.group(1) in ours:
            elems.append((m.group(1), parse_options(m.group(2) or "")))
        else:
            elems.append(("upstream", e))
    return elems


def usage(ours: dict) -> str:
    lines = [__doc__.strip(), "", "Options:",
             "  -o <file>                    output file (default stdout)",
             "  --pass-pipeline=<pipeline>   textual pipeline; upstream and mirage passes mix",
             "  --split-input-file           process chunks separated by '// -----' separately",
             "  --verify-diagnostics         check expected-error/-warning/-remark annotations",
             "  --mlir-print-ir-after-all    print the IR after every pass (to stderr)",
             "  --<upstream-pass>            any upstream MLIR pass, e.g. --canonicalize, --cse",
             "", "Mirage passes:"]
    for name, cls in ours.items():
        lines.append(f"  --{name:<27} {cls.summary}")
        for o in cls.options:
            lines.append(f"      {o.name}={o.default!r}".ljust(36) + f" {o.help}")
    return "\n".join(lines)


def parse_args(argv: list[str], ours: dict) -> Args:
    a = Args(pipeline=[])
    it = iter(argv)
    positional = []
    for arg in it:
        if arg in ("-h", "--help", "-help"):
            print(usage(ours))
            sys.exit(0)
        if arg == "-o":
            a.output = next(it, None) or _fail("-o needs a file name")
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            a.output = arg[2:]
        elif arg.startswith("--pass-pipeline="):
            a.pipeline += parse_pipeline(arg.split("=", 1)[1], ours)
        elif arg == "--pass-pipeline":
            a.pipeline += parse_pipeline(next(it, ""), ours)
        elif arg == "--split-input-file":
            a.split = True
        elif arg == "--verify-diagnostics":
            a.verify_diags = True
        elif arg == "--mlir-print-ir-after-all":
            a.print_after_all = True
        elif arg.startswith("--") and len(arg) > 2:
            name, eq, opts = arg[2:].partition("=")
            if name in ours:
                a.pipeline.append((name, parse_options(opts.strip("\"'{}"))))
            else:
                a.pipeline.append(("upstream", f"{name}{{{opts}}}" if eq else name))
        elif arg == "-" or not arg.startswith("-"):
            positional.append(arg)
        else:
            raise UsageError(f"unknown option '{arg}' (see --help)")
    if len(positional) > 1:
        raise UsageError(f"more than one input file given: {' '.join(positional)}")
    a.input = positional[0] if positional else "-"
    return a


def _fail(msg):
    raise UsageError(msg)


# -- running ----------------------------------------------------------------------------------

def _diag_from_mlir(d, fname: str) -> list[D.Diag]:
    sev = str(d.severity).rsplit(".", 1)[-1].lower()
    f, line, col = D.location_of(d.location)
    out = [D.Diag(sev, fname if f in ("-", "") else f, line, col, d.message)]
    for n in d.notes:
        out += _diag_from_mlir(n, fname)
    return out


def build_pass_manager(pipeline, ours, ctx, print_after_all: bool):
    from mlir.passmanager import PassManager

    pm = PassManager("builtin.module", context=ctx)
    for name, opts in pipeline:
        if name == "upstream":
            try:
                pm.add(opts)
            except (ValueError, Exception) as e:  # the bindings raise ValueError on bad text
                raise UsageError(f"unknown pass or bad pipeline element '{opts}': {e}") from None
            continue
        cls: type[Pass] = ours[name]
        try:
            values = cls.parse_options(opts)
        except ValueError as e:
            raise UsageError(str(e)) from None
        pm.add(_python_pass(cls, values), name=cls.__name__, argument=name, description=cls.summary)
    if print_after_all:
        pm.enable_ir_printing(print_after_all=True)
    return pm


def _python_pass(cls, values):
    def run(op, pass_):
        try:
            cls().run(op, **values)
        except PassFailure:
            pass_.signal_pass_failure()
        except Exception as e:  # a bug in the pass: report it as a diagnostic
            if os.environ.get("MIRAGE_DEBUG"):
                traceback.print_exc()
            D.error(op, f"internal error in pass '{cls.argument}': {type(e).__name__}: {e}")
            pass_.signal_pass_failure()

    return run


def process_chunk(text: str, args: Args, ours, fname: str, sink: D.Sink) -> str | None:
    """Parse, run the pipeline; returns the printed module or None on failure."""
    import mlir.ir as ir

    from .dialects import ParseAborted, make_context, parse_module

    ctx = make_context()
    try:
        module = parse_module(text, ctx)
    except ParseAborted as e:
        sink.add(D.Diag("error", fname, e.line, 1, str(e).split(": ", 1)[1]))
        return None
    except ir.MLIRError as e:
        for d in e.error_diagnostics:
            for x in _diag_from_mlir(d, fname):
                sink.add(x)
        return None
    if args.pipeline:
        pm = build_pass_manager(args.pipeline, ours, ctx, args.print_after_all)
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            for d in e.error_diagnostics:
                for x in _diag_from_mlir(d, fname):
                    sink.add(x)
            if not sink.has_errors:
                sink.add(D.Diag("error", fname, 0, 0, "pass pipeline failed"))
            return None
    return str(module) + "\n"  # mlir-opt ends its output with an empty line


def check_expectations(chunks, sink: D.Sink, fname: str) -> list[str]:
    """Match diagnostics against `expected-*` annotations; returns mismatch messages."""
    expected = []  # [severity, line, text, matched]
    for start, text in chunks:
        for i, line in enumerate(text.split("\n"), start=1):
            for m in EXPECT.finditer(line):
                sev, where, msg = m.groups()
                target = i
                if where == "above":
                    target = i - 1
                elif where == "below":
                    target = i + 1
                elif where:
                    target = i + int(where)
                expected.append([sev, target, msg, False])
    problems = []
    for d in sink.diags:
        hit = next((e for e in expected if not e[3] and e[0] == d.severity and e[1] == d.line
                    and e[2] in d.message), None)
        if hit:
            hit[3] = True
        elif d.severity != "note":
            problems.append(f"{fname}:{d.line}:{d.col}: error: unexpected {d.severity}: {d.message}")
    for sev, line, msg, ok in expected:
        if not ok:
            problems.append(f"{fname}:{line}: error: expected {sev} \"{msg}\" was not produced")
    return problems


def run(argv: list[str]) -> int:
    ours = registry()
    args = parse_args(argv, ours)
    fname = "<stdin>" if args.input == "-" else args.input
    if args.pipeline:  # reject unknown passes and bad options before reading input
        from .dialects import make_context

        build_pass_manager(args.pipeline, ours, make_context(), False)
    try:
        source = sys.stdin.read() if args.input == "-" else open(args.input).read()
    except OSError as e:
        raise UsageError(f"cannot read '{args.input}': {e.strerror}") from None
    # Each chunk is padded with newlines so line numbers match the whole file.
    chunks, offset = [], 0
    pieces = SPLIT_MARKER.split(source) if args.split else [source]
    for piece in pieces:
        chunks.append((offset, piece))
        offset += piece.count("\n")
    outputs, ok = [], True
    all_diags = D.Sink()
    for start, piece in chunks:
        with D.collect() as sink:
            out = process_chunk("\n" * start + piece, args, ours, fname, sink)
        for d in sink.diags:
            if d.file in ("-", ""):
                d.file = fname
        all_diags.diags += sink.diags
        if out is None or sink.has_errors:
            ok = False
        if out is not None:
            outputs.append(out)
    if args.verify_diags:
        problems = check_expectations([(s, "\n" * s + p) for s, p in chunks], all_diags, fname)
        for p in problems:
            print(p, file=sys.stderr)
        ok = not problems
    else:
        for d in all_diags.diags:
            print(d.format(), file=sys.stderr)
    text = "// -----\n".join(outputs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    if Interrupted.seen:  # the partial result is printed; the exit code says it is partial
        return 130
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    try:
        rc = run(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"mirage-opt: error: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("mirage-opt: interrupted", file=sys.stderr)
        rc = 130
    except Exception as e:  # never a bare traceback
        if os.environ.get("MIRAGE_DEBUG"):
            traceback.print_exc()
        print(f"mirage-opt: internal error: {type(e).__name__}: {e} (set MIRAGE_DEBUG=1 for a traceback)",
              file=sys.stderr)
        rc = 1
    sys.exit(rc)


if __name__ == "__main__":
    main()
