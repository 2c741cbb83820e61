"""The Z3 subexpression checker (`search/z3check.py`) takes its named functions from the op
table: every operator abstracted as fn(name, x) (those with a `real` function, and clamp)
gets the A_sub axiom Table 2 states for silu, so Z3 proves what the normal-form checker
accepts."""
from __future__ import annotations

import pytest

from mirage.core.ops import OPS
from mirage.search.absexpr import RawBuilder, Table, named_functions

z3check = pytest.importorskip("mirage.search.z3check")
pytest.importorskip("z3")

R = RawBuilder()
X, Y = R.var(0), R.var(1)
NAMED = named_functions()


def _abstract(d):
    return d.absexpr(R, [R.var(i) for i in range(d.arity)], [(4, 4)] * d.arity, {})


def test_named_functions_are_the_ops_with_a_real_function_and_clamp():
    # of the element-wise ops, fn(name, x) is the abstract expression of exactly these: each
    # with a `real` function, and clamp (its bounds are attributes: no function of x alone)
    fn_ops = [n for n, d in OPS.items()
              if d.absexpr and d.category in ("unary", "binary") and _abstract(d)[0] == "fn"]
    assert fn_ops == NAMED == [n for n, d in OPS.items() if d.real or n == "clamp"]
    assert {"silu", "gelu", "relu", "sigmoid", "clamp"} <= set(NAMED)
    assert all(_abstract(OPS[n]) == ("fn", n, X) for n in NAMED)


@pytest.mark.parametrize("name", NAMED)
def test_z3_proves_what_the_fast_checker_accepts_under_a_named_function(name):
    """The gated-MLP pattern with each named function: the matmul under it, and its
    product, are subexpressions (before, only silu had the axiom: Z3 said unknown for gelu,
    relu and sigmoid, so checker='z3' pruned what 'fast' kept)."""
    T = Table()
    mm = R.sum(64, R.mul(X, Y))
    o = R.mul(R.fn(name, mm), Y)
    for p in (mm, R.mul(X, Y), R.fn(name, mm)):
        assert T.is_sub(T.from_raw(p), T.from_raw(o))
        assert z3check.z3_is_sub(p, o, 2000) is True, (p, o)
    # and not what is not there: Y is no subexpression of fn(X), nor fn(X) of another fn
    assert z3check.z3_is_sub(Y, R.fn(name, X), 300) is not True
    other = next(n for n in NAMED if n != name)
    assert z3check.z3_is_sub(R.fn(name, X), R.fn(other, X), 300) is not True


def test_unknown_function_name_is_an_error_naming_it():
    with pytest.raises(ValueError, match="fn\\('tanh'.*no operator of that name"):
        z3check.z3_is_sub(X, R.fn("tanh", X), 300)
