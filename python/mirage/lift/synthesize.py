"""Synthesis of a `kn` program from the kernel's symbolic effect (paper §3.2-§3.3).

Top-down: the specification of an output is the array of its elements' expressions.
When every element has the same root operator, the array splits into the arrays of the
operands, each synthesized recursively (divide and conquer); an array constant along a
dim is synthesized once with that dim of size 1 and broadcast. A sum (max) whose
elements all have K terms is a reduction: the terms, ordered by the input elements they
read directly, form an array with the reduced dim of size K; a sum of products
a[i,k]*b[k,j] is a matmul. An array of input elements is an input (or its transpose /
reshape) when the indices line up.

Bottom-up: where the root operator is composite (a sigmoid written as 1/(1+exp(-x)),
a GELU written with erf), the synthesizer enumerates our named activations over the
sub-arrays of the specification that synthesize (the terminals the symbolic values
offer) and keeps a candidate whose values match the specification on random inputs;
candidates reading input elements the specification does not read are pruned first
(the paper's value-mismatch rule). The match is only a filter: `verify` proves it.
"""
from __future__ import annotations

import math

import numpy as np

from . import program as P
from . import terms as TM
from .errors import LiftError
from .program import Program, Term
from .terms import Node

ACTIVATIONS = ("silu", "gelu", "sigmoid", "relu")
_KN_UNARY = {"exp": "exp", "sqrt": "sqrt", "rsqrt": "rsqrt", "sigmoid": "sigmoid"}
_NO_KN = {"log": "log", "erf": "erf (only as part of GELU)", "abs": "abs", "where": "a data-dependent tl.where",
          "min": "minimum", "gt": "a comparison", "ge": "a comparison", "lt": "a comparison",
          "le": "a comparison", "eq": "a comparison", "ne": "a comparison", "undef": "an undefined value"}
RTOL = 1e-8  # float64 sums in a different order: relative differences ~1e-15, far below this


class Synthesizer:
    def __init__(self, buffers: dict, inputs: list, samples: int = 3, seed: int = 0):
        """`buffers`: the trace's buffers (name -> Buffer); `inputs`: names of those read."""
        self.buffers = buffers
        self.prog = Program()
        self.memo: dict = {}
        rng = np.random.default_rng(seed)
        # inputs for numeric guidance: flat samples for the node evaluator, shaped for terms
        self.flat = {n: rng.standard_normal((samples, b.mem.size)) for n, b in buffers.items()}
        self.shaped = {n: v.reshape((samples,) + buffers[n].shape) for n, v in self.flat.items()}
        self.node_memo: dict = {}
        self.term_memo: dict = {}
        self.direct_memo: dict = {}
        self.steps = {"top-down": 0, "bottom-up": 0, "candidates": 0}

    # -- numeric guidance --
    def values(self, A: np.ndarray) -> np.ndarray:
        return TM.evaluate(A, self.flat, self.node_memo)

    def term_values(self, t: Term) -> np.ndarray:
        return P.evaluate(t, self.shaped, self.term_memo)

    def matches(self, t: Term, A: np.ndarray) -> bool:
        try:
            tv = np.broadcast_to(self.term_values(t), A.shape + (next(iter(self.flat.values())).shape[0],))
        except ValueError:
            return False
        av = self.values(A)
        return bool(np.allclose(tv, av, rtol=RTOL, atol=1e-12, equal_nan=False)) and np.isfinite(av).all()

    # -- entry --
    def output(self, name: str, A: np.ndarray) -> Term:
        t = self.lift(A, f"output '{name}'")
        shape = A.shape
        if t.shape != shape:
            t = self._expand(t, shape)
        return t

    def _expand(self, t: Term, shape) -> Term:
        """Give `t` exactly `shape` (an output's shape): drop or add leading 1s, repeat."""
        if len(t.shape) != len(shape):
            core = t.shape[len(t.shape) - len(shape):] if len(t.shape) > len(shape) else \
                (1,) * (len(shape) - len(t.shape)) + t.shape
            if math.prod(core) != math.prod(t.shape):
                raise LiftError(f"cannot give a value of shape {t.shape} the output shape {shape}")
            t = self.prog.term("reshape", (t,), core)
        if t.shape != tuple(shape):
            if t.op == "constant":
                return self.prog.term("constant", (), shape, value=t.attr("value"))
            reps = tuple(s // d for s, d in zip(shape, t.shape))
            t = self.prog.term("repeat", (t,), shape, repeats=reps)
        return t

    # -- the recursive top-down step --
    def lift(self, A: np.ndarray, what: str) -> Term:
        A = compress(A)
        key = (A.shape, tuple(n.id for n in A.flat))
        if key in self.memo:
            return self.memo[key]
        self.steps["top-down"] += 1
        t = self._lift(A, what)
        self.memo[key] = t
        return t

    def _lift(self, A: np.ndarray, what: str) -> Term:
        ops = {n.op for n in A.flat}
        first = A.flat[0]
        if ops == {"const"}:
            vals = {n.val for n in A.flat}
            if len(vals) != 1:
                raise LiftError(f"{what}: different constants at different positions ({sorted(vals)[:3]})")
            return self.prog.term("constant", (), (1,) * max(A.ndim, 1), value=first.val)
        if ops == {"var"}:
            return self.input_view(A, what)
        if len(ops) > 1:
            a = next(n for n in A.flat if n.op != first.op)
            raise LiftError(f"{what}: the elements are not one formula (e.g. {TM.show(first, 3)} and "
                            f"{TM.show(a, 3)}); a mask or offset may leave some elements different")
        op = first.op
        if op in ("div", "mul", "add", "sub", "sigmoid", "max") and self._transcendental(first):
            t = self.bottom_up(A, what)
            if t is not None:
                return t
        if op in TM.BINARY:
            if any(len(n.args) != 2 for n in A.flat):
                raise LiftError(f"{what}: malformed {op}")
            a = self.lift(_child(A, 0), what)
            b = self.lift(_child(A, 1), what)
            return self.prog.term(op, (a, b), P.broadcast(a.shape, b.shape))
        if op in _KN_UNARY:
            a = self.lift(_child(A, 0), what)
            return self.prog.term(_KN_UNARY[op], (a,), a.shape)
        if op == "tanh":  # no kn tanh: tanh(z) = 1 - 2 / (exp(2z) + 1)
            z = self.lift(_child(A, 0), what)
            c = lambda v: self.prog.term("constant", (), (1,) * len(z.shape), value=v)  # noqa: E731
            e = self.prog.term("exp", (self.prog.term("mul", (c(2.0), z), z.shape),), z.shape)
            d = self.prog.term("div", (c(2.0), self.prog.term("add", (e, c(1.0)), z.shape)), z.shape)
            return self.prog.term("sub", (c(1.0), d), z.shape)
        if op == "max" and all(len(n.args) == 2 and n.args[1].op == "const" and n.args[1].val == 0
                               for n in A.flat):
            a = self.lift(np.vectorize(lambda n: n.args[0], otypes=[object])(A), what)
            return self.prog.term("relu", (a,), a.shape)
        if op in ("sum", "max"):
            return self.reduction(A, op, what)
        if op == "where":
            t = self.leaky_relu(A, what)
            if t is not None:
                return t
        raise LiftError(f"{what}: no kn operator for {_NO_KN.get(op, op)} (in {TM.show(first, 3)})")

    def leaky_relu(self, A: np.ndarray, what: str):
        """where(u > 0, u, c * u) with one constant 0 <= c <= 1 in every element: that is
        relu(u) + c * (u - relu(u)) (kn has no select)."""
        cs = set()
        for n in A.flat:
            cond, a, b = n.args
            if not (cond.op == "gt" and cond.args[0] is a and cond.args[1].op == "const" and cond.args[1].val == 0
                    and b.op == "mul" and b.args[0].op == "const" and b.args[1] is a):
                return None
            cs.add(b.args[0].val)
        if len(cs) != 1 or not 0 <= next(iter(cs)) <= 1:
            return None
        u = self.lift(np.vectorize(lambda n: n.args[1], otypes=[object])(A), what)
        c = self.prog.term("constant", (), (1,) * len(u.shape), value=cs.pop())
        r = self.prog.term("relu", (u,), u.shape)
        return self.prog.term("add", (r, self.prog.term("mul", (c, self.prog.term("sub", (u, r), u.shape)), u.shape)),
                              u.shape)

    def _transcendental(self, n: Node, depth: int = 6) -> bool:
        if n.op in ("exp", "erf", "tanh", "sigmoid") or (n.op == "max" and len(n.args) == 2):
            return True
        return depth > 0 and any(self._transcendental(a, depth - 1) for a in n.args if a.op not in ("sum", "max"))

    # -- inputs --
    def input_view(self, A: np.ndarray, what: str) -> Term:
        names = {n.val[0] for n in A.flat}
        if len(names) != 1:
            raise LiftError(f"{what}: elements of different arrays ({', '.join(sorted(names))}) in one position")
        name = names.pop()
        buf = self.buffers[name]
        idx = np.vectorize(lambda n: n.val[1], otypes=[np.int64])(A)
        size = math.prod(buf.shape)
        base = self.prog.term("input", (), buf.shape, name=name)
        if idx.size == size and np.array_equal(idx.ravel(), np.arange(size)):
            core = _strip_leading_ones(A.shape)
            return base if core == buf.shape else self.prog.term("reshape", (base,), A.shape)
        if idx.ndim >= 2 and idx.size == size and len(buf.shape) == 2:
            tr = np.swapaxes(idx, -1, -2)
            if np.array_equal(tr.ravel(), np.arange(size)):
                t = self.prog.term("transpose", (base,), buf.shape[::-1], permutation=(1, 0))
                return t if _strip_leading_ones(A.shape) == t.shape else self.prog.term("reshape", (t,), A.shape)
        raise LiftError(f"{what}: reads {name} in an order or part that is not a whole tensor "
                        f"(indices {idx.ravel()[:6].tolist()}... of {size} elements)")

    # -- reductions and matmul --
    def direct_vars(self, n: Node) -> tuple:
        """Input elements a term reads outside any nested reduction: what tells the terms
        of a sum apart (a softmax term exp(x_k - max_j x_j) reads x_k directly)."""
        r = self.direct_memo.get(n.id)
        if r is None:
            if n.op == "var":
                r = (n.val,)
            elif n.op in TM.NARY:
                r = ()
            else:
                r = tuple(sorted(set(v for a in n.args for v in self.direct_vars(a))))
            self.direct_memo[n.id] = r
        return r

    def sorted_terms(self, n: Node) -> list:
        return sorted(n.args, key=lambda t: (self.direct_vars(t), t.id))

    def reduction(self, A: np.ndarray, op: str, what: str) -> Term:
        counts = {len(n.args) for n in A.flat}
        if len(counts) != 1:
            raise LiftError(f"{what}: a {op} over different numbers of terms at different positions "
                            f"({sorted(counts)}); a mask may drop elements")
        K = counts.pop()
        T = np.empty(A.shape + (K,), dtype=object)
        for idx in np.ndindex(*A.shape):
            T[idx] = _obj(self.sorted_terms(A[idx]))
        errors = []
        if op == "sum" and A.ndim >= 2:
            try:
                return self.matmul(T, what)
            except LiftError as e:
                errors.append(str(e))
        kn = "reduction" if op == "sum" else "reduce_max"
        for d in [d for d in reversed(range(A.ndim)) if A.shape[d] == 1]:
            moved = np.moveaxis(T, -1, d + 1)  # K next to dim d, then drop dim d
            moved = moved.reshape(A.shape[:d] + (K,) + A.shape[d + 1:])
            try:
                child = self.lift(moved, what)
            except LiftError as e:
                errors.append(str(e))
                continue
            if len(child.shape) != A.ndim:
                child = self.prog.term("reshape", (child,), _pad_to(child.shape, A.ndim))
            return self.prog.term(kn, (child,), tuple(1 if i == d else s for i, s in enumerate(child.shape)), dim=d)
        try:  # no size-1 dim: the reduced dim is a new last dim
            child = self.lift(T, what)
            if len(child.shape) != A.ndim + 1:
                child = self.prog.term("reshape", (child,), _pad_to(child.shape, A.ndim + 1))
            red = self.prog.term(kn, (child,), child.shape[:-1] + (1,), dim=A.ndim)
            return self.prog.term("reshape", (red,), A.shape)
        except LiftError as e:
            errors.append(str(e))
        raise LiftError(errors[-1])

    def matmul(self, T: np.ndarray, what: str) -> Term:
        """T[..., i, j, k]: the k-th term of C[..., i, j]; each a product p * q with p
        not varying with j and q not varying with i."""
        if any(n.op != "mul" for n in T.flat):
            raise LiftError(f"{what}: not a sum of products")
        for first, second in ((0, 1), (1, 0)):
            p = np.vectorize(lambda n: n.args[first], otypes=[object])(T)
            q = np.vectorize(lambda n: n.args[second], otypes=[object])(T)
            if _const_along(p, -2) and _const_along(q, -3):
                a = self.lift(p[..., :, 0, :], what)
                b = self.lift(np.swapaxes(q[..., 0, :, :], -1, -2), what)
                if len(a.shape) < 2 or len(b.shape) < 2:
                    break
                return self.prog.term("matmul", (a, b), a.shape[:-1] + b.shape[-1:])
        raise LiftError(f"{what}: a sum of products that is not a matrix product")

    # -- bottom-up enumeration --
    def bottom_up(self, A: np.ndarray, what: str):
        self.steps["bottom-up"] += 1
        want = A.flat[0].vars()
        for L in self._subarrays(A):
            if not L.flat[0].vars() <= want:  # value mismatch: reads elements the spec does not
                continue
            try:
                leaf = self.lift(L, what)
            except LiftError:
                continue
            for f in ACTIVATIONS:
                self.steps["candidates"] += 1
                cand = self.prog.term(f, (leaf,), leaf.shape)
                if self.matches(cand, A):
                    return cand
        return None

    def _subarrays(self, A: np.ndarray, depth: int = 4):
        """Arrays of the operands at the same path in every element (the terminals)."""
        seen, out, frontier = set(), [], [A]
        for _ in range(depth):
            nxt = []
            for B in frontier:
                ops = {n.op for n in B.flat}
                arities = {len(n.args) for n in B.flat}
                if len(ops) != 1 or len(arities) != 1 or next(iter(ops)) in TM.NARY:
                    continue
                for k in range(arities.pop()):
                    C = compress(_child(B, k))
                    key = tuple(n.id for n in C.flat)
                    if key in seen or C.flat[0].op == "const":
                        continue
                    seen.add(key)
                    out.append(C)
                    nxt.append(C)
            frontier = nxt
        return sorted(out, key=lambda C: _size(C.flat[0]))


def compress(A: np.ndarray) -> np.ndarray:
    """Collapse every dim along which the array does not vary to size 1."""
    A = np.asarray(A, dtype=object)
    for ax in range(A.ndim):
        if A.shape[ax] > 1 and _const_along(A, ax):
            A = np.take(A, [0], axis=ax)
    return A


def _const_along(A: np.ndarray, ax: int) -> bool:
    first = np.take(A, [0], axis=ax)
    return all(a is b for a, b in zip(np.broadcast_to(first, A.shape).flat, A.flat))


def _child(A: np.ndarray, k: int) -> np.ndarray:
    return np.vectorize(lambda n: n.args[k], otypes=[object])(A)


def _obj(items) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def _strip_leading_ones(shape) -> tuple:
    s = tuple(shape)
    while len(s) > 1 and s[0] == 1:
        s = s[1:]
    return s


def _pad_to(shape, rank) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _size(n: Node, cap: int = 200) -> int:
    stack, k = [n], 0
    while stack and k < cap:
        x = stack.pop()
        k += 1
        stack.extend(x.args)
    return k
