"""Scalar symbolic values: what one element of a Triton block holds during symbolic
evaluation (paper §3.1).

A `Node` is an immutable expression over input elements (`var`: argument name and flat
index), constants and the operators below. Nodes are interned by a `Terms` table, so
structurally equal expressions are the same object and compare by identity. The
constructors fold what masked lanes produce (x + 0, x * 0, exp(-inf), the -inf of a
masked max) so that reductions over a partly masked block hold exactly the live terms.

Reductions and `tl.maximum` are n-ary: `sum` and `max` flatten nested sums/maxima
(an accumulator built over loop iterations and the final `tl.sum` become one sum of all
terms, in program order), which is what lets synthesis see a reduction whatever the
chunking was.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

UNARY = ("exp", "log", "sqrt", "rsqrt", "sigmoid", "erf", "tanh", "abs", "neg")
BINARY = ("add", "sub", "mul", "div")
NARY = ("sum", "max", "min")
COMPARE = ("gt", "ge", "lt", "le", "eq", "ne")


class Node:
    """One interned expression. `op` is 'var', 'const', 'undef', an operator of UNARY,
    BINARY, NARY or COMPARE, or 'where'; `args` its operand nodes; `val` the constant's
    value or the var's (argument, flat index)."""

    __slots__ = ("op", "args", "val", "id", "_vars")

    def __init__(self, op, args, val, id_):
        self.op, self.args, self.val, self.id = op, args, val, id_
        self._vars = None

    def vars(self) -> frozenset:
        """The input elements this expression reads (memoized)."""
        if self._vars is None:
            if self.op == "var":
                self._vars = frozenset([self.val])
            else:
                acc = frozenset()
                for a in self.args:
                    acc = acc | a.vars()
                self._vars = acc
        return self._vars

    def __repr__(self) -> str:
        return show(self)


def show(n: Node, depth: int = 6) -> str:
    """A short readable rendering (for diagnostics)."""
    if n.op == "var":
        return f"{n.val[0]}[{n.val[1]}]"
    if n.op == "const":
        return repr(n.val)
    if n.op == "undef":
        return "undef"
    if depth == 0:
        return "..."
    inner = [show(a, depth - 1) for a in n.args[:4]] + (["..."] if len(n.args) > 4 else [])
    return f"{n.op}({', '.join(inner)})"


class Terms:
    """The interning table and the folding constructors."""

    def __init__(self):
        self._table: dict = {}

    def _mk(self, op, args=(), val=None) -> Node:
        key = (op, tuple(a.id for a in args), val)
        n = self._table.get(key)
        if n is None:
            n = Node(op, tuple(args), val, len(self._table))
            self._table[key] = n
        return n

    # -- leaves --
    def var(self, arg: str, index: int) -> Node:
        return self._mk("var", (), (arg, int(index)))

    def const(self, value) -> Node:
        v = float(value)
        return self._mk("const", (), 0.0 if v == 0 else v)  # one zero: -0.0 folds like 0.0

    def undef(self) -> Node:
        return self._mk("undef")

    def lift(self, x) -> Node:
        return x if isinstance(x, Node) else self.const(x)

    # -- operators --
    def unary(self, op: str, a: Node) -> Node:
        if a.op == "undef":
            return a
        if a.op == "const":
            return self.const(_fold_unary(op, a.val))
        if op == "neg":
            return self.binary("mul", self.const(-1.0), a)
        return self._mk(op, (a,))

    def binary(self, op: str, a, b) -> Node:
        a, b = self.lift(a), self.lift(b)
        if "undef" in (a.op, b.op):
            return self.undef()
        if a.op == "const" and b.op == "const":
            return self.const(_fold_binary(op, a.val, b.val))
        ca = a.val if a.op == "const" else None
        cb = b.val if b.op == "const" else None
        if op == "add":
            if ca == 0:
                return b
            if cb == 0:
                return a
            if -math.inf in (ca, cb):  # a masked lane of a max-shifted row
                return self.const(-math.inf)
            if a.op == "sum" and b.op == "sum":  # acc += tl.dot(...): one sum over all terms
                return self.nary("sum", a.args + b.args)
        elif op == "sub":
            if cb == 0:
                return a
            if ca == -math.inf:
                return self.const(-math.inf)
        elif op == "mul":
            if ca == 0 or cb == 0:  # masked lanes (other=0) times anything finite
                return self.const(0.0)
            if ca == 1:
                return b
            if cb == 1:
                return a
            if cb is not None and ca is None:  # constants first: one form for x*c and c*x
                a, b = b, a
            if a.op == "const" and b.op == "mul" and b.args[0].op == "const":
                return self.binary("mul", self.const(a.val * b.args[0].val), b.args[1])
        elif op == "div":
            if ca == 0:
                return self.const(0.0)
            if cb == 1:
                return a
        return self._mk(op, (a, b))

    def nary(self, op: str, items: Iterable) -> Node:
        """sum / max / min of `items`, nested ones flattened (sums also flatten element-wise
        adds, as a loop-carried accumulator produces them); the neutral element dropped."""
        flat = []
        stack = [self.lift(x) for x in items][::-1]
        while stack:
            x = stack.pop()
            if x.op == op or (op == "sum" and x.op == "add"):
                stack.extend(reversed(x.args))
                continue
            flat.append(x)
        if any(x.op == "undef" for x in flat):
            return self.undef()
        neutral = {"sum": 0.0, "max": -math.inf, "min": math.inf}[op]
        flat = [x for x in flat if not (x.op == "const" and x.val == neutral)]
        consts = [x.val for x in flat if x.op == "const"]
        if len(consts) > 1 and op != "sum":  # max(max(c1, x), c2): one constant
            keep = max(consts) if op == "max" else min(consts)
            flat = [x for x in flat if x.op != "const"] + [self.const(keep)]
        if not flat:
            return self.const(neutral)
        if len(flat) == 1:
            return flat[0]
        return self._mk(op, tuple(flat))

    def block_sum(self, items) -> Node:
        """The sum a `tl.dot` lane computes: a 'sum' node even for one live term, so that
        `acc += tl.dot(...)` over K blocks merges into one sum of all K products."""
        flat = [x for x in (self.lift(i) for i in items) if not (x.op == "const" and x.val == 0)]
        if len(flat) == 1 and flat[0].op != "undef":
            return self._mk("sum", (flat[0],))
        return self.nary("sum", flat)

    def compare(self, op: str, a, b) -> Node:
        a, b = self.lift(a), self.lift(b)
        return self._mk(op, (a, b))

    def where(self, c: Node, a, b) -> Node:
        """A select on a data-dependent condition; where(a > b, a, b) is max(a, b)."""
        a, b = self.lift(a), self.lift(b)
        if a is b:
            return a
        if c.op in ("gt", "ge") and (c.args[0], c.args[1]) == (a, b):
            return self.nary("max", [a, b])
        if c.op in ("lt", "le") and (c.args[0], c.args[1]) == (a, b):
            return self.nary("min", [a, b])
        return self._mk("where", (c, a, b))


def _fold_unary(op, v):
    with np.errstate(all="ignore"):
        x = np.float64(v)
        return float({
            "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda t: 1.0 / np.sqrt(t),
            "sigmoid": lambda t: 1.0 / (1.0 + np.exp(-t)), "erf": lambda t: math.erf(t),
            "tanh": np.tanh, "abs": np.abs, "neg": np.negative}[op](x))


def _fold_binary(op, a, b):
    with np.errstate(all="ignore"):
        a, b = np.float64(a), np.float64(b)
        return float({"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[op])


# -- numeric evaluation -----------------------------------------------------------------------

_NUM_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda t: 1.0 / np.sqrt(t),
    "sigmoid": lambda t: 1.0 / (1.0 + np.exp(-t)), "tanh": np.tanh, "abs": np.abs,
}


def evaluate(nodes: np.ndarray, inputs: dict, memo: dict | None = None) -> np.ndarray:
    """Evaluate an array of nodes in float64. `inputs` maps an argument name to a 2-D
    array (samples, flat elements); the result has shape nodes.shape + (samples,)."""
    from scipy.special import erf

    memo = {} if memo is None else memo
    samples = next(iter(inputs.values())).shape[0] if inputs else 1

    def visit(x: Node, a):
        return _eval_one(x, a, inputs, samples, erf)

    out = np.empty(nodes.shape + (samples,))
    with np.errstate(all="ignore"):
        for idx in np.ndindex(*nodes.shape):
            out[idx] = fold(nodes[idx], memo, visit)
    return out


def fold(n: Node, memo: dict, visit):
    """The value of `n`, computed bottom-up over its DAG: memo[node id] = visit(node, values
    of its args), each node once (iterative: sums can be thousands of terms deep)."""
    stack = [(n, False)]
    while stack:
        x, ready = stack.pop()
        if x.id in memo:
            continue
        if not ready:
            stack.append((x, True))
            stack.extend((a, False) for a in x.args if a.id not in memo)
            continue
        memo[x.id] = visit(x, [memo[a.id] for a in x.args])
    return memo[n.id]


def _eval_one(x: Node, a, inputs, samples, erf):
    op = x.op
    if op == "var":
        return inputs[x.val[0]][:, x.val[1]]
    if op == "const":
        return np.full(samples, x.val)
    if op == "undef":
        return np.full(samples, np.nan)
    if op in _NUM_UNARY:
        return _NUM_UNARY[op](a[0])
    if op == "erf":
        return erf(a[0])
    if op in BINARY:
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](a[0], a[1])
    if op == "sum":
        return np.sum(a, axis=0)
    if op == "max":
        return np.max(a, axis=0)
    if op == "min":
        return np.min(a, axis=0)
    if op in COMPARE:
        return {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal,
                "eq": np.equal, "ne": np.not_equal}[op](a[0], a[1]).astype(float)
    if op == "where":
        return np.where(a[0] != 0, a[1], a[2])
    raise AssertionError(op)
