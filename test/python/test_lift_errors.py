"""mirage.lift on kernels it must not accept: deliberately bugged kernels never verify
as the intended formula, unsupported constructs stop with an error naming the construct
and its line, and the package imports without its optional dependencies."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import triton
import triton.language as tl

from mirage.lift import LiftError, lift_triton
from mirage.lift.corpus import BUGGED, SIZE_BUGGED, case
from mirage.lift.symbolic import trace
from mirage.lift.verify import field_check, prove_bounded


def _line_of(fn, text):
    import inspect

    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("name, text", [
    ("add_wrong_mask", "writes only 9 of the 10 elements of 'out_ptr' (never: [9])"),
    ("add_off_by_one", "tl.load reads x_ptr[10] outside the array (10 elements)"),
    ("shift_off_by_one", "the elements are not one formula"),
    ("softmax_wrong_other", "the elements are not one formula"),
])
def test_bugged_kernel_is_not_lifted(name, text):
    c = case(name)
    with pytest.raises(LiftError) as e:
        lift_triton(c.kernel, c.grid, *c.make(np.random.default_rng(0)), **c.constexprs)
    assert text in str(e.value)
    assert e.value.where and e.value.where.startswith(c.kernel.fn.__code__.co_filename)


def test_off_by_one_error_names_the_load_line():
    c = case("add_off_by_one")
    with pytest.raises(LiftError) as e:
        lift_triton(c.kernel, c.grid, *c.make(np.random.default_rng(0)), **c.constexprs)
    assert e.value.where.endswith(f":{_line_of(c.kernel, 'x_ptr + offs + 1')}")


def test_wrong_count_rmsnorm_lifts_to_its_own_formula_not_rmsnorm():
    rng = np.random.default_rng(1)
    bug, good = case("rmsnorm_wrong_count"), case("rmsnorm")
    args = bug.make(rng)
    rb = lift_triton(bug.kernel, bug.grid, *args, **bug.constexprs)
    rg = lift_triton(good.kernel, good.grid, *args, **good.constexprs)
    assert rb.verified  # it is proved to compute what it computes...
    assert rb.formula != good.formula and "sum(x * x, 1) / 8" in rb.formula
    assert not rb.equivalent_to(rg.graph).equivalent  # ...which is not RMSNorm
    assert rg.equivalent_to(rg.graph).equivalent
    x, w = rng.standard_normal((3, 6)), rng.standard_normal(6)
    ref = good.reference(x, w)[0]
    assert not np.allclose(rb.graph.evaluate([x, w])[0], ref, rtol=1e-3)
    np.testing.assert_allclose(rg.graph.evaluate([x, w])[0], ref, rtol=1e-10)


def test_every_bugged_kernel_is_caught():
    for c in BUGGED:
        args = c.make(np.random.default_rng(2))
        try:
            r = lift_triton(c.kernel, c.grid, *args, **c.constexprs)
        except LiftError:
            continue
        assert r.formula != c.formula, c.name


@pytest.mark.parametrize("c", SIZE_BUGGED, ids=[c.name for c in SIZE_BUGGED])
def test_size_bug_is_caught_by_the_all_sizes_proof(c):
    """Right at the launched sizes (a literal equal to the launched size), wrong at others."""
    r = lift_triton(c.kernel, c.grid, *c.make(np.random.default_rng(0)), **c.constexprs)
    assert r.formula == c.formula and r.proofs[0].status == "proved"  # fine where it was launched
    hoare = next(p for p in r.proofs if p.method == "hoare")
    assert hoare.status == "refuted", r.report()
    assert not r.verified and not r.all_sizes and "verified    NO" in r.report()


def test_bounded_proof_refutes_a_wrong_graph():
    add, mul = case("add"), case("mul")
    args = add.make(np.random.default_rng(0))
    wrong = lift_triton(mul.kernel, mul.grid, *args, **mul.constexprs).graph
    tr = trace(add.kernel, add.grid, args, add.constexprs)
    p = prove_bounded(tr, wrong, ["out_ptr"])
    assert p.status == "refuted" and "differs at out_ptr[" in p.detail
    f = field_check(tr, wrong, ["out_ptr"])
    assert f.status == "failed" and "differs at out_ptr[" in f.detail
    right = lift_triton(add.kernel, add.grid, *args, **add.constexprs).graph
    assert prove_bounded(tr, right, ["out_ptr"]).status == "proved"
    assert field_check(tr, right, ["out_ptr"]).status == "passed"


@triton.jit
def atomic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.atomic_add(out_ptr + offs, x, mask=offs < n)


@triton.jit
def branch_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if tl.sum(x, axis=0) > 0:
        x = x * 2
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def log_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.store(out_ptr + offs, tl.log(x), mask=offs < n)


@pytest.mark.parametrize("kernel, needle, text", [
    (atomic_kernel, "tl.atomic_add(", "unsupported Triton function 'tl.atomic_add'"),
    (branch_kernel, "if tl.sum", "a branch on a data-dependent value"),
    (log_kernel, "tl.store(out_ptr", "no kn operator for log"),
])
def test_unsupported_construct_is_named_with_its_line(kernel, needle, text):
    x = np.ones(8, np.float32)
    with pytest.raises(LiftError) as e:
        lift_triton(kernel, (2,), x, np.zeros(8, np.float32), 8, BLOCK=4)
    assert text in str(e.value)
    assert e.value.where == f"{__file__}:{_line_of(kernel, needle)}"


def test_bad_launch_arguments_are_diagnosed():
    c = case("add")
    x = np.ones(10, np.float32)
    with pytest.raises(LiftError, match="no value for parameter 'BLOCK'"):
        lift_triton(c.kernel, (3,), x, x, x, 10)
    with pytest.raises(LiftError, match="has no parameter"):
        lift_triton(c.kernel, (3,), x, x, x, 10, BLOCK=4, BLOK=4)
    with pytest.raises(LiftError, match="unsupported value of type str"):
        lift_triton(c.kernel, (3,), x, x, "x", 10, BLOCK=4)
    with pytest.raises(LiftError, match="the grid"):
        lift_triton(c.kernel, "three", x, x, x, 10, BLOCK=4)
    with pytest.raises(LiftError, match="expected a @triton.jit function"):
        lift_triton(42, (3,), x, x, x, 10, BLOCK=4)


def test_cli_reports_and_fails_cleanly():
    ok = subprocess.run([sys.executable, "-m", "mirage.lift", "mirage.lift.corpus:softmax_kernel", "--grid", "3",
                         "f32[3,6]", "f32[3,6]", "6", "6", "6", "-D", "BLOCK=8"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "formula     out = exp(x) / sum(exp(x), 1)" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "mirage.lift", "--case", "add_off_by_one"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_imports_without_triton_and_egglog():
    code = textwrap.dedent("""
        import sys
        sys.modules['triton'] = None; sys.modules['egglog'] = None
        import mirage.lift
        from mirage.lift import lift_triton, LiftError
        from mirage.lift.simplify import simplify
        try:
            simplify([('var', 'x')])
        except LiftError as e:
            print('MSG', e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "needs egglog: pip install 'mirage[lift]'" in r.stdout
