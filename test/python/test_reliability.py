"""Bad inputs get clear errors (issue 16): the builder, check_equivalence and the runtime
reject each with an exception of the stated type whose message names the argument and the
problem; the fp filter does not reject an equivalent program because the reference itself
overflows; and a seeded property-based fuzzer drives the builder with random (often
invalid) arguments: every call either builds a graph whose interpreter result matches an
independent numpy float64 recomputation, or raises ValueError/TypeError."""
from __future__ import annotations

import math
import os
import re
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mirage as mi
from mirage.core.graph import GraphError, GraphTypeError
from mirage.runtime import BufferSpec, KernelArg, KernelSpec, LaunchError, Manifest, TensorSpec, load, write_bundle
from mirage.verify import check_equivalence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_runtime import CAI, PTX, FakeDriver, manifest  # noqa: E402  (the fake CUDA driver)


# ------------------------------------------------------------------------------ builder

def _kn():
    g = mi.new_kernel_graph()
    return g, g.new_input((4, 8)), g.new_input((8, 4))


def _other():
    o = mi.new_kernel_graph("other")
    return o.new_input((4, 8))


def _tb(grid=(2, 1, 1), block=(128, 1, 1), forloop=2, dimx=4):
    return mi.new_threadblock_graph(grid, block, forloop, dimx)


def _tb_with_input(X):
    tb = _tb()
    return tb, tb.new_input(X, (0, -1, -1), 1)


BUILDER_CASES = [
    # tensor dims: integers >= 1 only (4.7 used to become 4, True 1)
    ("dims float", lambda g, A, B: g.new_input((4.7, 4)), TypeError, r"new_input dims\[0\] must be an integer, got 4\.7"),
    ("dims bool", lambda g, A, B: g.new_input((True, 4)), TypeError, r"new_input dims\[0\] must be an integer, got True"),
    ("dims str", lambda g, A, B: g.new_input(("4", 4)), TypeError, r"new_input dims\[0\] must be an integer, got '4'"),
    ("dims not a sequence", lambda g, A, B: g.new_input(4), TypeError, r"new_input dims must be a sequence"),
    ("dims zero", lambda g, A, B: g.new_input((0, 4)), ValueError, r"new_input dims\[0\] must be >= 1, got 0"),
    ("dims negative", lambda g, A, B: g.new_input((4, -3)), ValueError, r"new_input dims\[1\] must be >= 1, got -3"),
    ("dims empty", lambda g, A, B: g.new_input(()), ValueError, r"new_input dims must have at least one dim"),
    ("dims huge", lambda g, A, B: g.new_input((2**62, 4)), ValueError, r"new_input dims .* does not fit in 2\*\*63 bytes"),
    ("strides float", lambda g, A, B: g.new_input((4, 4), strides=(4.0, 1)), TypeError, r"new_input strides\[0\] must be an integer"),
    # dtypes: f16, bf16, f32 (a string like "f64" used to fail at print time)
    ("dtype f64", lambda g, A, B: g.new_input((4, 4), dtype="f64"), ValueError, r"new_input dtype: unsupported element type 'f64'"),
    ("dtype numpy", lambda g, A, B: g.new_input((4, 4), dtype=np.float16), TypeError, r"new_input dtype must be a mirage dtype"),
    ("dtype None", lambda g, A, B: g.new_input((4, 4), dtype=None), TypeError, r"new_input dtype must be a mirage dtype"),
    ("constant dtype", lambda g, A, B: g.constant(1.0, (1, 1), dtype="float64"), ValueError, r"constant dtype: unsupported element type 'float64'"),
    ("thread graph dtype", lambda g, A, B: mi.new_thread_graph(["f64"]), ValueError, r"thread graph input 0 dtype: unsupported element type 'f64'"),
    # tensors of another graph (used to give a KeyError when printed or evaluated)
    ("foreign add", lambda g, A, B: g.add(A, _other()), ValueError, r"add operand 1: .* belongs to another graph"),
    ("foreign matmul", lambda g, A, B: g.matmul(_other(), B), ValueError, r"matmul operand 0: .* belongs to another graph"),
    ("foreign mark_output", lambda g, A, B: g.mark_output(_other()), ValueError, r"mark_output: .* belongs to another graph"),
    ("foreign customized", lambda g, A, B: g.customized([_other()], _tb_with_input(A)[0]), ValueError,
     r"customized input 0: .* belongs to another graph"),
    ("foreign tile", lambda g, A, B: _tb().exp(_tb_with_input(A)[1]), ValueError, r"exp operand 0: .* belongs to another graph"),
    ("foreign tile output", lambda g, A, B: _tb().new_output(_tb_with_input(A)[1], (0, -1, -1)), ValueError,
     r"new_output: .* belongs to another graph"),
    ("non-tensor operand", lambda g, A, B: g.exp(3.0), TypeError, r"exp operand 0: expected a DTensor .* got 3\.0"),
    # op attributes
    ("reduction dim float", lambda g, A, B: g.reduction(A, 1.5), TypeError, r"reduction dim must be an integer, got 1\.5"),
    ("reshape negative", lambda g, A, B: g.reshape(A, (-4, -8)), ValueError, r"reshape shape\[0\] must be >= 1, got -4"),
    ("repeat float", lambda g, A, B: g.repeat(A, (1.5, 1)), TypeError, r"repeat repeats\[0\] must be an integer"),
    ("transpose bool", lambda g, A, B: g.transpose(A, (True, False)), TypeError, r"transpose permutation\[0\] must be an integer, got True"),
    ("constant inf", lambda g, A, B: g.constant(math.inf), ValueError, r"constant value must be finite"),
    ("constant str", lambda g, A, B: g.constant("1"), TypeError, r"constant value must be a real number"),
    ("rms_norm float", lambda g, A, B: g.rms_norm(A, (8.0,)), TypeError, r"rms_norm normalized_shape\[0\] must be an integer"),
    # mark_output strides: outputs are row-major; other strides were silently ignored
    ("output strides", lambda g, A, B: g.mark_output(A, strides=(1, 4)), ValueError,
     r"mark_output strides \[1, 4\] are not supported: outputs are row-major, strides \[8, 1\]"),
    ("customized tensor", lambda g, A, B: g.customized(A, _tb_with_input(A)[0]), TypeError, r"customized inputs must be a list"),
    ("customized not tb", lambda g, A, B: g.customized([A], "tb"), TypeError, r"customized needs a block graph"),
    # grid and block dims: positive, within CUDA's limits
    ("grid float", lambda g, A, B: _tb(grid=(4.7, 1, 1)), TypeError, r"grid_dim\[0\] must be an integer, got 4\.7"),
    ("grid zero", lambda g, A, B: _tb(grid=(0, 1, 1)), ValueError, r"grid_dim entries must be positive"),
    ("grid 2**63", lambda g, A, B: _tb(grid=(2**63 - 1, 1, 1)), ValueError, r"grid_dim .* x = 9223372036854775807 exceeds the CUDA limit 2147483647"),
    ("grid y", lambda g, A, B: _tb(grid=(1, 70000, 1)), ValueError, r"grid_dim .* y = 70000 exceeds the CUDA limit 65535"),
    ("block 2048", lambda g, A, B: _tb(block=(2048, 1, 1)), ValueError, r"block_dim .* x = 2048 exceeds the CUDA limit 1024"),
    ("block threads", lambda g, A, B: _tb(block=(512, 4, 1)), ValueError, r"block_dim \[512, 4, 1\] has 2048 threads"),
    ("block z", lambda g, A, B: _tb(block=(1, 1, 128)), ValueError, r"block_dim .* z = 128 exceeds the CUDA limit 64"),
    ("block negative", lambda g, A, B: _tb(block=(-128, 1, 1)), ValueError, r"block_dim entries must be positive"),
    ("block 2**63", lambda g, A, B: _tb(block=(2**63, 1, 1)), ValueError, r"block_dim .* exceeds the CUDA limit 1024"),
    ("forloop zero", lambda g, A, B: _tb(forloop=0), ValueError, r"forloop_range must be >= 1, got 0"),
    ("forloop negative", lambda g, A, B: _tb(forloop=-4), ValueError, r"forloop_range must be >= 1, got -4"),
    ("forloop float", lambda g, A, B: _tb(forloop=2.5), TypeError, r"forloop_range must be an integer, got 2\.5"),
    ("dimx zero", lambda g, A, B: _tb(dimx=0), ValueError, r"reduction_dimx must be >= 1, got 0"),
    ("input_map float", lambda g, A, B: _tb().new_input(A, (0.0, -1, -1), 1), TypeError, r"input_map\[0\] must be an integer"),
    ("forloop_dim float", lambda g, A, B: _tb().new_input(A, (0, -1, -1), 1.0), TypeError, r"new_input forloop_dim must be an integer"),
]


@pytest.mark.parametrize("make,exc,msg", [c[1:] for c in BUILDER_CASES], ids=[c[0] for c in BUILDER_CASES])
def test_builder_rejects_bad_arguments(make, exc, msg):
    g, A, B = _kn()
    n_ops = len(g.ops)
    with pytest.raises(exc, match=msg) as e:
        make(g, A, B)
    # every rejection is a GraphError too (callers catching GraphError see them all), with the rule first
    assert isinstance(e.value, GraphError) and str(e.value).startswith("[")
    assert len(g.ops) == n_ops and not g.outputs  # nothing half-added


def test_builder_accepts_what_it_should():
    """The checks do not reject valid spellings: numpy integers, dtype names, row-major strides."""
    g = mi.new_kernel_graph()
    A = g.new_input((np.int64(4), 8), dtype="f16")
    B = g.new_input([4, 8], strides=(8, 1), dtype="float16")
    assert A.shape == (4, 8) and A.dtype is mi.float16 and B.dtype is mi.float16 and not g.strides
    g.mark_output(g.add(A, g.reduction(B, np.int32(1))), strides=(8, 1))
    tb = mi.new_threadblock_graph((np.int64(2), 1, 1), (1024, 1, 1), np.int64(2), 4)
    assert tb.grid_dim == (2, 1, 1) and tb.forloop_range == 2
    x = np.random.default_rng(0).standard_normal((4, 8))
    y = np.random.default_rng(1).standard_normal((4, 8))
    np.testing.assert_allclose(g.evaluate([x, y])[0], x + y.sum(1, keepdims=True), rtol=1e-12)


def _no_output():
    g = mi.new_kernel_graph()
    g.exp(g.new_input((4, 8)))
    return g


@pytest.mark.parametrize("use", [
    lambda g: g.to_mlir(),
    lambda g: str(g),
    lambda g: g.compile(),
    lambda g: g.superoptimize(),
    lambda g: check_equivalence(g, g),
], ids=["to_mlir", "str", "compile", "superoptimize", "check_equivalence"])
def test_graph_without_output_is_rejected_where_used(use):
    with pytest.raises(GraphError, match=r"^\[output\] .*graph 'main' has no output; mark the tensors it computes "
                                         r"with mark_output"):
        use(_no_output())


# ------------------------------------------------------------------------------ check_equivalence

def _exp_graph(dtype=mi.float16, shape=(4, 8)):
    g = mi.new_kernel_graph()
    g.mark_output(g.exp(g.new_input(shape, dtype=dtype)))
    return g


EQ_ARG_CASES = [
    (dict(delta=0), ValueError, r"delta must be in \(0, 1\).*got 0"),
    (dict(delta=1.0), ValueError, r"delta must be in \(0, 1\)"),
    (dict(delta=-1e-9), ValueError, r"delta must be in \(0, 1\)"),
    (dict(delta=math.nan), ValueError, r"delta must be in \(0, 1\)"),
    (dict(delta="1e-9"), TypeError, r"delta must be a number"),
    (dict(delta=True), TypeError, r"delta must be a number"),
    (dict(seed=-1), ValueError, r"seed must be >= 0"),
    (dict(seed=1.5), TypeError, r"seed must be an integer"),
    (dict(max_trials=0), ValueError, r"max_trials must be >= 1"),
    (dict(vacuous_trials=0), ValueError, r"vacuous_trials must be >= 1"),
    (dict(max_resamples=-1), ValueError, r"max_resamples must be >= 0"),
    (dict(primes=(7,)), TypeError, r"primes must be a pair of integers"),
    (dict(primes=(7, 5)), ValueError, r"primes must be primes \(p, q\) with q dividing p - 1"),
    (dict(primes=(9, 4)), ValueError, r"primes must be primes"),
    (dict(fp_tolerance=0.0), ValueError, r"fp_tolerance must be positive and finite"),
    (dict(fp_tolerance=math.inf), ValueError, r"fp_tolerance must be positive and finite"),
    (dict(fp_inputs=[]), ValueError, r"fp_inputs has 0 arrays, the programs take 1"),
    (dict(fp_inputs=[np.zeros((8, 4))]), ValueError, r"fp_inputs\[0\] has shape \[8, 4\], input 0 is \[4, 8\]"),
    (dict(input_scales=[1.0, 2.0]), ValueError, r"input_scales has 2 entries, the programs take 1 inputs"),
    (dict(input_scales=[0.0]), ValueError, r"input_scales\[0\] must be a positive finite number"),
    (dict(progress=5), TypeError, r"progress must be callable"),
]


@pytest.mark.parametrize("kwargs,exc,msg", EQ_ARG_CASES, ids=[str(c[0]) for c in EQ_ARG_CASES])
def test_check_equivalence_validates_arguments(kwargs, exc, msg):
    g = _exp_graph()
    with pytest.raises(exc, match=r"^check_equivalence: " + msg):
        check_equivalence(g, _exp_graph(), **kwargs)


@pytest.mark.parametrize("opt,value,msg", [
    ("delta", "0", r"expected a probability in \(0, 1\), got 0"),
    ("delta", "1.5", r"expected a probability in \(0, 1\), got 1.5"),
    ("max-trials", "0", r"expected an integer >= 1, got 0"),
    ("seed", "-1", r"expected a non-negative integer, got -1"),
])
def test_verify_pass_options_are_usage_errors(opt, value, msg):
    """mirage-opt reports a bad option of --mirage-verify as a usage error (delta=0 was an
    'internal error in pass': math domain error)."""
    from mirage.mlir.passes.mirage_verify import VerifyPass

    with pytest.raises(ValueError, match=rf"option '{opt}' of pass 'mirage-verify': {msg}"):
        VerifyPass.parse_options({opt: value})


def test_check_equivalence_rejects_non_graphs():
    with pytest.raises(TypeError, match=r"candidate must be a KNGraph, got str"):
        check_equivalence(_exp_graph(), "exp(x)")


def _two_inputs(out: int):
    g = mi.new_kernel_graph()
    ins = [g.new_input((4, 8), dtype=mi.float16), g.new_input((4, 8), dtype=mi.float32)]
    g.mark_output(g.exp(ins[out]))
    return g


def _two_outputs():
    g = mi.new_kernel_graph()
    x = g.new_input((4, 8))
    g.mark_output(g.exp(x))
    g.mark_output(g.exp(x))
    return g


@pytest.mark.parametrize("ref,cand,msg", [
    (lambda: _exp_graph(mi.float16), lambda: _exp_graph(mi.float32), r"input 0 has element type f32, the reference f16"),
    (lambda: _exp_graph(mi.bfloat16), lambda: _exp_graph(mi.float16), r"input 0 has element type f16, the reference bf16"),
    (lambda: _exp_graph(shape=(4, 8)), lambda: _exp_graph(shape=(8, 4)), r"input 0 has shape \[8, 4\], the reference \[4, 8\]"),
    (lambda: _two_inputs(0), lambda: _two_inputs(1), r"output 0 has element type f32, the reference f16"),
    (lambda: _exp_graph(), lambda: _two_inputs(0), r"the reference has 1 inputs, the candidate 2"),
    (lambda: _exp_graph(), lambda: _two_outputs(), r"the reference has 1 outputs, the candidate 2"),
])
def test_check_equivalence_reports_signature_difference(ref, cand, msg):
    """An f16 program and its f32 twin were reported equivalent; now the result says that
    the signatures differ, and how, with both signatures."""
    res = check_equivalence(ref(), cand())
    assert not res.equivalent and res.trials == 0
    assert res.reason.startswith("the signatures differ: reference (")
    assert " -> " in res.reason and ", candidate (" in res.reason
    assert re.search(msg, res.reason), res.reason
    assert res.summary() == f"not equivalent: {res.reason}"


# ------------------------------------------------------------------------------ fp filter

def _attention_scores(form: str):
    """exp(Q @ K) at head dim 64, unnormalized: with standard normal inputs the scores
    reach ~25 and exp overflows fp16 (max 65504) in the reference itself."""
    g = mi.new_kernel_graph()
    Q, K = g.new_input((16, 64)), g.new_input((64, 16))
    if form == "reference":
        s = g.matmul(Q, K)
    elif form == "rescaled":  # (2Q @ K) / 2: equal in exact arithmetic
        two = g.constant(2.0, (1, 1))
        s = g.div(g.matmul(g.mul(Q, two), K), two)
    if form == "overflowing":  # exp(s - 30) * exp(30): exp(30) is not finite in fp16 at any input
        thirty = g.constant(30.0, (1, 1))
        g.mark_output(g.mul(g.exp(g.sub(g.matmul(Q, K), thirty)), g.exp(thirty)))
    else:
        g.mark_output(g.exp(s))
    return g


def test_fp_filter_scales_inputs_when_the_reference_overflows():
    ref = _attention_scores("reference")
    x = [np.random.default_rng(1).standard_normal(t.shape) for t in ref.inputs]
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(ref.evaluate(x, dtype="native")[0]))  # the premise: fp16 overflow
    for cand in ("reference", "rescaled"):
        res = check_equivalence(ref, _attention_scores(cand))
        assert res.equivalent, res.reason
        assert 0 < res.fp_input_scale < 1 and res.fp_input_scale == 2.0 ** round(math.log2(res.fp_input_scale))
        assert f"inputs scaled by {res.fp_input_scale:g}" in res.fp_note and res.fp_note in res.summary()
        assert res.max_fp_error <= res.fp_tolerance


def test_fp_filter_still_rejects_an_unstable_candidate_after_scaling():
    res = check_equivalence(_attention_scores("reference"), _attention_scores("overflowing"))
    assert not res.equivalent
    assert "floating-point filter" in res.reason and "inputs scaled by" in res.reason, res.reason
    assert math.isinf(res.max_fp_error)


def test_fp_filter_unscaled_when_the_reference_is_finite():
    res = check_equivalence(_exp_graph(), _exp_graph())
    assert res.equivalent and res.fp_input_scale == 1.0 and res.fp_note == ""


def test_fp_filter_skipped_with_a_note_when_no_scale_helps():
    def build():
        g = mi.new_kernel_graph()
        x = g.new_input((4, 8))
        g.mark_output(g.add(x, g.exp(g.constant(100.0, (1, 1)))))  # exp(100) overflows fp16 at every input
        return g
    res = check_equivalence(build(), build())
    assert res.equivalent and "floating-point filter skipped" in res.fp_note


# ------------------------------------------------------------------------------ runtime

@pytest.fixture
def kernel(tmp_path):
    write_bundle(tmp_path, manifest(), PTX)
    drv = FakeDriver({"k1": 3, "k2": 2})
    return load(tmp_path, driver=drv), drv


class RawCAI:
    """An object whose __cuda_array_interface__ is exactly `d` (malformed on purpose)."""

    def __init__(self, d):
        self.__cuda_array_interface__ = d


def _cai(**kw):
    d = {"shape": (4, 8), "typestr": "<f2", "data": (0x100000, False), "strides": None, "version": 3}
    d.update(kw)
    for k in [k for k, v in kw.items() if v is KeyError]:
        del d[k]
    return RawCAI(d)


G = CAI(0x200000, (8,), "<f4")  # a valid input 1 (32 bytes at 0x200000)

RUNTIME_INPUT_CASES = [
    # pointers out of range (2**64 used to wrap to NULL)
    ("ptr 2**64", lambda: _cai(data=(2**64, False)), r"input 0: data pointer 0x10000000000000000 is out of range"),
    ("ptr negative", lambda: _cai(data=(-16, False)), r"input 0: data pointer -0x10 is out of range"),
    ("ptr wraps", lambda: _cai(data=(2**64 - 16, False)), r"input 0: data pointer 0xfffffffffffffff0 is out of range "
                                                           r"for a tensor of 64 bytes"),
    ("ptr NULL", lambda: _cai(data=(0, False)), r"input 0: data pointer 0x0 is out of range"),
    # malformed __cuda_array_interface__ objects
    ("not a dict", lambda: RawCAI([("shape", (4, 8))]), r"input 0: malformed __cuda_array_interface__: expected a dict, got list"),
    ("no data", lambda: _cai(data=KeyError), r"input 0: malformed __cuda_array_interface__: missing key\(s\) 'data'"),
    ("no shape/typestr", lambda: _cai(shape=KeyError, typestr=KeyError), r"missing key\(s\) 'shape', 'typestr'"),
    ("shape str", lambda: _cai(shape="4x8"), r"'shape' must be a tuple of non-negative ints, got '4x8'"),
    ("shape float", lambda: _cai(shape=(4, 8.0)), r"'shape' must be a tuple of non-negative ints"),
    ("shape negative", lambda: _cai(shape=(4, -8)), r"'shape' must be a tuple of non-negative ints"),
    ("typestr int", lambda: _cai(typestr=16), r"'typestr' must be an array-interface type string .* got 16"),
    ("typestr name", lambda: _cai(typestr="half"), r"'typestr' must be an array-interface type string .* got 'half'"),
    ("data int", lambda: _cai(data=0x100000), r"'data' must be a \(pointer: int, read_only: bool\) pair, got 1048576"),
    ("data short", lambda: _cai(data=(0x100000,)), r"'data' must be a \(pointer: int, read_only: bool\) pair"),
    ("data str", lambda: _cai(data=("0x100000", False)), r"'data' must be a \(pointer: int, read_only: bool\) pair"),
    ("strides rank", lambda: _cai(strides=(16,)), r"'strides' must be None or 2 ints \(bytes\), got \(16,\)"),
    ("strides float", lambda: _cai(strides=(16.0, 2.0)), r"'strides' must be None or 2 ints"),
    ("mask", lambda: _cai(mask=RawCAI({})), r"input 0: masked arrays .* are not supported"),
    # well-formed but not what the bundle takes
    ("wrong shape", lambda: _cai(shape=(8, 4)), r"input 0: shape \[8, 4\] does not match the bundle's \[4, 8\]"),
    ("wrong dtype", lambda: _cai(typestr="<f8"), r"input 0: dtype <f8 does not match the bundle's f16"),
    ("wrong strides", lambda: _cai(strides=(2, 8)), r"input 0: strides \[1, 4\] \(elements\) do not match"),
]


@pytest.mark.parametrize("x,msg", [c[1:] for c in RUNTIME_INPUT_CASES], ids=[c[0] for c in RUNTIME_INPUT_CASES])
def test_runtime_rejects_bad_inputs(kernel, x, msg):
    k, drv = kernel
    with pytest.raises(LaunchError, match=msg):
        k(x(), G)
    assert not drv.launches


@pytest.mark.parametrize("out,msg", [
    (lambda: CAI(0x100000, (4, 8)), r"out: expected a list of 1 output tensor\(s\), got CAI"),
    (lambda: np.zeros((4, 8), np.float16), r"out: expected a list of 1 output tensor\(s\), got ndarray"),
    (lambda: [CAI(0x100000, (4, 8))], r"output 0 \(bytes 0x100000\.\.0x100040\) overlaps input 0 \(bytes "
                                      r"0x100000\.\.0x100040\): outputs must not alias inputs"),
    (lambda: [CAI(0x100030, (4, 8))], r"output 0 .* overlaps input 0"),  # partial overlap
    (lambda: [CAI(0x1fffd0, (4, 8))], r"output 0 .* overlaps input 1"),  # runs into input 1
    (lambda: [_cai(data=(0x300000, True))], r"output 0: the tensor is read-only"),
    (lambda: [_cai(data=(2**64, False))], r"output 0: data pointer .* is out of range"),
    (lambda: [_cai(data=KeyError)], r"output 0: malformed __cuda_array_interface__: missing key\(s\) 'data'"),
], ids=["tensor", "ndarray", "alias input", "partial overlap", "overlap input 1", "read-only", "ptr range", "malformed"])
def test_runtime_rejects_bad_out(kernel, out, msg):
    k, drv = kernel
    with pytest.raises(LaunchError, match=msg):
        k(CAI(0x100000, (4, 8)), G, out=out())
    assert not drv.launches


def test_runtime_accepts_adjacent_outputs(kernel):
    """The alias check is exact for dense tensors: an output right after an input is fine."""
    k, drv = kernel
    o = CAI(0x100040, (4, 8))  # input 0 ends at 0x100040
    assert k(CAI(0x100000, (4, 8)), G, out=(o,))[0] is o
    assert drv.launches[-1]["ptrs"][1] == 0x100040


def test_runtime_rejects_outputs_aliasing_each_other(tmp_path):
    m = Manifest(graph_hash="two", target="sm_90", inputs=[TensorSpec([4, 8], "f16")],
                 outputs=[TensorSpec([4, 8], "f16"), TensorSpec([4, 8], "f16")], buffers=[BufferSpec([1], "f32")],
                 kernels=[KernelSpec("k1", "a.ptx", [1, 1, 1], [128, 1, 1], 0,
                                     [KernelArg("input", 0), KernelArg("output", 0), KernelArg("output", 1)])])
    write_bundle(tmp_path, m, PTX)
    drv = FakeDriver({"k1": 3})
    k = load(tmp_path, driver=drv)
    x = CAI(0x100000, (4, 8))
    with pytest.raises(LaunchError, match=r"output 1 .* overlaps output 0"):
        k(x, out=[CAI(0x300000, (4, 8)), CAI(0x300020, (4, 8))])
    assert not drv.launches
    k(x, out=[CAI(0x300000, (4, 8)), CAI(0x300040, (4, 8))])
    assert drv.launches[-1]["ptrs"] == [0x100000, 0x300000, 0x300040]


# ------------------------------------------------------------------------------ builder fuzz

UNARY = {
    "exp": np.exp, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "square": lambda x: x * x,
    "relu": lambda x: np.maximum(x, 0.0), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),  # erf form, as torch
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
# mostly valid values (so that graphs grow and get evaluated), with the invalid kinds the
# builder must reject (and never crash on) mixed in
GOOD_DIM = st.sampled_from([1, 2, 2, 4, 4, 3, np.int64(2)])
BAD_DIM = st.sampled_from([0, -1, 4.7, True, "4", None, 2**63])
DIM = st.one_of(GOOD_DIM, GOOD_DIM, GOOD_DIM, GOOD_DIM, BAD_DIM)
SMALL_INT = st.sampled_from([-2, -1, 0, 1, 2, 1, 0, 1, 1.5, True, "1", None, 2**63])
DTYPE = st.sampled_from([mi.float16] * 8 + [mi.float32, "f16", "f64", None, np.float16, 3])


def _valid_dims(dims) -> bool:
    return (bool(dims) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 1 <= d <= 2**20
                               for d in dims))


CUSTOMIZED_GOOD = dict(gx=[1, 2, 4], block=[(128, 1, 1), (1024, 1, 1), (64, 2, 1), (32, 1, 1)], F=[1, 2, 4],
                       ix=[0, 1, -1], ld=[0, 1, -1], ox=[0, 1, -1], acc=["skip", None, "sum", "max", "mean"])
CUSTOMIZED_BAD = dict(gx=[0, -1, 4.7, True, 2**63], block=[(2048, 1, 1), (33, 33, 1), (1, 1, 65), (0, 1, 1),
                                                          (2**63, 1, 1), (1.0, 1, 1)],
                      F=[0, -4, 2.5, True, 2**63], ix=[5, -2, 0.0], ld=[5, -2, 1.5], ox=[5, -2, 0.0],
                      acc=["prod", 3])


class _Fuzz:
    """One random build: the graph, its tensors with their numpy float64 values, computed
    here independently of the interpreter (numpy's own broadcasting, np.split/stack for
    block graphs)."""

    def __init__(self, data):
        self.data = data
        self.g = mi.new_kernel_graph()
        self.foreign = mi.new_kernel_graph("other").new_input((2, 2))
        self.tensors, self.vals, self.inputs = [], {}, []
        self.rng = np.random.default_rng(0)

    def draw(self, strategy):
        return self.data.draw(strategy)

    def pick(self):
        """An operand: mostly a tensor of the graph, sometimes a foreign tensor or not a tensor."""
        choices = self.tensors * 4 + [self.foreign, 2.5]
        return self.draw(st.sampled_from(choices)) if self.tensors else self.foreign

    def add(self, t, value):
        assert t.graph is self.g and tuple(t.shape) == value.shape, (t, value.shape)
        self.tensors.append(t)
        self.vals[id(t)] = value

    def val(self, t):
        return self.vals[id(t)]

    # -- actions: each calls the builder, then records the numpy value of what it built --
    def new_input(self, valid: bool = False):
        shapes = [tuple(t.shape) for t in self.tensors]
        like = st.sampled_from(shapes + [s[::-1] for s in shapes]) if shapes else st.nothing()
        dims = self.draw(st.lists(GOOD_DIM, min_size=1, max_size=3) if valid else
                         st.one_of(st.lists(DIM, min_size=0, max_size=3), like, like))
        dt = mi.float16 if valid else self.draw(DTYPE)
        ok = _valid_dims(dims) and dt in (mi.float16, mi.float32, "f16")
        try:
            t = self.g.new_input(dims, dtype=dt)
        except (ValueError, TypeError):
            assert not ok, f"valid new_input({dims}, {dt}) rejected"
            raise
        assert ok, f"invalid new_input({dims}, {dt}) accepted"
        x = self.rng.uniform(0.5, 2.0, t.shape)
        self.inputs.append(x)
        self.add(t, x)

    def unary(self):
        name, a = self.draw(st.sampled_from(sorted(UNARY))), self.pick()
        t = getattr(self.g, name)(a)
        self.add(t, UNARY[name](self.val(a)))

    def binary(self):
        name, a, b = self.draw(st.sampled_from(sorted(BINARY))), self.pick(), self.pick()
        t = getattr(self.g, name)(a, b)
        self.add(t, BINARY[name](self.val(a), self.val(b)))

    def matmul(self):
        a, b = self.pick(), self.pick()
        t = self.g.matmul(a, b)
        self.add(t, np.matmul(self.val(a), self.val(b)))

    def reduce(self):
        a, dim, mx = self.pick(), self.draw(SMALL_INT), self.draw(st.booleans())
        t = (self.g.reduce_max if mx else self.g.reduction)(a, dim)
        self.add(t, (np.max if mx else np.sum)(self.val(a), axis=dim, keepdims=True))

    def reshape(self):
        a = self.pick()
        shape = self.draw(st.one_of(st.lists(DIM, max_size=3),
                                    st.just(tuple(reversed(getattr(a, "shape", ())))),
                                    st.just((int(np.prod(getattr(a, "shape", (1,)))),))))
        t = self.g.reshape(a, shape)
        self.add(t, self.val(a).reshape(tuple(shape)))

    def transpose(self):
        a = self.pick()
        rank = len(getattr(a, "shape", ()))
        perm = self.draw(st.one_of(st.permutations(list(range(rank))), st.lists(SMALL_INT, max_size=3)))
        t = self.g.transpose(a, perm)
        self.add(t, self.val(a).transpose(tuple(perm)))

    def repeat(self):
        a = self.pick()
        rank = len(getattr(a, "shape", ()))
        reps = self.draw(st.one_of(st.lists(st.sampled_from([1, 2, 3]), min_size=rank, max_size=rank),
                                   st.lists(st.sampled_from([1, 2, 3, 0, -1, 1.5, True]), max_size=3)))
        t = self.g.repeat(a, reps)
        self.add(t, np.tile(self.val(a), tuple(reps)))

    def concat(self):
        a, b, dim = self.pick(), self.pick(), self.draw(SMALL_INT)
        t = self.g.concat(a, b, dim)
        self.add(t, np.concatenate([self.val(a), self.val(b)], axis=dim))

    def constant(self):
        value = self.draw(st.sampled_from([1.5, -2.0, 0.0, 3, 0.25] * 2 + [math.inf, math.nan, "1", True, None]))
        shape = self.draw(st.one_of(st.lists(GOOD_DIM, min_size=1, max_size=2), st.lists(DIM, max_size=2)))
        t = self.g.constant(value, shape)
        self.add(t, np.full(tuple(shape), float(value)))

    def rms_norm(self):
        a = self.pick()
        k = self.draw(st.integers(0, 3))
        ns = self.draw(st.one_of(st.just(tuple(getattr(a, "shape", ())[-k:]) if k else ()),
                                 st.lists(DIM, max_size=2)))
        t = self.g.rms_norm(a, ns)
        x = self.val(a)
        axes = tuple(range(x.ndim - len(ns), x.ndim))
        self.add(t, x / np.sqrt((x * x).sum(axis=axes, keepdims=True) / np.prod([x.shape[i] for i in axes])))

    def customized(self):
        """A one-input block graph: grid along x, a for-loop, one element-wise op, an
        optional accumulator; launch parameters and maps drawn with invalid values."""
        X = self.pick()
        # all parameters valid, or one of them drawn from its invalid values
        p = {k: self.draw(st.sampled_from(v)) for k, v in CUSTOMIZED_GOOD.items()}
        broken = self.draw(st.sampled_from([None] * len(CUSTOMIZED_BAD) + sorted(CUSTOMIZED_BAD)))
        if broken:
            p[broken] = self.draw(st.sampled_from(CUSTOMIZED_BAD[broken]))
        gx, block, F, ix, ld, ox, acc = (p[k] for k in ("gx", "block", "F", "ix", "ld", "ox", "acc"))
        op = self.draw(st.sampled_from(sorted(UNARY)))
        tb = mi.new_threadblock_graph((gx, 1, 1), block, F, 4)
        t = getattr(tb, op)(tb.new_input(X, (ix, -1, -1), ld))
        if acc != "skip":
            t = tb.forloop_accum(t, acc)
        tb.new_output(t, (ox, -1, -1))
        out = self.g.customized([X], tb)[0]
        # the numpy model: blocks split along ix (outer), loop chunks along ld (inner)
        x, f = self.val(X), UNARY[op]
        res = []
        for b in (np.split(x, gx, axis=ix) if ix != -1 else [x] * gx):
            ys = np.stack([f(c) for c in (np.split(b, F, axis=ld) if ld != -1 else [b] * F)])
            if acc == "skip":
                assert F == 1 or ld == -1, "a loop-varying output without an accumulator was accepted"
                y = ys[0]
            elif acc is None:
                y = ys.sum(0)
            elif acc == "max":
                y = ys.max(0)
            else:
                y = ys.sum(0).sum(-1, keepdims=True)
                y = y / (F * ys.shape[-1]) if acc == "mean" else y
            res.append(y)
        assert gx == 1 or ox != -1, "blocks writing one replica were accepted"
        self.add(out, np.concatenate(res, axis=ox) if ox != -1 else res[0])

    def mark_output(self):
        a = self.pick()
        kind = self.draw(st.sampled_from([None, None, "row-major", "column-major"]))
        shape = getattr(a, "shape", (1,))
        row = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        col = tuple(int(np.prod(shape[:i])) for i in range(len(shape)))
        strides = {None: None, "row-major": row, "column-major": col}[kind]
        self.g.mark_output(a, strides)
        assert strides in (None, row), f"output strides {strides} accepted for shape {list(shape)}"


ACTIONS = [name for name in vars(_Fuzz) if not name.startswith("_") and name not in ("draw", "pick", "add", "val")]
ACTIONS += ["new_input", "customized", "binary", "unary"]  # weighted: the ops that grow graphs most


@settings(max_examples=500, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fuzz_builder(data):
    """Property: each builder call returns or raises ValueError/TypeError (anything else
    fails the test); a graph whose calls succeeded evaluates, in the reference
    interpreter, to what numpy float64 computes independently (rtol 1e-9: both sides are
    float64 and mostly run the same numpy operations; only summation order may differ,
    e.g. rms_norm over several axes, which costs a few ulps, far below a wrong axis or
    map's O(1) error). A foreign tensor is always rejected."""
    fz = _Fuzz(data)
    fz.new_input(valid=True)
    actions = [data.draw(st.sampled_from(ACTIONS)) for _ in range(data.draw(st.integers(1, 10)))]
    for action in actions + ["mark_output"]:
        before = (len(fz.g.ops), len(fz.g.outputs), len(fz.g.inputs))
        try:
            with np.errstate(all="ignore"):
                getattr(fz, action)()
        except (ValueError, TypeError) as e:
            # only the builder may raise (numpy failing on an accepted call would change
            # the graph first), and a rejected call leaves the graph as it was
            assert (len(fz.g.ops), len(fz.g.outputs), len(fz.g.inputs)) == before, f"{action}: {e}"
            assert str(e).startswith("["), f"{action}: {e}"  # a builder message names its rule
    g = fz.g
    if not g.outputs:
        with pytest.raises(GraphError, match=r"^\[output\]"):
            g.to_mlir()
        return
    assert "func.func @main" in g.to_mlir()
    got = g.evaluate(fz.inputs)
    for k, (t, y) in enumerate(zip(g.outputs, got)):
        want = fz.val(t)
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-9, atol=1e-300, equal_nan=True, err_msg=f"output {k}")
