"""The subexpression check with Z3, exactly as the paper states it (§4.3, Table 2).

Abstract expressions are terms over an uninterpreted sort `E` with uninterpreted
functions add, mul, div, exp, sqrt, sum : Int × E → E, and one per operator that the op
table abstracts as a named function `fn(name, x)` (`absexpr.named_functions`: silu, gelu,
relu, sigmoid, clamp), each with the A_sub axiom Table 2 states for silu, as the
normal-form checker treats them. The equivalence axioms A_eq and the subexpression
axioms A_sub of Table 2 are asserted universally quantified; `subexpr(p, o)` holds iff
A_eq ∪ A_sub ∪ {¬subexpr(p, o)} is unsatisfiable. Z3 answers unsat (proved), sat or
unknown (not proved within the timeout: pruned, as in the paper). Results are cached
by the pair of terms. This checker is the specification; the search uses the fast
normal-form checker (`absexpr.Table.is_sub`), cross-checked against this one in the
tests.
"""
from __future__ import annotations

from functools import lru_cache

from .absexpr import Raw, named_functions

_CTX: dict = {}


def _env():
    if _CTX:
        return _CTX
    import z3

    E = z3.DeclareSort("E")
    I = z3.IntSort()
    f = {  # the paper's own (Table 2's A_eq relates them), so named here, not taken from the op table
        "add": z3.Function("add", E, E, E),
        "mul": z3.Function("mul", E, E, E),
        "div": z3.Function("div", E, E, E),
        "exp": z3.Function("exp", E, E),
        "sqrt": z3.Function("sqrt", E, E),
        "sum": z3.Function("sum", I, E, E),
        "subexpr": z3.Function("subexpr", E, E, z3.BoolSort()),
    }
    named = {n: z3.Function(n, E, E) for n in named_functions()}
    x, y, z = z3.Consts("x y z", E)
    i, j = z3.Ints("i j")
    add, mul, div, exp, sqrt, sm, sub = (f[k] for k in ("add", "mul", "div", "exp", "sqrt", "sum", "subexpr"))
    A = z3.ForAll
    a_eq = [
        A([x, y], add(x, y) == add(y, x)),
        A([x, y], mul(x, y) == mul(y, x)),
        A([x, y, z], add(x, add(y, z)) == add(add(x, y), z)),
        A([x, y, z], mul(x, mul(y, z)) == mul(mul(x, y), z)),
        A([x, y, z], add(mul(x, z), mul(y, z)) == mul(add(x, y), z)),
        A([x, y, z], add(div(x, z), div(y, z)) == div(add(x, y), z)),
        A([x, y, z], mul(x, div(y, z)) == div(mul(x, y), z)),
        A([x, y, z], div(div(x, y), z) == div(x, mul(y, z))),
        A([x], x == sm(1, x)),
        A([x, i, j], sm(i, sm(j, x)) == sm(i * j, x)),
        A([x, y, i], sm(i, add(x, y)) == add(sm(i, x), sm(i, y))),
        A([x, y, i], sm(i, mul(x, y)) == mul(sm(i, x), y)),
        A([x, y, i], sm(i, div(x, y)) == div(sm(i, x), y)),
        A([x, y], mul(exp(x), exp(y)) == exp(add(x, y))),
        A([x, y], mul(sqrt(x), sqrt(y)) == sqrt(mul(x, y))),
    ]
    a_sub = [
        A([x, y], sub(x, add(x, y))),
        A([x, y], sub(x, mul(x, y))),
        A([x, y], sub(x, div(x, y))),
        A([x, y], sub(y, div(x, y))),
        A([x], sub(x, exp(x))),
        A([x], sub(x, sqrt(x))),
        *(A([x], sub(x, fn(x))) for fn in named.values()),
        A([x, i], sub(x, sm(i, x))),
        A([x], sub(x, x)),
        A([x, y, z], z3.Implies(z3.And(sub(x, y), sub(y, z)), sub(x, z))),
    ]
    _CTX.update(z3=z3, E=E, f=f, named=named, axioms=a_eq + a_sub)
    return _CTX


def to_z3(t: Raw):
    env = _env()
    z3, f = env["z3"], env["f"]
    k = t[0]
    if k == "var":
        return z3.Const(f"in{t[1]}", env["E"])
    if k == "const":
        return z3.Const("c", env["E"])
    if k == "sum":
        return f["sum"](z3.IntVal(t[1]), to_z3(t[2]))
    if k == "fn":
        fn = env["named"].get(t[1])
        if fn is None:  # a function without its A_sub axiom would make every check on it fail
            raise ValueError(f"abstract expression fn({t[1]!r}, ...): no operator of that name "
                             f"abstracted as a named function in the op table ({', '.join(env['named'])})")
        return fn(to_z3(t[2]))
    if k in ("exp", "sqrt"):
        return f[k](to_z3(t[1]))
    return f[k](to_z3(t[1]), to_z3(t[2]))


@lru_cache(maxsize=None)
def z3_is_sub(p: Raw, o: Raw, timeout_ms: int = 2000) -> bool | None:
    """True if A_eq ∪ A_sub ⊨ subexpr(p, o); False if Z3 finds a model; None if unknown."""
    env = _env()
    z3 = env["z3"]
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*env["axioms"])
    s.add(z3.Not(env["f"]["subexpr"](to_z3(p), to_z3(o))))
    r = s.check()
    if r == z3.unsat:
        return True
    if r == z3.sat:
        return False
    return None


def z3_is_sub_nf(table, p: int, o: int) -> bool:
    """Z3 check on normal forms (through equivalent raw terms); unknown counts as no."""
    return bool(z3_is_sub(table.to_raw(p), table.to_raw(o)))


def clear_cache() -> None:
    z3_is_sub.cache_clear()
