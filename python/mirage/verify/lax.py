"""Lax checker (paper §5, Definition 5.1) and the parameters Theorems 2-3 need.

`analyze(g)` walks a KNGraph with its graph-defined kernels and thread graphs inlined
(the block graph's ops, accumulators and thread-graph bodies are visited in place) and
reports:

* whether the μGraph is Lax: only multi-linear operators, division and exponentiation
  (plus `sqrt`, which Table 3 gives a finite-field meaning), and at most one `exp` on
  every input-to-output path. The op classes come from `mirage.core.ops` (`OpDef.lax`);
  the accumulators `none`, `sum`, `mean`, `rms` and `sum_todimx` are Lax, `max` is not.
  When it is not, each violation names the op and, for two exponentials, the
  input-to-output path through them.
* for every output, the shape of its value in the normal form of Equation (2):
  N / D with N = Σ_{i≤kN} f_i exp(g_i/h_i), D = Σ_{j≤kD} f'_j exp(g'_j/h'_j), together
  with degree bounds of the polynomials f (numerator dN, denominator dD) and of the
  exponents (dE). These are sound upper bounds computed by the rules of polynomial and
  rational arithmetic (a sum of n fractions with a non-constant denominator multiplies
  the degrees and term counts accordingly; a sum with a constant denominator only
  multiplies the term count).
* "atoms": results of operators the theorems do not cover — `sqrt` (a multiplicative
  power map in the field) and the non-Lax operators modelled as random functions
  (silu, gelu, relu, sigmoid, clamp, pow, reduce_max, reduction_max, the max accumulator). The bound treats each
  atom as a fresh variable and adds the probability that two different atom arguments
  collide (see `mirage.verify.equivalence.per_trial_bound`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod

from ..core import ops as O
from ..core.graph import KNGraph
from .field import const_is_exact

CAP = 10**30  # saturate degree / term counts (anything this large gives a vacuous bound)


def _c(x: int) -> int:
    return x if x < CAP else CAP


@dataclass(frozen=True)
class Form:
    """Normal-form summary of one tensor's elements (all elements share it)."""

    dN: int = 0  # degree bound of the numerator polynomials f_i
    dD: int = 0  # degree bound of the denominator polynomials f'_j
    kN: int = 1  # exp terms in the numerator sum
    kD: int = 1  # exp terms in the denominator sum
    dE: int = 0  # degree bound of the exponent polynomials g, h
    ex: bool = False  # some term has a non-trivial exponential
    broken: bool = False  # an exp of an expression holding an exp: Theorem 2 does not apply
    m: int = 0  # atoms (sqrt / random-function results) in the element's cone, with multiplicity
    dA: int = 0  # degree bound of an atom argument's collision polynomial
    kA: int = 1  # exp-term bound of an atom argument's collision polynomial
    exA: bool = False  # some atom argument holds an exponential
    # random-function model (model="random"): per atom site, how many of its elements one
    # element's cone holds (an upper bound, with multiplicity; capped per site later), and
    # the degree bounds of atom arguments' numerators / denominators
    sites: tuple = ()  # sorted ((function, site label), count) pairs
    aN: int = 0
    aD: int = 0
    uncovered: bool = False  # a max (not a function of one argument): no random-model bound

    @property
    def trivial_den(self) -> bool:
        return self.dD == 0 and self.kD == 1 and not self.ex_den

    @property
    def ex_den(self) -> bool:
        return self.ex and self.kD > 1


VAR = Form(dN=1)
CONST = Form()


def _sites_add(*ss: tuple, scale: int = 1) -> tuple:
    acc: dict = {}
    for s in ss:
        for k, n in s:
            acc[k] = _c(acc.get(k, 0) + n)
    return tuple(sorted((k, _c(n * scale)) for k, n in acc.items()))


def _sites_max(*ss: tuple) -> tuple:
    acc: dict = {}
    for s in ss:
        for k, n in s:
            acc[k] = max(acc.get(k, 0), n)
    return tuple(sorted(acc.items()))


def _atomargs(*fs: Form) -> dict:
    return dict(m=_c(sum(f.m for f in fs)), dA=max(f.dA for f in fs), kA=max(f.kA for f in fs),
                exA=any(f.exA for f in fs), broken=any(f.broken for f in fs),
                sites=_sites_add(*(f.sites for f in fs)), aN=max(f.aN for f in fs),
                aD=max(f.aD for f in fs), uncovered=any(f.uncovered for f in fs))


def f_add(a: Form, b: Form) -> Form:
    if a.trivial_den and b.trivial_den:
        return Form(dN=max(a.dN, b.dN), dD=0, kN=_c(a.kN + b.kN), kD=1, dE=max(a.dE, b.dE),
                    ex=a.ex or b.ex, **_atomargs(a, b))
    return Form(dN=_c(max(a.dN + b.dD, b.dN + a.dD)), dD=_c(a.dD + b.dD),
                kN=_c(a.kN * b.kD + b.kN * a.kD), kD=_c(a.kD * b.kD), dE=max(a.dE, b.dE),
                ex=a.ex or b.ex, **_atomargs(a, b))


def f_mul(a: Form, b: Form) -> Form:
    return Form(dN=_c(a.dN + b.dN), dD=_c(a.dD + b.dD), kN=_c(a.kN * b.kN), kD=_c(a.kD * b.kD),
                dE=max(a.dE, b.dE), ex=a.ex or b.ex, **_atomargs(a, b))


def f_div(a: Form, b: Form) -> Form:
    return Form(dN=_c(a.dN + b.dD), dD=_c(a.dD + b.dN), kN=_c(a.kN * b.kD), kD=_c(a.kD * b.kN),
                dE=max(a.dE, b.dE), ex=a.ex or b.ex, **_atomargs(a, b))


def f_sum(a: Form, n: int) -> Form:
    """Sum of n elements of this form."""
    if n <= 1:
        return a
    at = dict(m=_c(a.m * n), dA=a.dA, kA=a.kA, exA=a.exA, broken=a.broken,
              sites=_sites_add(a.sites, scale=n), aN=a.aN, aD=a.aD, uncovered=a.uncovered)
    if a.trivial_den:
        return Form(dN=a.dN, dD=0, kN=_c(a.kN * n), kD=1, dE=a.dE, ex=a.ex, **at)
    kd_pow = CAP if a.kD > 1 and (n - 1) * a.kD.bit_length() > 100 else a.kD ** (n - 1)
    return Form(dN=_c(a.dN + (n - 1) * a.dD), dD=_c(n * a.dD), kN=_c(n * a.kN * kd_pow),
                kD=_c(kd_pow * a.kD), dE=a.dE, ex=a.ex, **at)


def f_pow(a: Form, n: int) -> Form:
    """The product of n elements of this form (n >= 0), by repeated squaring of f_mul."""
    out, base = CONST, a
    while n:
        if n & 1:
            out = f_mul(out, base)
        n >>= 1
        if n:
            base = f_mul(base, base)
    return out


def f_exp(a: Form) -> Form:
    return Form(dN=0, dD=0, kN=1, kD=1, dE=_c(max(a.dE, a.dN, a.dD)), ex=True,
                m=a.m, dA=a.dA, kA=a.kA, exA=a.exA, broken=a.broken or a.ex,
                sites=a.sites, aN=a.aN, aD=a.aD, uncovered=a.uncovered)


def f_atom(*args: Form) -> Form:
    """A fresh variable standing for sqrt(arg) or a random function of the args."""
    dA = max([a.dA for a in args] + [_c(a.dN + a.dD) for a in args])
    kA = max([a.kA for a in args] + [_c(2 * a.kN * a.kD) for a in args])
    return Form(dN=1, m=_c(sum(a.m for a in args) + 1), dA=dA, kA=kA,
                exA=any(a.exA or a.ex for a in args), broken=any(a.broken for a in args),
                sites=_sites_add(*(a.sites for a in args)), aN=max(a.aN for a in args),
                aD=max(a.aD for a in args), uncovered=any(a.uncovered for a in args))


def f_ratom(site, args: list, inverse: bool = False) -> Form:
    """Random-function model: the value R_f(arg) of a random function at one site
    (`site` = (function, label)), a fresh variable Y of degree 1 — or, with `inverse`,
    represented as 1/T with T = 1/R_f(arg) the variable (a denominator of degree 1), which
    is the cheaper choice for sqrt, used almost only as a divisor. Either choice is sound
    as long as every element of one site uses the same one."""
    aN = max([a.aN for a in args] + [a.dN for a in args])
    aD = max([a.aD for a in args] + [a.dD for a in args])
    sites = _sites_add(*(a.sites for a in args), ((site, 1),))
    return Form(dN=0 if inverse else 1, dD=1 if inverse else 0, sites=sites, aN=aN, aD=aD,
                uncovered=any(a.uncovered for a in args), broken=False)


def f_merge(*fs: Form) -> Form:
    return Form(dN=max(f.dN for f in fs), dD=max(f.dD for f in fs), kN=max(f.kN for f in fs),
                kD=max(f.kD for f in fs), dE=max(f.dE for f in fs), ex=any(f.ex for f in fs),
                m=max(f.m for f in fs), dA=max(f.dA for f in fs), kA=max(f.kA for f in fs),
                exA=any(f.exA for f in fs), broken=any(f.broken for f in fs),
                sites=_sites_max(*(f.sites for f in fs)), aN=max(f.aN for f in fs),
                aD=max(f.aD for f in fs), uncovered=any(f.uncovered for f in fs))


@dataclass
class Info:
    form: Form
    exps: int = 0  # most exponentials on one path from an input to here
    path: tuple = ()  # op labels of that path (input first)


@dataclass
class LaxReport:
    lax: bool
    violations: list = field(default_factory=list)  # human-readable reasons it is not Lax
    uninterpreted: list = field(default_factory=list)  # labels of ops modelled as random functions
    max_exps_on_path: int = 0
    outputs: list = field(default_factory=list)  # Form per output
    uses_exp: bool = False
    uses_sqrt: bool = False
    atom_elements: int = 0  # distinct atom values the whole graph computes (an upper bound)
    model: str = "omega"  # "omega": exp = ω^x (Theorem 2); "random": exp, sqrt random functions
    site_elements: dict = field(default_factory=dict)  # random model: (fn, site) -> elements computed
    zero_div: int = 0  # sum over division sites of (divisor elements x divisor numerator degree)
    arg_degree: tuple = (0, 0)  # random model: max (numerator, denominator) degree of any atom argument

    def explain(self) -> str:
        if self.lax:
            return "Lax"
        return "not Lax: " + "; ".join(self.violations)


def _label(prefix: str, level: str, kind: str, k: int) -> str:
    return f"{prefix}{level}.{kind} #{k}"


class _Walker:
    def __init__(self, model: str = "omega"):
        if model not in ("omega", "random"):
            raise ValueError(f"unknown model {model!r}")
        self.model = model
        self.rep = LaxReport(lax=True, model=model)

    def note_nonlax(self, label: str, why: str):
        self.rep.uninterpreted.append(label)
        self.rep.violations.append(f"{label} {why}")

    def count_atoms(self, shape, loop: bool = True) -> None:
        self.rep.atom_elements = _c(self.rep.atom_elements + self.numel(shape, loop))

    def numel(self, shape, loop: bool = True) -> int:
        """Elements a site of this tile `shape` computes over all blocks (and iterations)."""
        scale = self.numel_scale if loop else self.grid_scale
        return _c(scale * prod(shape))

    def atom(self, fn: str, args: list, label: str, shape, loop: bool = True) -> Form:
        """The result of a non-polynomial op (sqrt, a random function, in the random model
        also exp) at the site `label`, applied to `args`, of tile shape `shape`."""
        if self.model == "omega":
            return f_atom(*args)
        site = (fn, label)
        self.rep.site_elements[site] = self.numel(shape, loop)
        f = f_ratom(site, args, inverse=(fn == "sqrt"))
        self.rep.arg_degree = (max(self.rep.arg_degree[0], f.aN), max(self.rep.arg_degree[1], f.aD))
        return f

    def divides(self, shape, divisor: Form, loop: bool = True) -> None:
        """A division by `divisor` (a tile of `shape`): count its possible zeros."""
        self.rep.zero_div = _c(self.rep.zero_div + _c(self.numel(shape, loop) * max(divisor.dN, 1)))

    def rms(self, x: Form, n: int, label: str, shape, loop: bool = True) -> Form:
        """sqrt(sum of n squares / n)."""
        self.divides(shape, CONST, loop)
        return self.atom("sqrt", [f_div(f_sum(f_mul(x, x), n), CONST)], label, shape, loop)

    def combine(self, ins: list, label: str, form: Form, is_exp: bool = False) -> Info:
        worst = max(ins, key=lambda i: i.exps) if ins else Info(CONST)
        exps = worst.exps + (1 if is_exp else 0)
        path = worst.path + (label,)
        if is_exp:
            self.rep.uses_exp = True
            if exps >= 2 and worst.exps == 1:
                self.rep.violations.append(
                    f"path {' -> '.join(path)} passes {exps} exponentials (a Lax program allows one per path)")
        self.rep.max_exps_on_path = max(self.rep.max_exps_on_path, exps)
        return Info(form, exps, path)

    def table_op(self, kind: str, ins: list, attrs: dict, in_shapes: list, label: str) -> Info:
        d = O.OPS[kind]
        fs = [i.form for i in ins]
        if kind in ("add", "sub"):
            f = f_add(*fs)
        elif kind == "mul":
            f = f_mul(*fs)
        elif kind == "div":
            f = f_div(*fs)
            self.divides(in_shapes[1], fs[1])
        elif kind == "square":
            f = f_mul(fs[0], fs[0])
        elif kind == "exp":
            f = f_exp(fs[0]) if self.model == "omega" else self.atom("exp", fs, label, in_shapes[0])
        elif kind == "sqrt":
            self.rep.uses_sqrt = True
            f = self.atom("sqrt", fs, label, in_shapes[0])
        elif kind == "rsqrt":
            self.rep.uses_sqrt = True
            f = f_div(CONST, self.atom("sqrt", fs, label, in_shapes[0]))
        elif kind == "constant":
            # a constant that is no exact rational is a random field element: a variable
            f = CONST if const_is_exact(attrs["value"]) else VAR
        elif kind == "matmul":
            f = f_sum(f_mul(*fs), in_shapes[0][-1])
        elif kind == "reduction":
            f = f_sum(fs[0], in_shapes[0][attrs["dim"]])
        elif kind == "reduction_to_dimx":
            f = f_sum(fs[0], in_shapes[0][-1] // attrs["dimx"])
        elif kind == "rms_norm":
            self.rep.uses_sqrt = True
            ns = attrs.get("normalized_shape") or in_shapes[0][-1:]
            f = f_div(fs[0], self.rms(fs[0], prod(ns), label, in_shapes[0][:len(in_shapes[0]) - len(ns)]))
        elif kind == "mul_scalar":
            # x * c: exact when the field represents c, else c is a random element (a variable)
            f = f_mul(fs[0], CONST if const_is_exact(attrs["scalar"]) else VAR)
        elif kind in ("concat",):
            f = f_merge(*fs)
        elif kind in ("reshape", "transpose", "repeat"):
            f = fs[0]
        elif d.lax == "nonlax":
            n = in_shapes[0][attrs["dim"]] if kind == "reduce_max" else 1
            self.note_nonlax(label, "is not Lax (modelled as an uninterpreted random function)")
            args = [f_sum(fs[0], n)] if n > 1 and self.model == "random" else fs
            f = self.atom(kind, args, label, d.shape(in_shapes, attrs))
            if n > 1:
                f = replace(f, m=_c(fs[0].m * n + 1), uncovered=True)
        else:  # an operator added to the table without a rule here: be conservative
            self.rep.violations.append(f"{label}: no Lax rule for operator '{kind}'")
            f = replace(self.atom(kind, fs, label, ()), uncovered=True) if fs else CONST
        if kind in ("sqrt", "rsqrt") or d.lax == "nonlax":
            self.count_atoms(d.shape(in_shapes, attrs) if in_shapes and in_shapes[0] else ())
        elif kind == "rms_norm":
            ns = attrs.get("normalized_shape") or in_shapes[0][-1:]
            self.count_atoms(in_shapes[0][:len(in_shapes[0]) - len(ns)])
        return self.combine(ins, label, f, is_exp=(kind == "exp"))

    numel_scale = 1  # blocks x iterations of the block graph being walked
    grid_scale = 1  # blocks

    def kernel(self, g: KNGraph) -> list:
        env = {}
        for k, t in enumerate(g.inputs):
            env[id(t)] = Info(VAR, 0, (f"input {k}",))
        for n, op in enumerate(g.ops):
            ins = [env[id(t)] for t in op.inputs]
            label = _label("", "kn", op.kind, n)
            if op.kind == "graph_def":
                outs = self.block(op.body, ins, label + " / ")
            else:
                outs = [self.table_op(op.kind, ins, op.attrs, [t.shape for t in op.inputs], label)]
            for t, i in zip(op.outputs, outs):
                env[id(t)] = i
        return [env[id(t)] for t in g.outputs]

    def block(self, tb, ins: list, prefix: str) -> list:
        self.grid_scale = prod(tb.grid_dim)
        self.numel_scale = self.grid_scale * tb.forloop_range
        try:
            return self._block(tb, ins, prefix)
        finally:
            self.numel_scale = self.grid_scale = 1

    def _block(self, tb, ins: list, prefix: str) -> list:
        env = {}
        for rec, i in zip(tb.inputs, ins):
            env[id(rec.stensor)] = i
        for n, op in enumerate(tb.ops):
            xs = [env[id(t)] for t in op.inputs]
            label = _label(prefix, "tb", op.kind if op.kind != "forloop_accum" else
                           f"forloop_accum<{op.attrs['kind']}>", n)
            if op.kind == "forloop_accum":
                outs = [self.accum(op.attrs["kind"], xs[0], op.inputs[0].shape, tb, label)]
            elif op.kind == "forloop_accum_rescale":
                outs = [self.rescale_accum(op.attrs["acc"], xs[0], xs[1], op.inputs[0].shape, tb, label)]
            elif op.kind == "reduction_max":
                outs = self.running_max(xs[0], op, tb, label)
            elif op.kind == "thread_graph":
                outs = self.thread(op.body, xs, [t.shape for t in op.inputs], label + " / ")
            else:
                outs = [self.table_op(op.kind, xs, op.attrs, [t.shape for t in op.inputs], label)]
            for t, i in zip(op.outputs, outs):
                env[id(t)] = i
        return [env[id(o.stensor)] for o in tb.outputs]

    def accum(self, kind: str, x: Info, shape, tb, label: str) -> Info:
        L = tb.forloop_range
        f = x.form
        if kind == "none":
            r = f_sum(f, L)
        elif kind == "sum":
            r = f_sum(f, L * shape[-1])
        elif kind == "mean":
            r = f_div(f_sum(f, L * shape[-1]), CONST)
            self.divides(shape[:-1], CONST, loop=False)
        elif kind == "rms":
            self.rep.uses_sqrt = True
            r = self.rms(f, L * shape[-1], label, shape[:-1], loop=False)
        elif kind == "sum_todimx":
            r = f_sum(f, L * (shape[-1] // tb.reduction_dimx))
        else:  # max
            self.note_nonlax(label, "is not Lax (the max accumulator is modelled as a random total order)")
            r = replace(self.atom("max", [f_sum(f, L) if self.model == "random" else f], label, shape,
                                  loop=False), m=_c(f.m * L + 1),
                        uncovered=True)
        if kind == "rms":
            self.count_atoms(shape[:-1], loop=False)
        elif kind == "max":
            self.count_atoms(shape, loop=False)
        return self.combine([x], label, r)

    def rescale_accum(self, kind: str, x: Info, r: Info, shape, tb, label: str) -> Info:
        """acc = acc * r + x over L iterations = sum_k x_k * (r_{k+1} ... r_L): bounded as
        L (times the summed last dim for `sum`) terms of x times L - 1 factors r."""
        L = tb.forloop_range
        n = L * (shape[-1] if kind == "sum" else 1)
        f = f_sum(f_mul(x.form, f_pow(r.form, L - 1)), n)
        return self.combine([x, r], label, f)

    def running_max(self, x: Info, op, tb, label: str) -> list:
        """tb.reduction_max: the running max along `dim` over this and the earlier
        iterations (a max of up to dim x L elements: a random total order, no model-2
        bound), and diff = previous max - new max."""
        self.note_nonlax(label, "is not Lax (a running max, modelled as a random total order)")
        n = op.inputs[0].shape[op.attrs["dim"]] * tb.forloop_range
        shape = op.outputs[0].shape
        f = x.form
        m = replace(self.atom("max", [f_sum(f, n) if self.model == "random" else f], label, shape),
                    m=_c(f.m * n + 1), uncovered=True)
        self.count_atoms(shape)
        return [self.combine([x], label, m), self.combine([x], label, f_add(m, m))]

    def thread(self, th, ins: list, shapes: list, prefix: str) -> list:
        """A thread graph: element-wise ops on the broadcast of their operands' tiles (as the
        interpreter runs it), so each op's site has the broadcast shape of its inputs."""
        env = {id(s): (i, tuple(sh)) for s, i, sh in zip(th.inputs, ins, shapes)}
        for n, op in enumerate(th.ops):
            xs = [env[id(t)] for t in op.inputs]
            in_shapes = [sh for _, sh in xs]
            label = _label(prefix, "th", op.kind, n)
            out = self.table_op(op.kind, [i for i, _ in xs], op.attrs, in_shapes, label)
            env[id(op.outputs[0])] = (out, O.broadcast_shapes(*in_shapes) if in_shapes else ())
        return [env[id(s)][0] for s in th.outputs]


def analyze(g: KNGraph, model: str = "omega") -> LaxReport:
    """Decide whether `g` is Lax, explain why not, and summarize each output's normal form.

    `model="omega"`: the forms of Theorem 2 (exp = ω^x). `model="random"`: exp, sqrt and the
    non-Lax ops are random functions; each output's form is then a rational function of the
    inputs and one variable per atom site element (`Form.sites` counts them per cone)."""
    w = _Walker(model)
    outs = w.kernel(g)
    w.rep.outputs = [o.form for o in outs]
    w.rep.lax = not w.rep.violations
    return w.rep


def is_lax(g: KNGraph) -> bool:
    return analyze(g).lax
