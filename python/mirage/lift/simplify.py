"""E-graph simplification of a formula to its textbook form with egglog (paper §5.1,
§5.2.3): equality saturation under arithmetic and function rules, then extraction of
the cheapest equivalent term.

Formulas here are trees of tuples: ('var', name), ('num', value), (op, *args) with op
one of add sub mul div neg exp sqrt rsqrt sigmoid silu gelu relu matmul transpose, and
('sum' | 'max', arg, dim, count) for reductions over `count` elements of dim `dim`.

The rules (each an identity of real arithmetic, so the result means the same):
- x * rsqrt(y) = x / sqrt(y); a * (1 / b) = a / b; -1 * a = -a;
- exp(a - b) = exp(a) / exp(b); (a / c) / (b / c) = a / b;
- sum(a / exp(max(y, d)), d) = sum(a, d) / exp(max(y, d)) (the divisor is constant along
  the summed dim: it is a reduction over that same dim);
- sum(a, d, n) / n = mean(a, d);
- 1 - 2 / (exp(2a) + 1) = tanh(a); relu(a) + c * (a - relu(a)) = leaky_relu(a, c) (the
  forms synthesis gives tanh and a leaky ReLU, which have no kn operator).
Together they undo the max-shift of a numerically stable softmax and recover means.
"""
from __future__ import annotations

import ast

RSQRT_COST = 8  # extraction prefers x / sqrt(y) (the textbook form) to x * rsqrt(y)


def _model():
    try:
        import egglog  # noqa: F401 - imported only to say what to install when missing
    except ImportError:
        from .errors import LiftError

        raise LiftError("formula simplification needs egglog: pip install 'mirage[lift]' (or egglog), "
                        "or call lift_triton(..., simplify=False)") from None
    from egglog import EGraph, Expr, StringLike, f64, f64Like, function, i64, i64Like, method, rewrite, var, vars_

    class F(Expr):
        def __init__(self, v: f64Like) -> None: ...

        @classmethod
        def var(cls, name: StringLike) -> F: ...

        def __add__(self, o: F) -> F: ...

        def __sub__(self, o: F) -> F: ...

        def __mul__(self, o: F) -> F: ...

        def __truediv__(self, o: F) -> F: ...

        def __neg__(self) -> F: ...

        def __matmul__(self, o: F) -> F: ...

        @method(cost=RSQRT_COST)
        def rsqrt(self) -> F: ...

    @function
    def exp(x: F) -> F: ...

    @function
    def sqrt(x: F) -> F: ...

    @function
    def sigmoid(x: F) -> F: ...

    @function
    def silu(x: F) -> F: ...

    @function
    def gelu(x: F) -> F: ...

    @function
    def relu(x: F) -> F: ...

    @function
    def transpose(x: F) -> F: ...

    @function
    def tanh(x: F) -> F: ...

    @function
    def leaky_relu(x: F, c: f64Like) -> F: ...

    @function
    def rsum(x: F, d: i64Like, n: f64Like) -> F: ...

    @function
    def rmax(x: F, d: i64Like, n: f64Like) -> F: ...

    @function
    def mean(x: F, d: i64Like) -> F: ...

    a, b, c, y = vars_("a b c y", F)
    d = var("d", i64)
    n = var("n", f64)
    rules = [
        rewrite(a * b.rsqrt()).to(a / sqrt(b)),
        rewrite(b.rsqrt()).to(F(1.0) / sqrt(b)),
        rewrite(a * (F(1.0) / b)).to(a / b),
        rewrite((F(1.0) / b) * a).to(a / b),
        rewrite(F(-1.0) * a).to(-a),
        rewrite(exp(a - b)).to(exp(a) / exp(b)),
        rewrite((a / c) / (b / c)).to(a / b),
        rewrite(rsum(a / exp(rmax(y, d, n)), d, n)).to(rsum(a, d, n) / exp(rmax(y, d, n))),
        rewrite(rsum(a, d, n) / F(n)).to(mean(a, d)),
        rewrite(F(1.0) - F(2.0) / (exp(F(2.0) * a) + F(1.0))).to(tanh(a)),
        rewrite(relu(a) + F(n) * (a - relu(a))).to(leaky_relu(a, n)),
    ]
    fns = dict(F=F, exp=exp, sqrt=sqrt, sigmoid=sigmoid, silu=silu, gelu=gelu, relu=relu, transpose=transpose,
               rsum=rsum, rmax=rmax, mean=mean, tanh=tanh, leaky_relu=leaky_relu)
    return EGraph, rules, fns


def to_egglog(tree, fns):
    F = fns["F"]
    op = tree[0]
    if op == "var":
        return F.var(tree[1])
    if op == "num":
        return F(float(tree[1]))
    a = [to_egglog(x, fns) for x in tree[1:] if isinstance(x, tuple)]
    if op in ("sum", "max"):
        return (fns["rsum"] if op == "sum" else fns["rmax"])(a[0], int(tree[2]), float(tree[3]))
    if op == "add":
        return a[0] + a[1]
    if op == "sub":
        return a[0] - a[1]
    if op == "mul":
        return a[0] * a[1]
    if op == "div":
        return a[0] / a[1]
    if op == "neg":
        return -a[0]
    if op == "matmul":
        return a[0] @ a[1]
    if op == "rsqrt":
        return a[0].rsqrt()
    return fns[op](a[0])


def from_python(text: str):
    """Back from the extracted term's Python rendering to a formula tree."""
    mod = ast.parse(text)
    lets = {}
    for st in mod.body[:-1]:  # shared subterms may be printed as assignments
        lets[st.targets[0].id] = st.value
    return _tree(mod.body[-1].value, lets)


def _tree(e, lets):
    if isinstance(e, ast.Name) and e.id in lets:
        return _tree(lets[e.id], lets)
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr == "var":
            return ("var", e.args[0].value)
        if isinstance(f, ast.Attribute) and f.attr == "rsqrt":
            return ("rsqrt", _tree(f.value, lets))
        if isinstance(f, ast.Name) and f.id == "F":
            return ("num", _num(e.args[0]))
        name = f.id
        args = [_tree(x, lets) if not _is_lit(x) else _num(x) for x in e.args]
        if name in ("rsum", "rmax"):
            return ("sum" if name == "rsum" else "max", args[0], int(args[1]), float(args[2]))
        if name == "mean":
            return ("mean", args[0], int(args[1]))
        if name == "leaky_relu":
            return ("leaky_relu", args[0], ("num", float(args[1])))
        return (name, *args)
    if isinstance(e, ast.BinOp):
        op = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul"}[type(e.op)]
        return (op, _tree(e.left, lets), _tree(e.right, lets))
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = _tree(e.operand, lets)
        return ("num", -inner[1]) if inner[0] == "num" else ("neg", inner)
    if isinstance(e, ast.Constant):
        return ("num", float(e.value))
    raise ValueError(f"unexpected extracted term {ast.unparse(e)}")


def _is_lit(e):
    return isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _num(e):
    return float(ast.literal_eval(e))


def simplify(trees: list, iterations: int = 12) -> list:
    """Simplify several formulas (one e-graph); returns their extracted trees."""
    EGraph, rules, fns = _model()
    eg = EGraph()
    eg.register(*rules)
    handles = [eg.let(f"o{k}", to_egglog(t, fns)) for k, t in enumerate(trees)]
    eg.run(iterations)
    return [from_python(str(eg.extract(h))) for h in handles]
