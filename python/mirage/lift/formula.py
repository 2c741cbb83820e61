"""The lifted program as a formula: one line per output, `name = expression`, over the
kernel's argument names (a `_ptr` suffix dropped), simplified by `simplify.py`, with
constants recovered: a float equal to a scalar argument prints as its name (eps), and
well-known irrational constants by their symbol."""
from __future__ import annotations

import math

_KNOWN = {0.7071067811865476: "1/sqrt(2)", 1.4142135623730951: "sqrt(2)", 1.4426950408889634: "log2(e)",
          0.6931471805599453: "ln(2)", 0.7978845608028654: "sqrt(2/pi)", math.pi: "pi", math.e: "e"}
_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2, "matmul": 2, "neg": 3}


def pretty_name(arg: str) -> str:
    return arg[:-4] if arg.endswith("_ptr") and len(arg) > 4 else arg


def to_tree(t, memo=None):
    """A program term (program.Term) as a formula tree (see simplify.py)."""
    op = t.op
    if op == "input":
        return ("var", pretty_name(t.attr("name")))
    if op == "constant":
        return ("num", float(t.attr("value")))
    a = [to_tree(x) for x in t.args]
    if op in ("reshape", "repeat"):
        return a[0]
    if op == "transpose":
        return ("transpose", a[0])
    if op in ("reduction", "reduce_max"):
        d = t.attr("dim")
        return ("sum" if op == "reduction" else "max", a[0], d, float(t.args[0].shape[d]))
    return (op, *a)


def show(tree, names: dict, parent: int = 0, right: bool = False) -> str:
    op = tree[0]
    if op == "var":
        return tree[1]
    if op == "num":
        v = tree[1]
        if v in names:
            return names[v]
        if v in _KNOWN:
            return _KNOWN[v]
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)
    if op in ("add", "sub", "mul", "div", "matmul"):
        p = _PREC[op]
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@"}[op]
        s = f"{show(tree[1], names, p)} {sym} {show(tree[2], names, p, True)}"
        return f"({s})" if p < parent or (p == parent and right) else s
    if op == "neg":
        return f"-{show(tree[1], names, 3)}"
    if op in ("sum", "max"):
        return f"{op}({show(tree[1], names)}, {tree[2]})"
    if op == "mean":
        return f"mean({show(tree[1], names)}, {tree[2]})"
    if op == "transpose":
        return f"{show(tree[1], names, 4)}.T"
    return f"{op}({', '.join(show(x, names) for x in tree[1:])})"


def render(terms, outputs, trace, simplify: bool = True) -> str:
    trees = [to_tree(t) for t in terms]
    if simplify:
        from .simplify import simplify as run

        trees = run(trees)
    names = {float(v): k for k, v in trace.scalars.items() if isinstance(v, float) and not float(v).is_integer()}
    return "; ".join(f"{pretty_name(o)} = {show(t, names)}" for o, t in zip(outputs, trees))
