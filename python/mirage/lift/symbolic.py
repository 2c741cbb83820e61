"""Symbolic evaluation of a Triton kernel's Python AST (paper §3.1, §5.2.1).

Every program of the launch grid runs in turn on the launched sizes. Index arithmetic
(program ids, `tl.arange`, offsets, masks, loop bounds) is concrete: numpy integer and
boolean arrays. Data is symbolic: numpy object arrays of interned `terms.Node`s. Memory
is one flat object array per pointer argument, holding `var(arg, i)` until a store
overwrites it, so the kernel's effect is read off memory afterwards: for each written
argument, the expression of every element (the specification synthesis must meet).

What is handled: assignments, `for` over `range`/`tl.range`/`tl.static_range`, `if` and
`while` on concrete conditions, calls to other `@triton.jit` functions (inlined), pointer
arithmetic, `tl.load`/`tl.store` with masks and `other=`, element-wise math, reductions,
`tl.dot`, `tl.where`. Anything else stops with a `LiftError` naming the construct and its
line; so does a load or store outside its array and a data-dependent branch.
"""
from __future__ import annotations

import ast
import inspect
import itertools
import math
import textwrap
from dataclasses import dataclass, field

import numpy as np

from .errors import LiftError
from .terms import Node, Terms


@dataclass
class Ptr:
    """A block (or scalar) of pointers into argument `arg`: flat element offsets."""

    arg: str
    off: np.ndarray


@dataclass
class Buffer:
    """A pointer argument: its shape, its memory and which elements were read/written."""

    name: str
    shape: tuple
    dtype: str
    mem: np.ndarray
    read: np.ndarray
    written: np.ndarray
    store_at: str = ""  # file:line of the last tl.store into it
    # written: (store site, program id, lane index, flat offset, values of the enclosing loop variables)
    lanes: list = field(default_factory=list)


@dataclass
class Trace:
    """The kernel's effect on the launched sizes."""

    kernel: str
    terms: Terms
    buffers: dict  # name -> Buffer, in argument order
    scalars: dict  # name -> the scalar argument's value
    grid: tuple
    source: str = ""
    first_line: int = 1
    file: str = ""


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _DType:
    def __init__(self, name):
        self.name = name


class _Builtin:
    """A `tl.*` (or `triton.*`) function or constant reached through the kernel's globals."""

    def __init__(self, name):
        self.name = name


_TL_ROOTS = ("triton", "tl")


def _source_of(fn):
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise LiftError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}") from e
    src = textwrap.dedent("".join(lines))
    tree = ast.parse(src)
    fdef = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fdef is None:
        raise LiftError(f"no function definition in the source of {fn!r}")
    return fdef, src, first, inspect.getsourcefile(fn) or "<kernel>"


def python_function(kernel):
    """The Python function behind a `@triton.jit` object (or a plain function)."""
    fn = getattr(kernel, "fn", kernel)
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise LiftError(f"expected a @triton.jit function, got {type(kernel).__name__}")
    return fn


class Evaluator:
    def __init__(self, fn, terms: Terms, buffers: dict, grid: tuple):
        self.T = terms
        self.buffers = buffers
        self.grid = grid
        self.pid = (0, 0, 0)
        self.loop_values: list = []  # the enclosing loops' variables (the all-sizes proof's index template)
        self._frames = []  # (globals, file, first line) of the function being evaluated
        self._fn = fn

    # -- locations and errors --
    def where(self, node) -> str:
        _, file, first = self._frames[-1]
        return f"{file}:{first + getattr(node, 'lineno', 1) - 1}"

    def fail(self, node, message: str):
        raise LiftError(message, self.where(node))

    # -- running --
    def run_program(self, pid, bound: dict):
        self.pid = tuple(pid) + (0,) * (3 - len(pid))
        fdef, _, first, file = _source_of(self._fn)
        self._frames.append((self._fn.__globals__, file, first))
        try:
            self.block(fdef.body, dict(bound))
        except _Return:
            pass
        finally:
            self._frames.pop()

    def call_jit(self, fn, node, args, kwargs):
        fdef, _, first, file = _source_of(fn)
        names = [a.arg for a in fdef.args.args]
        if len(args) > len(names):
            self.fail(node, f"{fdef.name} takes {len(names)} arguments, {len(args)} given")
        env = dict(zip(names, args))
        env.update(kwargs)
        defaults = fdef.args.defaults
        for name, d in zip(names[len(names) - len(defaults):], defaults):
            if name not in env:
                env[name] = self.expr(d, {})
        missing = [n for n in names if n not in env]
        if missing:
            self.fail(node, f"{fdef.name}: missing argument(s) {', '.join(missing)}")
        self._frames.append((fn.__globals__, file, first))
        try:
            self.block(fdef.body, env)
        except _Return as r:
            return r.value
        finally:
            self._frames.pop()
        return None

    # -- statements --
    def block(self, stmts, env):
        for s in stmts:
            self.stmt(s, env)

    def stmt(self, s, env):
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant):  # docstring
                return
            self.expr(s.value, env)
        elif isinstance(s, ast.Assign):
            v = self.expr(s.value, env)
            for t in s.targets:
                self.assign(t, v, env)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value, env), env)
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name):
                self.fail(s, "augmented assignment to something other than a name")
            env[s.target.id] = self.binop(s, type(s.op), self.name(s.target, env), self.expr(s.value, env))
        elif isinstance(s, ast.For):
            self.for_loop(s, env)
        elif isinstance(s, ast.If):
            self.block(s.body if self.truth(s.test, env) else s.orelse, env)
        elif isinstance(s, ast.While):
            n = 0
            while self.truth(s.test, env):
                self.block(s.body, env)
                n += 1
                if n > 1_000_000:
                    self.fail(s, "while loop did not finish after 10^6 iterations")
        elif isinstance(s, ast.Return):
            raise _Return(self.expr(s.value, env) if s.value is not None else None)
        elif isinstance(s, (ast.Pass, ast.Assert)):
            return
        else:
            self.fail(s, f"unsupported statement '{type(s).__name__}'")

    def for_loop(self, s, env):
        it = s.iter
        if not (isinstance(it, ast.Call)):
            self.fail(s, "a for loop must iterate over range(...), tl.range(...) or tl.static_range(...)")
        f = self.expr(it.func, env)
        fname = f.name if isinstance(f, _Builtin) else getattr(f, "__name__", "")
        if f is not range and fname not in ("range", "static_range"):
            self.fail(s, "a for loop must iterate over range(...), tl.range(...) or tl.static_range(...)")
        bounds = [self.concrete_int(a, env, "loop bound") for a in it.args[:3]]
        if not isinstance(s.target, ast.Name):
            self.fail(s, "the loop variable must be a name")
        for i in range(*bounds):
            env[s.target.id] = i
            self.loop_values.append(i)
            try:
                self.block(s.body, env)
            finally:
                self.loop_values.pop()

    def assign(self, t, v, env):
        if isinstance(t, ast.Name):
            env[t.id] = v
        elif isinstance(t, (ast.Tuple, ast.List)):
            vs = list(v) if isinstance(v, (tuple, list)) else None
            if vs is None or len(vs) != len(t.elts):
                self.fail(t, "cannot unpack this value into the assignment's targets")
            for tt, vv in zip(t.elts, vs):
                self.assign(tt, vv, env)
        else:
            self.fail(t, f"unsupported assignment target '{type(t).__name__}'")

    def truth(self, e, env) -> bool:
        v = self.expr(e, env)
        if isinstance(v, np.ndarray) and v.dtype == object:
            self.fail(e, "a branch on a data-dependent value (the lifter needs control flow fixed by the sizes)")
        if isinstance(v, np.ndarray) and v.size != 1:
            self.fail(e, "a branch on a block of values")
        return bool(v)

    def concrete_int(self, e, env, what):
        v = self.expr(e, env)
        if isinstance(v, np.ndarray) and v.dtype != object and v.size == 1:
            v = v.item()
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            self.fail(e, f"the {what} must be an integer fixed by the launch, got {_describe(v)}")
        return int(v)

    # -- expressions --
    def name(self, e, env):
        if e.id in env:
            return env[e.id]
        g = self._frames[-1][0]
        if e.id in g:
            return self.wrap_global(g[e.id])
        import builtins

        if hasattr(builtins, e.id):
            return getattr(builtins, e.id)
        self.fail(e, f"name '{e.id}' is not defined")

    def wrap_global(self, v):
        mod = getattr(v, "__name__", "") if inspect.ismodule(v) else ""
        if mod.split(".")[0] == "triton":
            return _Builtin(mod)
        if type(v).__name__ == "constexpr" and hasattr(v, "value"):
            return v.value
        return v

    def expr(self, e, env):
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            return self.name(e, env)
        if isinstance(e, ast.Attribute):
            base = self.expr(e.value, env)
            if isinstance(base, _Builtin):
                return self.tl_attr(e, base.name, e.attr)
            if e.attr == "T":
                return self.transpose(e, base)
            if e.attr in ("to", "sum", "max", "min", "reshape"):
                return ("method", e.attr, base)
            if e.attr in ("shape", "dtype"):
                return getattr(base, e.attr) if not isinstance(base, Ptr) else base.off.shape
            self.fail(e, f"unsupported attribute '.{e.attr}'")
        if isinstance(e, ast.BinOp):
            return self.binop(e, type(e.op), self.expr(e.left, env), self.expr(e.right, env))
        if isinstance(e, ast.UnaryOp):
            v = self.expr(e.operand, env)
            if isinstance(e.op, ast.USub):
                return self.binop(e, ast.Mult, -1, v) if _is_data(v) else -v
            if isinstance(e.op, ast.UAdd):
                return v
            if isinstance(e.op, ast.Not):
                return not self.truth(e.operand, env)
            if isinstance(e.op, ast.Invert):
                if _is_data(v):
                    self.fail(e, "bitwise not of data")
                return ~v
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1:
                self.fail(e, "chained comparisons")
            return self.compare(e, type(e.ops[0]), self.expr(e.left, env), self.expr(e.comparators[0], env))
        if isinstance(e, ast.BoolOp):
            vals = [self.truth(v, env) for v in e.values]
            return all(vals) if isinstance(e.op, ast.And) else any(vals)
        if isinstance(e, ast.IfExp):
            return self.expr(e.body if self.truth(e.test, env) else e.orelse, env)
        if isinstance(e, (ast.Tuple, ast.List)):
            return tuple(self.expr(x, env) for x in e.elts)
        if isinstance(e, ast.Subscript):
            return self.subscript(e, self.expr(e.value, env), self.index(e.slice, env))
        if isinstance(e, ast.Slice):
            return slice(*(self.expr(x, env) if x is not None else None for x in (e.lower, e.upper, e.step)))
        if isinstance(e, ast.Call):
            return self.call(e, env)
        self.fail(e, f"unsupported expression '{type(e).__name__}'")

    def index(self, e, env):
        if isinstance(e, ast.Tuple):
            return tuple(self.index(x, env) for x in e.elts)
        if isinstance(e, ast.Slice):
            return self.expr(e, env)
        return self.expr(e, env)

    def subscript(self, e, v, idx):
        if isinstance(v, Ptr):
            return Ptr(v.arg, v.off[idx])
        if isinstance(v, np.ndarray):
            return v[idx]
        if isinstance(v, (tuple, list)):
            return v[idx]
        if isinstance(idx, tuple) and all(i is None or i == slice(None) for i in idx) or idx is None:
            return np.asarray(v)[idx]
        self.fail(e, f"cannot index {_describe(v)}")

    def transpose(self, e, v):
        if isinstance(v, Ptr):
            return Ptr(v.arg, v.off.T)
        return np.asarray(v).T

    def tl_attr(self, e, module, attr):
        v = getattr(__import__("triton.language", fromlist=["x"]), attr, None) if module.startswith("triton") else None
        if inspect.ismodule(v):
            return _Builtin(v.__name__)
        if attr in ("float16", "float32", "float64", "bfloat16", "int32", "int64", "int1", "int8", "int16",
                    "uint8", "uint32", "float8e4nv", "float8e5"):
            return _DType(attr)
        if attr == "constexpr":
            return _Builtin("constexpr")
        return _Builtin(attr)

    # -- arithmetic --
    def data(self, v):
        """Any value as an object array of nodes (data)."""
        if isinstance(v, np.ndarray) and v.dtype == object:
            return v
        if isinstance(v, Ptr):
            raise TypeError("pointer")
        a = np.asarray(v)
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(*a.shape):
            out[idx] = self.T.const(float(a[idx]))
        return out

    def elementwise(self, fn, *vals):
        arrs = [self.data(v) for v in vals]
        arrs = np.broadcast_arrays(*arrs)
        out = np.empty(arrs[0].shape, dtype=object)
        for idx in np.ndindex(*out.shape):
            out[idx] = fn(*(a[idx] for a in arrs))
        return out

    def binop(self, e, op, a, b):
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            return self.ptr_arith(e, op, a, b)
        if not (_is_data(a) or _is_data(b)):
            try:
                return _CONCRETE_BIN[op](a, b)
            except KeyError:
                self.fail(e, f"unsupported operator '{op.__name__}'")
            except Exception as ex:  # noqa: BLE001 - report any numpy/Python failure at the line
                self.fail(e, f"cannot apply '{op.__name__}' to {_describe(a)} and {_describe(b)}: {ex}")
        name = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}.get(op)
        if name is None:
            self.fail(e, f"operator '{op.__name__}' on data (only + - * / are arithmetic on data)")
        try:
            return self.elementwise(lambda x, y: self.T.binary(name, x, y), a, b)
        except ValueError as ex:
            self.fail(e, f"shapes do not broadcast: {ex}")

    def ptr_arith(self, e, op, a, b):
        if isinstance(a, Ptr) and isinstance(b, Ptr):
            self.fail(e, "arithmetic between two pointers")
        p, k = (a, b) if isinstance(a, Ptr) else (b, a)
        if _is_data(k) or (isinstance(k, np.ndarray) and k.dtype.kind not in "iub") or isinstance(k, float):
            self.fail(e, f"pointer offset must be an integer index, got {_describe(k)}")
        if op is ast.Add:
            return Ptr(p.arg, np.asarray(p.off + np.asarray(k, dtype=np.int64)))
        if op is ast.Sub and isinstance(a, Ptr):
            return Ptr(p.arg, np.asarray(p.off - np.asarray(k, dtype=np.int64)))
        self.fail(e, f"unsupported pointer arithmetic '{op.__name__}'")

    def compare(self, e, op, a, b):
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            self.fail(e, "comparison of pointers")
        if not (_is_data(a) or _is_data(b)):
            return _CONCRETE_CMP[op](a, b)
        name = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}[op]
        return self.elementwise(lambda x, y: self.T.compare(name, x, y), a, b)

    # -- calls --
    def call(self, e, env):
        f = self.expr(e.func, env)
        args = [self.expr(a, env) for a in e.args]
        kwargs = {k.arg: self.expr(k.value, env) for k in e.keywords}
        if isinstance(f, tuple) and f and f[0] == "method":
            return self.method(e, f[1], f[2], args, kwargs)
        if isinstance(f, _Builtin):
            return self.builtin(e, f.name, args, kwargs)
        inner = getattr(f, "fn", None)
        if inner is not None and type(f).__name__ in ("JITFunction", "JITCallable") or \
                type(f).__name__ == "JITFunction":
            return self.call_jit(inner, e, args, kwargs)
        if f in (min, max, int, float, abs, len, range, bool, tuple, print) and not any(map(_is_data, args)):
            if f is print:
                return None
            return f(*args, **kwargs)
        self.fail(e, f"call of unsupported function {getattr(f, '__name__', f)!r}")

    def method(self, e, name, base, args, kwargs):
        if name == "to":
            return self.cast(e, base, args[0] if args else kwargs.get("dtype"))
        if name in ("sum", "max", "min"):
            return self.reduce(e, name, base, *args, **kwargs)
        if name == "reshape":
            return self.builtin(e, "reshape", [base, *args], kwargs)
        self.fail(e, f"unsupported method '.{name}'")

    def cast(self, e, v, dt):
        dn = dt.name if isinstance(dt, _DType) else str(dt)
        if _is_data(v):
            if dn.startswith(("int", "uint")):
                self.fail(e, f"cast of data to {dn} (the lifter models data as real numbers)")
            return v
        if dn.startswith("float") or dn == "bfloat16":
            return np.asarray(v, dtype=np.float64)
        if dn.startswith(("int", "uint")):
            return np.asarray(v).astype(np.int64)
        return v

    def builtin(self, e, name, args, kw):
        T = self.T
        a0 = args[0] if args else None
        if name == "program_id":
            return self.pid[int(args[0] if args else kw.get("axis", 0))]
        if name == "num_programs":
            return self.grid[int(args[0] if args else kw.get("axis", 0))]
        if name == "arange":
            return np.arange(int(args[0]), int(args[1]), dtype=np.int64)
        if name in ("zeros", "full"):
            shape = tuple(int(s) for s in (args[0] if isinstance(args[0], (tuple, list)) else (args[0],)))
            value = 0.0 if name == "zeros" else (args[1] if len(args) > 1 else kw["value"])
            dt = (args[2] if len(args) > 2 else kw.get("dtype")) if name == "full" else \
                (args[1] if len(args) > 1 else kw.get("dtype"))
            if isinstance(dt, _DType) and dt.name.startswith(("int", "uint")):
                return np.full(shape, int(value), dtype=np.int64)
            return self.data(np.full(shape, float(value)))
        if name in ("cdiv",):
            return -(-int(args[0]) // int(args[1]))
        if name in ("multiple_of", "max_contiguous", "max_constancy", "constexpr", "assume"):
            return a0
        if name in ("static_assert", "device_print", "debug_barrier", "static_print", "device_assert"):
            return None
        if name == "load":
            return self.load(e, *args, **kw)
        if name == "store":
            return self.store(e, *args, **kw)
        if name in ("sum", "max", "min", "reduce_sum"):
            return self.reduce(e, name.replace("reduce_", ""), *args, **kw)
        if name == "dot":
            return self.dot(e, *args, **kw)
        if name == "where":
            return self.where_(e, *args)
        if name in ("maximum", "minimum"):
            if not (_is_data(args[0]) or _is_data(args[1])):
                return (np.maximum if name == "maximum" else np.minimum)(args[0], args[1])
            op = "max" if name == "maximum" else "min"
            return self.elementwise(lambda x, y: T.nary(op, [x, y]), args[0], args[1])
        if name in ("exp", "log", "sqrt", "rsqrt", "sigmoid", "erf", "tanh", "abs", "sqrt_rn"):
            op = "sqrt" if name == "sqrt_rn" else name
            if not _is_data(a0):
                a0 = self.data(a0)
            return self.elementwise(lambda x: T.unary(op, x), a0)
        if name == "exp2":  # 2^x = exp(x ln 2)
            return self.elementwise(lambda x: T.unary("exp", T.binary("mul", T.const(math.log(2.0)), x)), a0)
        if name in ("fdiv", "div_rn"):
            return self.binop(e, ast.Div, args[0], args[1])
        if name == "fma":
            return self.binop(e, ast.Add, self.binop(e, ast.Mult, args[0], args[1]), args[2])
        if name == "cast":
            return self.cast(e, a0, args[1] if len(args) > 1 else kw.get("dtype"))
        if name in ("broadcast_to",):
            shape = args[1] if len(args) == 2 else tuple(args[1:])
            return Ptr(a0.arg, np.broadcast_to(a0.off, shape)) if isinstance(a0, Ptr) else np.broadcast_to(a0, shape)
        if name in ("reshape", "view"):
            shape = args[1] if len(args) == 2 and isinstance(args[1], tuple) else tuple(args[1:])
            return a0.reshape(shape) if not isinstance(a0, Ptr) else Ptr(a0.arg, a0.off.reshape(shape))
        if name in ("trans", "permute"):
            perm = args[1:] if len(args) > 1 else (kw.get("dims"),)
            perm = perm[0] if len(perm) == 1 and isinstance(perm[0], tuple) else perm
            perm = None if perm in ((), (None,)) else perm
            return np.transpose(a0, perm) if not isinstance(a0, Ptr) else Ptr(a0.arg, np.transpose(a0.off, perm))
        if name == "expand_dims":
            return np.expand_dims(a0, int(args[1] if len(args) > 1 else kw["axis"]))
        if name in ("range", "static_range"):
            return range(*args)
        self.fail(e, f"unsupported Triton function 'tl.{name}'")

    def load(self, e, ptr, mask=None, other=None, **_ignored):
        if not isinstance(ptr, Ptr):
            self.fail(e, f"tl.load of {_describe(ptr)} (expected pointers; block pointers are not supported)")
        buf = self.buffers[ptr.arg]
        off = ptr.off
        m = np.ones(off.shape, bool) if mask is None else self.mask(e, mask, off.shape)
        oth = None if other is None else np.broadcast_to(self.data(other), off.shape)
        out = np.empty(off.shape, dtype=object)
        size = buf.mem.size
        for idx in np.ndindex(*off.shape):
            if m[idx]:
                o = int(off[idx])
                if not 0 <= o < size:
                    self.fail(e, f"tl.load reads {ptr.arg}[{o}] outside the array ({size} elements) "
                                 f"at lane {idx} (a wrong mask or offset?)")
                if not buf.written[o]:
                    buf.read[o] = True
                out[idx] = buf.mem[o]
            else:
                out[idx] = oth[idx] if oth is not None else self.T.undef()
        return out

    def store(self, e, ptr, value, mask=None, **_ignored):
        if not isinstance(ptr, Ptr):
            self.fail(e, f"tl.store to {_describe(ptr)} (expected pointers)")
        buf = self.buffers[ptr.arg]
        off = ptr.off
        try:
            val = np.broadcast_to(self.data(value), off.shape)
        except ValueError:
            self.fail(e, f"the stored value's shape {np.shape(value)} does not match the pointers' {off.shape}")
        m = np.ones(off.shape, bool) if mask is None else self.mask(e, mask, off.shape)
        size = buf.mem.size
        buf.store_at = self.where(e)
        for idx in np.ndindex(*off.shape):
            if m[idx]:
                o = int(off[idx])
                if not 0 <= o < size:
                    self.fail(e, f"tl.store writes {ptr.arg}[{o}] outside the array ({size} elements) "
                                 f"at lane {idx} (a wrong mask or offset?)")
                buf.mem[o] = val[idx]
                buf.written[o] = True
                buf.lanes.append((buf.store_at, self.pid, idx, o, tuple(self.loop_values)))

    def mask(self, e, mask, shape):
        if _is_data(mask):
            self.fail(e, "a mask that depends on data")
        try:
            return np.broadcast_to(np.asarray(mask, dtype=bool), shape)
        except ValueError:
            self.fail(e, f"the mask's shape {np.shape(mask)} does not match the pointers' {shape}")

    def reduce(self, e, op, x, axis=None, keep_dims=False, **_ignored):
        if not _is_data(x):
            x = np.asarray(x)
            r = {"sum": np.sum, "max": np.max, "min": np.min}[op](x, axis=axis, keepdims=bool(keep_dims))
            return r
        x = np.asarray(x)
        if axis is None:
            flat = x.reshape(1, -1)
            out = np.empty((1,), dtype=object)
            out[0] = self.T.nary(op, list(flat[0]))
            return out.reshape(()) if not keep_dims else out.reshape((1,) * x.ndim)
        ax = int(axis) % x.ndim
        moved = np.moveaxis(x, ax, -1)
        out = np.empty(moved.shape[:-1], dtype=object)
        for idx in np.ndindex(*out.shape):
            out[idx] = self.T.nary(op, list(moved[idx]))
        return np.expand_dims(out, ax) if keep_dims else out

    def dot(self, e, a, b, acc=None, **_ignored):
        a, b = self.data(a), self.data(b)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            self.fail(e, f"tl.dot of shapes {a.shape} and {b.shape}")
        T = self.T
        out = np.empty((a.shape[0], b.shape[1]), dtype=object)
        for i in range(a.shape[0]):
            for j in range(b.shape[1]):
                out[i, j] = T.block_sum([T.binary("mul", a[i, k], b[k, j]) for k in range(a.shape[1])])
        if acc is not None:
            out = self.elementwise(lambda x, y: T.binary("add", x, y), acc, out)
        return out

    def where_(self, e, c, a, b):
        if not _is_data(c):
            c = np.asarray(c, dtype=bool)
            if not (_is_data(a) or _is_data(b)):
                return np.where(c, a, b)
            a, b = self.data(a), self.data(b)
            return np.where(c, a, b)
        return self.elementwise(lambda x, y, z: self.T.where(x, y, z), c, a, b)


def _is_data(v) -> bool:
    return isinstance(v, Node) or (isinstance(v, np.ndarray) and v.dtype == object)


def _describe(v) -> str:
    if isinstance(v, Ptr):
        return f"pointers into '{v.arg}'"
    if _is_data(v):
        return f"data of shape {np.shape(v)}"
    if isinstance(v, np.ndarray):
        return f"a {v.dtype} array of shape {v.shape}"
    return f"{type(v).__name__} {v!r}"


_CONCRETE_BIN = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: np.true_divide(a, b), ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
    ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b, ast.Pow: lambda a, b: a ** b,
}
_CONCRETE_CMP = {
    ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
}


def _is_constexpr(annotation) -> bool:
    return annotation is not None and "constexpr" in ast.unparse(annotation)


def trace(kernel, grid, args, constexprs) -> Trace:
    """Run `kernel` symbolically over `grid` with launch arguments `args` (arrays or
    torch tensors for pointers, Python numbers for scalars) and `constexprs`."""
    fn = python_function(kernel)
    fdef, src, first, file = _source_of(fn)
    params = [a.arg for a in fdef.args.args]
    const_params = {a.arg for a in fdef.args.args if _is_constexpr(a.annotation)}
    where = f"{file}:{first + fdef.lineno - 1}"
    unknown = sorted(set(constexprs) - set(params))
    if unknown:
        raise LiftError(f"{fdef.name} has no parameter(s) {', '.join(unknown)}", where)
    bound: dict = {}
    positional = list(args)
    defaults = dict(zip(params[len(params) - len(fdef.args.defaults):], fdef.args.defaults))
    for p in params:
        if p in constexprs:
            bound[p] = constexprs[p]
        elif positional:
            bound[p] = positional.pop(0)
        elif p in defaults:
            bound[p] = ast.literal_eval(defaults[p])
        else:
            raise LiftError(f"{fdef.name}: no value for parameter '{p}'"
                            + (" (a tl.constexpr: pass it as a keyword)" if p in const_params else ""), where)
    if positional:
        raise LiftError(f"{fdef.name} takes {len(params)} arguments, {len(params) + len(positional)} given", where)
    T = Terms()
    buffers, scalars = {}, {}
    for p in params:
        v = bound[p]
        arr = _as_array(v)
        if arr is not None:
            if arr.dtype.kind != "f":
                raise LiftError(f"argument '{p}' is a {arr.dtype} array; only floating-point tensors are lifted",
                                where)
            n = arr.size
            mem = np.empty(n, dtype=object)
            for i in range(n):
                mem[i] = T.var(p, i)
            buffers[p] = Buffer(p, tuple(arr.shape), str(arr.dtype), mem, np.zeros(n, bool), np.zeros(n, bool))
            bound[p] = Ptr(p, np.asarray(0, dtype=np.int64))
        elif isinstance(v, (bool, int, float, np.integer, np.floating)):
            scalars[p] = v
        else:
            raise LiftError(f"argument '{p}': unsupported value of type {type(v).__name__} "
                            "(expected an array, a torch tensor or a number)", where)
    grid_t = _grid(grid, {**constexprs, **scalars}, where)
    tr = Trace(fdef.name, T, buffers, scalars, grid_t, src, first, file)
    ev = Evaluator(fn, T, buffers, grid_t)
    for pid in itertools.product(*(range(g) for g in grid_t)):
        ev.run_program(pid, bound)
    return tr


def _as_array(v):
    if isinstance(v, np.ndarray):
        return v
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        return v.detach().cpu().numpy()
    return None


def _grid(grid, meta, where):
    if callable(grid):
        grid = grid(meta)
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    try:
        if isinstance(grid, str):
            raise TypeError(grid)
        g = tuple(int(x) for x in grid)
    except (TypeError, ValueError):
        raise LiftError(f"the grid must be an int, a tuple of ints or a callable returning one, got {grid!r}", where)
    if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
        raise LiftError(f"the grid {g} must have 1 to 3 positive dims", where)
    if math.prod(g) > 65536:
        raise LiftError(f"the grid {g} has {math.prod(g)} programs: lift at a smaller size", where)
    return g
