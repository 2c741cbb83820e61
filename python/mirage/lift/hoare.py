"""All-sizes verification of the launch grid by Hoare logic (paper §4, the grid-loop
pattern of §4.2).

The launch is the loop `for p in range(G): body(p)`. The kernel is evaluated once more,
symbolically in the program id `p` *and* in the sizes: every dim of every array becomes
a Z3 integer (dims equal at the launch are one variable), integer arguments whose value
is a dim become that variable, the grid is `cdiv(dim, BLOCK)` or `dim` (matched on the
launch), and an array is an uninterpreted function of the flat index. The postcondition
is the lifted program read point-wise (§4.1): for an output element at coordinates c,
O(c) = F(c), with a constant of the program equal to a size replaced by that size. A
reduction over a size-dependent dim is instantiated with BLOCK masked terms (the paper's
"specific column number"; precondition: that dim <= BLOCK, proved case by case), or,
where the kernel walks the dim in a loop, defined by recursion.

The invariant is the paper's pattern: I(p) = "every element written by a program p' < p
holds F". Which element a lane writes is a linear template c = A @ (p, lane, enclosing
loop variables, 1) fitted on the launched run (§4.2's template for the index part) and
checked by Z3 against the lane's actual address. With it the triple reduces to
obligations over symbolic p and sizes, each discharged by Z3:
- in bounds: every active load and store lane addresses its array's range;
- preservation: every active store lane writes F at the coordinates the template gives,
  and those coordinates address exactly the lane's offset (so I(p) => I(p+1));
- exit: every coordinate of every output is written by some program p < G (coverage),
  so I(G) is the postcondition; init is I(0), vacuous;
- no program reads an array any program writes (so later programs see the inputs).
A loop inside the program whose trip count depends on a size runs once for a symbolic
iteration (`SizeEvaluator.for_loop`); its accumulators' invariants are proved by
induction (`_accumulator_lemmas`). A branch on a size, masked -inf padding (softmax/max;
-inf is no real number), `tl.dot` in such a loop, or a construct the symbolic-size
evaluation lacks gets status "not attempted" with the reason; a proof Z3 cannot finish
"unknown": the kernel is then proved for the launched sizes only.
"""
from __future__ import annotations

import ast
import math
import time

import numpy as np

from .errors import LiftError
from .symbolic import Evaluator, Ptr, _DType, _source_of, python_function
from .verify import LiftZ3Arith, Proof


class Unsupported(Exception):
    """Outside what the all-sizes proof handles (reported, not an error)."""


class Data:
    """A block of Z3 real terms (kernel data under symbolic sizes)."""

    __slots__ = ("a",)

    def __init__(self, a):
        self.a = np.asarray(a, dtype=object)

    @property
    def shape(self):
        return self.a.shape

    def __neg__(self):
        return Data(zmap(lambda x: -x, self))


def _obj(v):
    if isinstance(v, Data):
        return v.a
    a = np.asarray(v)
    return a.astype(object) if a.dtype != object else a


def zmap(fn, *vals):
    arrs = np.broadcast_arrays(*[_obj(v) for v in vals])
    out = np.empty(arrs[0].shape, dtype=object)
    for idx in np.ndindex(*out.shape):
        out[idx] = fn(*(a[idx] for a in arrs))
    return out


def _is_z3(x) -> bool:
    import z3

    return isinstance(x, z3.ExprRef)


class SizeEvaluator(Evaluator):
    """The kernel body for one symbolic program id under symbolic sizes."""

    def __init__(self, fn, hz: "HoareSetup"):
        super().__init__(fn, None, {}, hz.grid_syms)
        self.hz = hz
        self.z3 = hz.z3
        self.ar = hz.ar
        self.pid = hz.pids
        self.loads: list = []  # (arg, offset, mask, where)
        self.stores: list = []  # (arg, offset, value, mask, where, lane index)
        self.accumulators: list = []  # Accumulator, one per loop-carried value of a size-dependent loop
        self.guard = None  # inside such a loop: 0 <= k < trip count

    # -- scalars and control --
    def truth(self, e, env) -> bool:
        v = self.expr(e, env)
        if isinstance(v, Data) or _is_z3(v) or (isinstance(v, np.ndarray) and v.dtype == object):
            raise Unsupported(f"{self.where(e)}: a branch that depends on a size or on data")
        return bool(v)

    def for_loop(self, s, env):
        """A loop whose trip count depends on a size is not unrolled: its body runs once
        for a symbolic iteration k (0 <= k < trip count) on fresh values of the
        loop-carried variables, each of which must be an accumulator (new = old + delta);
        after the loop it is D(K), D defined by recursion (D(0) = its value before the
        loop, D(j+1) = D(j) + delta(j)). `prove_grid_loop` relates D to the formula's
        reductions by induction over k (the invariant of §4.2 for accumulators)."""
        z3 = self.z3
        it = s.iter
        if not isinstance(it, ast.Call) or not isinstance(s.target, ast.Name):
            return super().for_loop(s, env)
        bounds = [self.expr(a, env) for a in it.args[:3]]
        if not any(_is_z3(b) for b in bounds):
            return super().for_loop(s, env)
        if self.guard is not None:
            raise Unsupported(f"{self.where(s)}: nested loops with size-dependent trip counts")
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds + [1])[:3]
        if _is_z3(start) or _is_z3(step) or int(step) <= 0:
            raise Unsupported(f"{self.where(s)}: a loop whose start or step depends on a size")
        uid = len(self.accumulators) + len(self.hz.loops)
        k = z3.Int(f"k{uid}")
        trips = (stop - start + int(step) - 1) / int(step)
        self.hz.loops.append((k, trips, start, int(step), stop))
        carried = [n for n in _assigned(s.body) if n in env]
        fresh = {}
        for name in carried:
            v = env[name]
            if not isinstance(v, Data):
                raise Unsupported(f"{self.where(s)}: the loop carries '{name}', which is not data")
            fresh[name] = Data(np.array([z3.FreshReal(f"{name}_") for _ in range(v.a.size)], dtype=object)
                               .reshape(v.a.shape))
        init = {name: env[name] for name in carried}
        env.update(fresh)
        env[s.target.id] = start + k * int(step)
        self.guard = z3.And(k >= 0, k < trips)
        value = start + k * int(step)
        self.hz.loop_of[value.sexpr()] = self.hz.loops[-1]
        self.loop_values.append(value)
        try:
            self.block(s.body, env)
        finally:
            self.guard = None
            self.loop_values.pop()
        j = z3.Int(f"j{uid}")
        for name in carried:
            new, old, base = env[name], fresh[name], init[name]
            if not isinstance(new, Data) or new.a.shape != old.a.shape:
                raise Unsupported(f"{self.where(s)}: '{name}' changes shape in the loop")
            finals = np.empty(old.a.shape, dtype=object)
            fns = []
            for idx in np.ndindex(*old.a.shape):
                delta = _increment(z3, new.a[idx], old.a[idx])
                if delta is None or _mentions(delta, [f for v in fresh.values() for f in v.a.flat]):
                    raise Unsupported(f"{self.where(s)}: '{name}' is not an accumulator (new = old + delta)")
                D = z3.Function(f"{name}_{uid}_{'_'.join(map(str, idx))}", z3.IntSort(), z3.RealSort())
                self.hz.define(D, j, z3.If(j <= 0, base.a[idx], D(j - 1) + z3.substitute(delta, (k, j - 1))))
                finals[idx] = D(trips)
                fns.append(D)
            self.accumulators.append((name, fns, self.hz.loops[-1]))
            env[name] = Data(finals)
        for name in _assigned(s.body) + [s.target.id]:  # their values at iteration k mean nothing after it
            if name not in carried:
                env.pop(name, None)

    def concrete_int(self, e, env, what):
        v = self.expr(e, env)
        if _is_z3(v):
            raise Unsupported(f"{self.where(e)}: the {what} depends on a size (its trip count is not fixed)")
        return int(v)

    def subscript(self, e, v, idx):
        if isinstance(v, Data):
            return Data(v.a[idx])
        if isinstance(v, Ptr):
            return Ptr(v.arg, _obj(v.off)[idx])
        return super().subscript(e, v, idx)

    def transpose(self, e, v):
        if isinstance(v, Data):
            return Data(v.a.T)
        return super().transpose(e, v)

    # -- arithmetic --
    def real(self, v):
        z3 = self.z3
        if isinstance(v, float) and not math.isfinite(v):
            raise Unsupported("an infinite constant (masked -inf padding) under symbolic sizes")
        if _is_z3(v):
            return z3.ToReal(v) if v.sort() == z3.IntSort() else v
        if isinstance(v, (bool, np.bool_)):
            raise Unsupported("a boolean used as data")
        return self.ar.real(float(v))

    def data(self, v):
        return v if isinstance(v, Data) else Data(zmap(self.real, v))

    def binop(self, e, op, a, b):
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            p, k = (a, b) if isinstance(a, Ptr) else (b, a)
            if isinstance(k, Data):
                raise Unsupported(f"{self.where(e)}: a data-dependent address")
            if op is ast.Add:
                return Ptr(p.arg, zmap(lambda x, y: x + y, p.off, k))
            if op is ast.Sub and isinstance(a, Ptr):
                return Ptr(p.arg, zmap(lambda x, y: x - y, p.off, k))
            raise Unsupported(f"{self.where(e)}: pointer arithmetic '{op.__name__}'")
        if isinstance(a, Data) or isinstance(b, Data):
            a, b = self.data(a), self.data(b)
            f = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
                 ast.Div: self.ar.div1}.get(op)
            if f is None:
                raise Unsupported(f"{self.where(e)}: operator '{op.__name__}' on data")
            return Data(zmap(f, a, b))
        if not any(_is_z3(x) for x in _obj(a).flat) and not any(_is_z3(x) for x in _obj(b).flat):
            return super().binop(e, op, a, b)
        z3 = self.z3
        f = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: self.hz.mul,
             ast.FloorDiv: lambda x, y: x / y if _is_z3(x) or _is_z3(y) else x // y,
             ast.Mod: lambda x, y: x % y,
             ast.BitAnd: lambda x, y: z3.And(_b(z3, x), _b(z3, y)), ast.BitOr: lambda x, y: z3.Or(_b(z3, x), _b(z3, y)),
             }.get(op)
        if f is None:
            raise Unsupported(f"{self.where(e)}: operator '{op.__name__}' on sizes")
        r = zmap(f, a, b)
        return r[()] if r.ndim == 0 else r

    def compare(self, e, op, a, b):
        f = {ast.Gt: lambda x, y: x > y, ast.GtE: lambda x, y: x >= y, ast.Lt: lambda x, y: x < y,
             ast.LtE: lambda x, y: x <= y, ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y}[op]
        if isinstance(a, Data) or isinstance(b, Data):
            a, b = self.data(a), self.data(b)
            return Data(zmap(f, a, b))
        r = zmap(f, a, b)
        return r[()] if r.ndim == 0 else r

    # -- builtins --
    def builtin(self, e, name, args, kw):
        z3, ar = self.z3, self.ar
        a0 = args[0] if args else None
        if name == "program_id":
            return self.pid[int(args[0] if args else kw.get("axis", 0))]
        if name == "num_programs":
            return self.grid[int(args[0] if args else kw.get("axis", 0))]
        if name in ("zeros", "full"):
            shape = tuple(int(s) for s in (args[0] if isinstance(args[0], (tuple, list)) else (args[0],)))
            value = 0.0 if name == "zeros" else (args[1] if len(args) > 1 else kw["value"])
            return Data(np.full(shape, self.real(value), dtype=object))
        if name == "cdiv":
            a, b = args
            return (a + b - 1) / b if _is_z3(a) or _is_z3(b) else -(-int(a) // int(b))
        if name == "load":
            return self.load(e, *args, **kw)
        if name == "store":
            return self.store(e, *args, **kw)
        if name in ("sum", "max", "min"):
            return self.reduce(e, name, *args, **kw)
        if name == "where":
            c, a, b = args
            if not (isinstance(a, Data) or isinstance(b, Data) or isinstance(c, Data)):
                return zmap(lambda x, y, z: z3.If(_b(z3, x), y, z) if _is_z3(x) else (y if x else z), c, a, b)
            cc = c.a if isinstance(c, Data) else _obj(c)
            return Data(zmap(lambda x, y, w: z3.If(_b(z3, x), y, w), cc, self.data(a), self.data(b)))
        if name in ("maximum", "minimum"):
            a, b = self.data(args[0]), self.data(args[1])
            f = (lambda x, y: z3.If(x >= y, x, y)) if name == "maximum" else (lambda x, y: z3.If(x <= y, x, y))
            return Data(zmap(f, a, b))
        if name in ("exp", "sqrt", "rsqrt", "sigmoid", "erf", "tanh", "log", "sqrt_rn", "abs"):
            x = self.data(a0)
            f = {"exp": ar.exp1, "sqrt": ar.sqrt1, "sqrt_rn": ar.sqrt1,
                 "rsqrt": lambda t: ar.div1(ar.real(1), ar.sqrt1(t)), "sigmoid": ar.sigmoid1,
                 "abs": lambda t: z3.If(t >= 0, t, -t), "tanh": ar.tanh1}.get(name) or \
                (lambda t, n=name: ar.uninterpreted(n, t))
            return Data(zmap(f, x))
        if name in ("fdiv", "div_rn"):
            return self.binop(e, ast.Div, args[0], args[1])
        if name == "fma":
            return self.binop(e, ast.Add, self.binop(e, ast.Mult, args[0], args[1]), args[2])
        if name == "dot":
            raise Unsupported(f"{self.where(e)}: tl.dot under symbolic sizes")
        if name in ("broadcast_to", "reshape", "view", "trans", "permute", "expand_dims", "exp2"):
            raise Unsupported(f"{self.where(e)}: tl.{name} under symbolic sizes")
        return super().builtin(e, name, args, kw)

    def method(self, e, name, base, args, kwargs):
        if name == "to":
            dt = args[0] if args else kwargs.get("dtype")
            if isinstance(base, Data) and isinstance(dt, _DType) and dt.name.startswith(("int", "uint")):
                raise Unsupported(f"{self.where(e)}: a cast of data to an integer")
            return base
        if name in ("sum", "max", "min"):
            return self.reduce(e, name, base, *args, **kwargs)
        raise Unsupported(f"{self.where(e)}: method .{name}")

    def reduce(self, e, op, x, axis=None, keep_dims=False, **_):
        z3 = self.z3
        x = self.data(x)
        a = x.a.reshape(1, -1) if axis is None else np.moveaxis(x.a, int(axis) % x.a.ndim, -1)
        out = np.empty(a.shape[:-1], dtype=object)
        for idx in np.ndindex(*out.shape):
            vs = list(a[idx])
            if op == "sum":
                out[idx] = z3.Sum(vs)
            else:
                r = vs[0]
                for v in vs[1:]:
                    r = z3.If(v > r, v, r) if op == "max" else z3.If(v < r, v, r)
                out[idx] = r
        if axis is None:
            out = out.reshape(())
        elif keep_dims:
            out = np.expand_dims(out, int(axis) % x.a.ndim)
        return Data(out)

    def mask(self, e, mask, shape):
        if mask is None:
            return np.full(shape, True, dtype=object)
        if isinstance(mask, Data):
            raise Unsupported(f"{self.where(e)}: a data-dependent mask")
        return np.broadcast_to(_obj(mask), shape)

    def load(self, e, ptr, mask=None, other=None, **_):
        z3 = self.z3
        if not isinstance(ptr, Ptr):
            raise Unsupported(f"{self.where(e)}: tl.load of a non-pointer")
        off = _obj(ptr.off)
        m = self.mask(e, mask, off.shape)
        oth = None if other is None else np.broadcast_to(self.data(other).a, off.shape)
        fn = self.hz.arrays[ptr.arg]
        out = np.empty(off.shape, dtype=object)
        for idx in np.ndindex(*off.shape):
            mv = m[idx]
            guard = mv if self.guard is None else z3.And(self.guard, _b(self.z3, mv))
            self.loads.append((ptr.arg, off[idx], guard, self.where(e)))
            val = fn(off[idx])
            if mv is True or (not _is_z3(mv) and bool(mv)):
                out[idx] = val
            elif oth is not None:
                out[idx] = self.z3.If(_b(self.z3, mv), val, oth[idx]) if _is_z3(mv) else oth[idx]
            else:  # masked-off lane without other=: an arbitrary value
                out[idx] = self.z3.If(_b(self.z3, mv), val, self.z3.FreshReal("undef")) if _is_z3(mv) else \
                    self.z3.FreshReal("undef")
        return Data(out)

    def store(self, e, ptr, value, mask=None, **_):
        if not isinstance(ptr, Ptr):
            raise Unsupported(f"{self.where(e)}: tl.store to a non-pointer")
        off = _obj(ptr.off)
        val = np.broadcast_to(self.data(value).a, off.shape)
        m = self.mask(e, mask, off.shape)
        site = self.where(e)
        for idx in np.ndindex(*off.shape):
            mv = m[idx] if self.guard is None else self.z3.And(self.guard, _b(self.z3, m[idx]))
            self.stores.append((ptr.arg, off[idx], val[idx], mv, site, idx, tuple(self.loop_values)))


def _assigned(stmts) -> list:
    """Names a block assigns (in order, once each)."""
    out = []
    for st in stmts:
        for node in ast.walk(st):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in out:
                        out.append(n.id)
    return out


def _increment(z3, new, old):
    """delta where new is old + delta (or old itself: delta 0); None otherwise."""
    if new.eq(old):
        return z3.RealVal(0)
    if z3.is_add(new):
        kids = new.children()
        rest = [c for c in kids if not c.eq(old)]
        if len(rest) == len(kids) - 1:
            return z3.Sum(rest) if len(rest) > 1 else rest[0]
    return None


def _mentions(e, consts) -> bool:
    names = {str(c) for c in consts}
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if x.num_args() == 0 and str(x) in names:
            return True
        stack.extend(x.children())
    return False


def _b(z3, x):
    return x if _is_z3(x) else z3.BoolVal(bool(x))


class HoareSetup:
    """The symbolic sizes of one launch and the point-wise postcondition."""

    def __init__(self, trace, kernel, args, constexprs):
        import z3

        self.z3 = z3
        self.ar = LiftZ3Arith()
        self.pre: list = []  # preconditions on the sizes
        self.bounded: list = []  # sizes a reduction bounds by BLOCK
        self.bound_args: list = []  # "param = size" for the integer arguments taken as sizes
        self.loops: list = []  # (k, trip count, start, step, stop) of the size-dependent loops
        self.recursive: dict = {}  # reductions of the formula defined by recursion (with such loops)
        self.definitions: dict = {}  # name -> (parameter, body) of the recursively defined functions
        self.loop_of: dict = {}  # a size-dependent loop's variable (its sexpr) -> the loop
        self.products: dict = {}  # size x size products as named integers (see mul)
        self.defs: list = []  # their definitions
        values = sorted({d for b in trace.buffers.values() for d in b.shape if d > 1})
        self.size = {v: z3.Int(f"n{v}") for v in values}  # one symbol per launched size (> 1)
        for v, s in self.size.items():
            self.pre.append(s >= 1)
        self.dims = {n: tuple(self.size.get(d, 1) for d in b.shape) for n, b in trace.buffers.items()}
        self.arrays = {n: z3.Function(f"{n}", z3.IntSort(), z3.RealSort()) for n in trace.buffers}
        blocks = sorted({int(v) for v in constexprs.values() if isinstance(v, int) and not isinstance(v, bool)})
        self.block_max = max(blocks) if blocks else None
        # the grid: each dim is cdiv(size, BLOCK) or a size, matched on the launch
        syms = []
        for a, g in enumerate(trace.grid):
            match = None
            for v, s in self.size.items():
                if g == v:
                    match = s
                    break
                for bk in blocks:
                    if bk > 1 and g == -(-v // bk) and v > bk:
                        match = (s + bk - 1) / bk
                        break
                if match is not None:
                    break
            if match is None:
                if g == 1:
                    match = z3.IntVal(1)
                else:
                    raise Unsupported(f"grid dim {a} = {g} is neither a size nor cdiv(size, a constexpr)")
            syms.append(match)
        self.grid_syms = tuple(syms) + (z3.IntVal(1),) * (3 - len(syms))
        self.pids = tuple(z3.Int(f"pid{a}") for a in range(3))
        for a in range(3):
            self.pre += [self.pids[a] >= 0, self.pids[a] < self.grid_syms[a]]

    def define(self, f, param, body):
        """A recursive definition f(param) = body, kept beside an uninterpreted f: proofs
        add the instances they need (`instance`), which Z3 handles far better than
        unfolding recursive functions (it gave up on sum(acc) = R(n) for a chunked row)."""
        self.definitions[f.name()] = (param, body)

    def instance(self, app):
        """f(a) = body[param := a] for an application f(a) of a defined f."""
        param, body = self.definitions[app.decl().name()]
        return app == self.z3.substitute(body, (param, app.arg(0)))

    def mul(self, a, b):
        """a * b; a product of two non-constant integers (a row times a stride) becomes one
        named integer, defined in `defs`, so that addresses stay linear: the induction
        proofs of accumulator loops then hold for any value of it (and so for the
        product), and only the bounds obligations need the definition."""
        z3 = self.z3
        if not (_is_z3(a) and _is_z3(b)):
            return a * b
        a, b = z3.simplify(a), z3.simplify(b)
        if z3.is_int_value(a) or z3.is_int_value(b):
            return a * b
        key = tuple(sorted((a.sexpr(), b.sexpr())))
        if key not in self.products:
            v = z3.Int(f"prod{len(self.products)}")
            self.products[key] = v
            self.defs.append(v == a * b)
        return self.products[key]

    def scalar(self, value):
        """A launch scalar under symbolic sizes: an int equal to a size is that size."""
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) in self.size:
            return self.size[int(value)]
        return value


def pointwise(hz: HoareSetup, t, coords):
    """F(coords): the lifted term `t` at coordinates (Z3 ints, one per dim of t.shape)."""
    z3, ar = hz.z3, hz.ar
    op = t.op
    shape = t.shape

    def at(child, cs):  # align coords (trailing dims) to the child's rank; size-1 dims read 0
        r = len(child.shape)
        cs = tuple(cs)[len(cs) - r:] if r <= len(cs) else (z3.IntVal(0),) * (r - len(cs)) + tuple(cs)
        return tuple(z3.IntVal(0) if child.shape[i] == 1 else c for i, c in enumerate(cs))

    if op == "input":
        name = t.attr("name")
        dims = hz.dims[name]
        flat = z3.IntVal(0)
        for c, d, n in zip(at(t, coords), dims, shape):
            flat = hz.mul(flat, d) + (c if n > 1 else 0)
        return hz.arrays[name](flat)
    if op == "constant":
        v = float(t.attr("value"))
        if v.is_integer() and int(v) in hz.size:  # a size the program computed with (a mean's count)
            return z3.ToReal(hz.size[int(v)])
        return ar.real(v)
    if op in ("add", "sub", "mul", "div"):
        a = pointwise(hz, t.args[0], at(t.args[0], coords))
        b = pointwise(hz, t.args[1], at(t.args[1], coords))
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: ar.div1(a, b)}[op]()
    if op in ("exp", "sqrt", "rsqrt", "sigmoid", "silu", "gelu", "relu"):
        x = pointwise(hz, t.args[0], at(t.args[0], coords))
        if op == "exp":
            return ar.exp1(x)
        if op == "sqrt":
            return ar.sqrt1(x)
        if op == "rsqrt":
            return ar.div1(ar.real(1), ar.sqrt1(x))
        return ar.scalar_unary(op, x)
    if op == "reduction":
        d = t.attr("dim")
        child = t.args[0]
        n = child.shape[d]
        if n == 1:
            return pointwise(hz, child, at(child, coords))
        if hz.loops:  # R(m) = R(m-1) + g(m-1): the sum over a size-dependent dim
            key = (id(t), tuple(str(c) for c in coords))
            if key not in hz.recursive:
                m = z3.Int(f"r{len(hz.recursive)}")
                cs = list(at(child, coords))
                cs[d] = m - 1
                before = len(ar.side)
                g = pointwise(hz, child, cs)
                if any(_mentions(c, [m]) for c in ar.side[before:]):  # per-term assumptions: not expressible
                    raise Unsupported("a reduction whose terms divide or take roots, under size-dependent loops")
                R = z3.Function(f"R{len(hz.recursive)}", z3.IntSort(), z3.RealSort())
                hz.define(R, m, z3.If(m <= 0, ar.real(0), R(m - 1) + g))
                hz.recursive[key] = (R, hz.size[n])
            R, size = hz.recursive[key]
            return R(size)
        if hz.block_max is None or n > hz.block_max:
            raise Unsupported(f"a reduction over {n} elements with no BLOCK that covers it")
        hz.pre.append(hz.size[n] <= hz.block_max)
        hz.bounded.append(hz.size[n])
        terms = []
        for k in range(hz.block_max):
            cs = list(at(child, coords))
            cs[d] = z3.IntVal(k)
            terms.append(z3.If(k < hz.size[n], pointwise(hz, child, cs), ar.real(0)))
        return z3.Sum(terms)
    if op in ("reshape", "repeat"):
        child = t.args[0]
        if [s for s in child.shape if s != 1] != [s for s in shape if s != 1] and op == "reshape":
            raise Unsupported(f"a reshape {child.shape} -> {shape}")
        full = [c for c, s in zip(coords, shape) if s != 1]
        cs = [full.pop(0) if s != 1 else z3.IntVal(0) for s in child.shape] if op == "reshape" else \
            [c if s != 1 else z3.IntVal(0) for c, s in zip(coords, child.shape)]
        return pointwise(hz, child, cs)
    if op == "transpose":
        perm = t.attr("permutation")
        child = t.args[0]
        cs = [None] * len(perm)
        for i, p in enumerate(perm):
            cs[p] = coords[i]
        return pointwise(hz, child, cs)
    raise Unsupported(f"the operator {op} point-wise under symbolic sizes")


def fit_template(trace, name):
    """coords = A @ [pid, lane index, enclosing loop variables, 1] per store site (the
    linear index template of §4.2), fitted exactly on the lanes the launch wrote; lanes
    masked off at the launch (active at other sizes) follow the same template. {site: A}."""
    b = trace.buffers[name]
    rows: dict = {}
    for site, pid, lane, off, loops in b.lanes:
        rows.setdefault(site, []).append((list(pid) + list(lane) + list(loops) + [1],
                                          list(np.unravel_index(off, b.shape))))
    out = {}
    for site, obs in rows.items():
        X = np.array([o[0] for o in obs], dtype=np.float64)
        Y = np.array([o[1] for o in obs], dtype=np.float64)
        coef = np.rint(np.linalg.lstsq(X, Y, rcond=None)[0]).astype(np.int64)  # (features, coords)
        if not np.array_equal(X.astype(np.int64) @ coef, Y.astype(np.int64)):
            raise Unsupported(f"the elements written at {site} are not a linear function of the program id "
                              "and the lane")
        out[site] = coef.T  # (coords, features)
    return out


def _coords(z3, A, pids, lane, loops=()):
    feats = list(pids) + [z3.IntVal(int(i)) for i in lane] + \
        [v if _is_z3(v) else z3.IntVal(int(v)) for v in loops] + [z3.IntVal(1)]
    return [z3.simplify(z3.Sum([int(A[c, f]) * feats[f] for f in range(A.shape[1]) if A[c, f]] or [z3.IntVal(0)]))
            for c in range(A.shape[0])]


def _accumulator_lemmas(z3, hz, ev, side, deadline) -> list:
    """For each accumulator of a size-dependent loop whose lanes the kernel sums, and
    each recursively defined reduction R of the formula over the loop's bound: by
    induction over the iteration k, sum_lanes D(k) = R(min(start + k * step, stop))
    (base k = 0; step k -> k + 1 with the definitions of D once and R up to `step` times
    as instances), and min(start + K * step, stop) = stop for the trip count K; then
    sum_lanes D(K) = R(stop) is assumed by the obligations and rewritten in what reads
    it (LayerNorm's variance loop reads the mean's). Returns (lemmas, rewrites)."""
    lemmas, rewrites = [], []

    def valid(f, instances, cases=(True,)) -> bool:
        """f follows from the instances, in each of `cases` (which cover all)."""
        for case in cases:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            s = z3.Solver()
            s.set("timeout", max(1, int(min(left, 20.0) * 1000)))
            s.add(*hz.pre, *side, *lemmas, *instances, case, z3.Not(f))
            if s.check() != z3.unsat:
                return False
        return True

    for name, fns, (k, trips, start, step, stop) in ev.accumulators:
        def total(x):
            return z3.Sum([D(x) for D in fns]) if len(fns) > 1 else fns[0](x)

        def upto(x):
            return z3.If(x < stop, x, stop)

        kk = z3.Int(f"kk_{name}")
        for R, size in hz.recursive.values():
            if not z3.eq(z3.simplify(size), z3.simplify(stop)):
                continue
            r0, r1 = upto(z3.IntVal(start) + kk * step), upto(z3.IntVal(start) + (kk + 1) * step)
            base = [hz.instance(D(z3.IntVal(0))) for D in fns] + [hz.instance(R(upto(z3.IntVal(start))))]
            # D once at k + 1; R `step` times down from its argument at k + 1 (a chunk adds
            # at most `step` terms), every instance true by definition
            step_inst = [hz.instance(D(kk + 1)) for D in fns] + \
                [hz.instance(R(r1 - i)) for i in range(step + 1)]
            # the step split by how many lanes of chunk k are inside the row (0..step):
            # each case fixes every mask, which Z3 then simplifies away
            first = start + kk * step
            lanes_in = [stop <= first] + [z3.And(first + t - 1 < stop, stop <= first + t) for t in range(1, step)] + \
                [first + step - 1 < stop]
            if valid(total(z3.IntVal(0)) == R(upto(z3.IntVal(start))), base) and \
                    valid(z3.Implies(z3.And(kk >= 0, total(kk) == R(r0)), total(kk + 1) == R(r1)), step_inst,
                          lanes_in) and \
                    valid(z3.And(trips >= 0, upto(start + trips * step) == stop), []):
                lemmas.append(total(trips) == R(stop))
                # later loops and the stores read this sum: rewrite it to R(stop) in their
                # definitions, so that equal formulas are equal terms for Z3
                rewrites.append((total(trips), R(stop)))
                for f_name, (param, body) in hz.definitions.items():
                    hz.definitions[f_name] = (param, z3.substitute(body, rewrites[-1]))
                side[:] = [z3.substitute(c, rewrites[-1]) for c in side]
                break
    return lemmas, rewrites


def prove_grid_loop(kernel, trace, args, constexprs, terms, outputs, timeout_ms: int = 60000) -> Proof:
    t0 = time.perf_counter()
    try:
        return _prove(kernel, trace, args, constexprs, terms, outputs, timeout_ms, t0)
    except (Unsupported, LiftError) as u:
        return Proof("grid loop (Hoare)", "hoare", "not attempted", "all sizes", time.perf_counter() - t0,
                     f"{u}; proved for the launched sizes only")


def _prove(kernel, trace, args, constexprs, terms, outputs, timeout_ms, t0) -> Proof:
    z3 = __import__("z3")
    for n in outputs:
        if trace.buffers[n].read.any():
            raise Unsupported(f"'{n}' is read and written (in place)")
    hz = HoareSetup(trace, kernel, args, constexprs)
    fn = python_function(kernel)
    fdef = _source_of(fn)[0]
    params = [a.arg for a in fdef.args.args]
    ev = SizeEvaluator(fn, hz)
    bound = {}
    positional = list(args)
    for p in params:
        v = constexprs[p] if p in constexprs else positional.pop(0)
        if p in trace.buffers:
            bound[p] = Ptr(p, np.asarray(0, dtype=object))
        else:  # constexprs (BLOCK) stay fixed; size-valued integer arguments become sizes
            bound[p] = v if p in constexprs else hz.scalar(v)
            if _is_z3(bound[p]):
                hz.bound_args.append(f"{p} = {bound[p]}")
    ev._frames.append((fn.__globals__, trace.file, trace.first_line))
    ev.block(fdef.body, bound)
    read_back = sorted({arg for arg, *_ in ev.loads} & set(outputs))
    if read_back:
        raise Unsupported(f"'{read_back[0]}' is read and written")
    ar = hz.ar
    solver = z3.Solver()
    solver.set("timeout", int(timeout_ms))
    deadline = t0 + timeout_ms / 1000.0
    size_of = {n: math.prod([d for d in hz.dims[n]]) if hz.dims[n] else 1 for n in trace.buffers}
    templates = {n: fit_template(trace, n) for n in outputs}
    obligations = []  # (what, formula that must be valid)
    for arg, off, m, where in ev.loads:
        obligations.append((f"load of {arg} at {where} in bounds",
                            z3.Implies(_b(z3, m), z3.And(off >= 0, off < size_of[arg]))))
    for arg, off, val, m, site, lane, loops in ev.stores:
        if arg not in templates or site not in templates[arg]:
            raise Unsupported(f"a store into '{arg}' at {site} that the launch never performed")
        A = templates[arg][site]
        if A.shape[1] != 3 + len(lane) + len(loops) + 1:
            raise Unsupported(f"the store at {site} sits in loops the launch did not run the same way")
        coords = _coords(z3, A, hz.pids, lane, loops)
        dims = hz.dims[arg]
        flat = z3.IntVal(0)
        for c, d in zip(coords, dims):
            flat = hz.mul(flat, d) + c
        F = pointwise(hz, terms[outputs.index(arg)], coords)
        in_range = z3.And(*[z3.And(c >= 0, c < d) for c, d in zip(coords, dims)])
        obligations.append((f"store into {arg} lane {lane} at {site}: in bounds, at its template, writes F",
                            z3.Implies(_b(z3, m), z3.And(off >= 0, off < size_of[arg], in_range, off == flat,
                                                          val == F))))
    # exit: every coordinate c of every output is written by some program p < G (and
    # iteration k < K of a size-dependent loop around the store): the template solved
    # for each unknown (a program id, a loop variable) from a coordinate only it moves,
    # as a witness
    for arg in outputs:
        dims = hz.dims[arg]
        cs = [z3.Int(f"c_{arg}_{i}") for i in range(len(dims))]
        cases = []
        for a_, off, val, m, site, lane, loops in ev.stores:
            if a_ != arg:
                continue
            A = templates[arg][site]
            unknown = [(a, None) for a in range(3)] + \
                [(3 + len(lane) + i, hz.loop_of[v.sexpr()]) for i, v in enumerate(loops) if _is_z3(v)]
            feats = list(hz.pids) + [None] * len(lane) + list(loops)
            zero = [z3.IntVal(0)] * 3 + [z3.IntVal(0) if _is_z3(v) else v for v in loops]
            rest = _coords(z3, A, zero[:3], lane, zero[3:])
            witness, conds, subst = list(feats), [], []
            for f, loop in unknown:
                nz = [c for c in np.flatnonzero(A[:, f])]
                if not nz:
                    value = z3.IntVal(0) if loop is None else z3.IntVal(loop[2])
                else:
                    c = int(nz[0])
                    if any(A[c, g] for g, _ in unknown if g != f):
                        raise Unsupported(f"the elements written at {site} mix two program ids or loops "
                                          "in one coordinate")
                    value = (cs[c] - rest[c]) / int(A[c, f])
                witness[f] = value
                if loop is None:
                    conds += [value >= 0, value < hz.grid_syms[f]]
                    subst.append((hz.pids[f], value))
                else:
                    k, trips, start, step, _ = loop
                    kw = (value - start) / step
                    conds += [kw >= 0, kw < trips, start + kw * step == value]
                    subst.append((k, kw))
            got = _coords(z3, A, witness[:3], lane, witness[3 + len(lane):])
            mm = z3.substitute(_b(z3, m), *subst)
            cases.append(z3.And(*conds, mm, *[g == c for g, c in zip(got, cs)]))
        cover = z3.Implies(z3.And(*[z3.And(c >= 0, c < d) for c, d in zip(cs, dims)]), z3.Or(*cases))
        obligations.append((f"every element of {arg} is written (exit)", cover))
    side = list(ar.side)
    lemmas, rewrites = _accumulator_lemmas(z3, hz, ev, side, deadline)
    side += lemmas
    for rw in rewrites:
        obligations = [(what, z3.substitute(f, rw)) for what, f in obligations]
    # a dim bounded by BLOCK (a reduced row) is split into its cases 1..BLOCK, each
    # substituted and simplified: Z3 then sees linear addresses and equal sqrt arguments;
    # the other sizes and the program ids stay symbolic
    import itertools

    bounded = sorted({str(s): s for s in hz.bounded}.items())
    cases = list(itertools.product(*[range(1, hz.block_max + 1) for _ in bounded])) if bounded else [()]
    for case in cases:  # contradictory assumptions would prove anything
        sub = [(sym, z3.IntVal(v)) for (_, sym), v in zip(bounded, case)]
        goal = [*hz.pre, *hz.defs, *side]
        solver.push()
        solver.set("timeout", max(1, int((deadline - time.perf_counter()) * 1000)))
        solver.add(*([z3.simplify(z3.substitute(g, *sub)) for g in goal] if sub else goal))
        r = solver.check()
        solver.pop()
        if r != z3.sat:
            return Proof("grid loop (Hoare)", "hoare", "unknown", "all sizes", time.perf_counter() - t0,
                         "the preconditions and assumptions are not shown satisfiable")
    for what, f in obligations:
        for case in cases:
            left = deadline - time.perf_counter()
            if left <= 0:
                return Proof("grid loop (Hoare)", "hoare", "unknown", "all sizes", time.perf_counter() - t0,
                             f"time limit reached before: {what}")
            sub = [(sym, z3.IntVal(v)) for (_, sym), v in zip(bounded, case)]
            goal = [*hz.pre, *hz.defs, *side, z3.Not(f)]
            if sub:
                goal = [z3.simplify(z3.substitute(g, *sub)) for g in goal]
            solver.push()
            solver.set("timeout", max(1, int(left * 1000)))
            solver.add(*goal)
            r = solver.check()
            solver.pop()
            if r != z3.unsat:
                # a model is a real counterexample only where nothing is abstracted: with
                # loops (D, R known by instances only) or exp/erf/sqrt (uninterpreted) it
                # may rest on an interpretation no real function has
                status = "refuted" if r == z3.sat and not (hz.loops or ar.used_uf or ar._seen_sqrt) else "unknown"
                at = f" (with {', '.join(f'{n} = {v}' for (n, _), v in zip(bounded, case))})" if sub else ""
                return Proof("grid loop (Hoare)", "hoare", status, "all sizes", time.perf_counter() - t0,
                             f"obligation failed ({r}){at}: {what}")
    pre = sorted({str(p) for p in hz.pre if "pid" not in str(p)})
    names = ", ".join(f"{n}{list(d)}" for n, d in hz.dims.items())
    grid = ", ".join(str(g) for g in hz.grid_syms[:len(trace.grid)])
    args_s = "; ".join(hz.bound_args)
    detail_loops = f"; {len(lemmas)} accumulator invariant(s) proved by induction" if lemmas else ""
    return Proof("grid loop (Hoare)", "hoare", "proved",
                 f"all sizes ({names}; grid ({grid}); {args_s + '; ' if args_s else ''}assuming {', '.join(pre)})",
                 time.perf_counter() - t0, f"{len(obligations)} obligations discharged by Z3"
                 + (f" (each for {len(cases)} cases of the row length)" if bounded else "") + detail_loops)
