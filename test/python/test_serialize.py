"""μGraph JSON (`to_json` / `from_json`, mirage.core.serialize) and the owner-independent
hash: a round trip gives the same program (same MLIR text, same values as numpy on
random inputs); the hash ignores names and objects but not the program; malformed JSON
gets an error that names the place."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mirage as mi
from mirage.core.serialize import GraphJSONError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from benchmarks import BENCHMARKS  # noqa: E402


def mixed_graph():
    """Every construct the format has: strides, f32 and bf16, a constant, a reduction with
    its dim, a graph-defined kernel with two outputs, a thread graph with a constant, a
    for-loop accumulator, and a module-level shared-memory capacity."""
    g = mi.new_kernel_graph("mixed")
    X = g.new_input((8, 16), strides=(1, 8), dtype=mi.float32)
    Y = g.new_input((8, 1), dtype=mi.float32)
    Z = g.new_input((4, 8), dtype=mi.bfloat16)
    g.smem_capacity = 100 * 1024
    tb = mi.new_threadblock_graph((2, 1, 1), (128, 1, 1), 2, 8)
    tx, ty = tb.new_input(X, (0, -1, -1), 1), tb.new_input(Y, (0, -1, -1), -1)
    th = mi.new_thread_graph([mi.float32, mi.float32])
    a, b = th.inputs
    th.output(th.silu(th.div(a, b)))
    th.output(th.mul(a, th.constant(2.0)))
    r1, r2 = tb.thread_graph([tx, ty], th)
    tb.new_output(tb.forloop_accum(r1, "sum"), (0, -1, -1))
    tb.new_output(tb.forloop_accum(r2, "max"), (0, -1, -1))
    o1, o2 = g.customized([X, Y], tb)
    g.mark_output(g.add(o1, g.constant(0.5, (1, 1))))
    g.mark_output(g.reduction(o2, 0))
    g.mark_output(g.exp(g.reduction(Z, 1)))
    return g


def mixed_numpy(x, y, z):
    """The for-loop runs over the two column halves of x: "sum" sums the whole row (each
    tile's last dim, then the iterations), "max" takes the element-wise max of the halves."""
    s = x / y / (1 + np.exp(-x / y))  # silu(x / y)
    return [s.sum(1, keepdims=True) + 0.5, np.maximum(2 * x[:, :8], 2 * x[:, 8:]).sum(0, keepdims=True),
            np.exp(z.sum(1, keepdims=True))]


def same_program(g, h, seed=0):
    assert h.to_mlir() == g.to_mlir()
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(t.shape) + 0.1 for t in g.inputs]
    for a, b in zip(g.evaluate(xs), h.evaluate(xs)):
        np.testing.assert_array_equal(a, b)  # the same program: bit-equal interpreter results
    return xs


def test_round_trip_of_every_construct_matches_numpy(tmp_path):
    g = mixed_graph()
    path = tmp_path / "g.json"
    text = g.to_json(str(path))
    assert path.read_text() == text and json.loads(text)["format"] == "mirage-kngraph"
    for h in (mi.from_json(str(path)), mi.from_json(path), mi.from_json(text), mi.from_json(json.loads(text))):
        assert h.strides == {0: (1, 8)} and h.smem_capacity == 100 * 1024
        assert [t.dtype for t in h.inputs] == [mi.float32, mi.float32, mi.bfloat16]
        same_program(g, h)
    # y kept away from zero so that x / y stays moderate
    xs = [np.random.default_rng(1).standard_normal((8, 16)), np.random.default_rng(2).uniform(0.5, 2.0, (8, 1)),
          np.random.default_rng(3).standard_normal((4, 8))]
    for got, want in zip(mi.from_json(text).evaluate(xs), mixed_numpy(*xs)):
        np.testing.assert_allclose(got, want, rtol=1e-12)  # float64 interpreter: rounding only


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@pytest.mark.parametrize("which", ["reference", "fused"])
def test_benchmark_programs_round_trip(name, which):
    b = BENCHMARKS[name]
    g = getattr(b, which)(1)
    h = mi.from_json(g.to_json())
    same_program(g, h)
    xs = b.random_inputs(1, np.random.default_rng(7))
    want = b.numpy(*xs)
    got = h.evaluate(xs)[0]
    # float64 interpreter against numpy float64: only summation-order differences
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_from_json_method_replaces_the_graph_as_mirage_does(tmp_path):
    g = BENCHMARKS["lora"].fused(1)
    g.to_json(str(tmp_path / "lora.json"))
    other = mi.new_kernel_graph("scratch")
    x = other.new_input((4, 4))
    other.mark_output(other.exp(x))
    assert other.from_json(str(tmp_path / "lora.json")) is other
    assert other.name == "lora" and other.to_mlir() == g.to_mlir()
    # the loaded graph is a normal graph: ops can be added to it
    y = other.add(other.outputs[0], other.outputs[0])
    assert y.shape == g.outputs[0].shape


def test_a_rejected_file_leaves_the_graph_as_it_was(tmp_path):
    g = mi.new_kernel_graph("keep")
    x = g.new_input((4, 4))
    g.mark_output(g.exp(x))
    before = g.to_mlir()
    data = json.loads(BENCHMARKS["gqa"].fused(1).to_json())
    data["ops"][-1]["inputs"] = [999]
    with pytest.raises(GraphJSONError):
        g.from_json(data)
    assert g.to_mlir() == before


def test_hash_ignores_names_and_objects_but_not_the_program():
    a, b = BENCHMARKS["rmsnorm_linear"].reference(1), BENCHMARKS["rmsnorm_linear"].reference(1)
    b.name = "another_name"
    h = a.get_owner_independent_hash()
    assert isinstance(h, int) and 0 <= h < 2**64
    assert b.get_owner_independent_hash() == h
    assert mi.from_json(a.to_json()).get_owner_independent_hash() == h
    assert BENCHMARKS["rmsnorm_linear"].reference(2).get_owner_independent_hash() != h  # other shapes
    assert BENCHMARKS["rmsnorm_linear"].fused(1).get_owner_independent_hash() != h  # other μGraph

    def red(dim, strides=None):
        g = mi.new_kernel_graph()
        g.mark_output(g.reduction(g.new_input((8, 8), strides=strides), dim))
        return g.get_owner_independent_hash()

    assert red(0) != red(1)  # an attribute
    assert red(0) != red(0, strides=(1, 8))  # the layout
    assert red(0) == red(0, strides=(8, 1))  # row-major strides are the default


def test_hash_is_stable_across_processes():
    code = ("import sys; sys.path.insert(0, 'examples'); from benchmarks import BENCHMARKS; "
            "print(BENCHMARKS['gqa'].fused(1).get_owner_independent_hash())")
    root = Path(__file__).resolve().parents[2]
    outs = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout.strip() for seed in (1, 2)}
    assert outs == {str(BENCHMARKS["gqa"].fused(1).get_owner_independent_hash())}


def test_hash_value_is_pinned():
    """The hash of a fixed program: a change here means the JSON format changed, which
    must bump serialize.VERSION (checkpoints and hashes written before would not match)."""
    g = mi.new_kernel_graph("pinned")
    x = g.new_input((16, 64))
    w = g.new_input((64, 32))
    g.mark_output(g.relu(g.matmul(x, w)))
    assert f"{g.get_owner_independent_hash():016x}" == "46c76392c99ba30c"


@pytest.mark.parametrize("mutate,message", [
    (lambda d: "not json {", "invalid JSON"),
    (lambda d: {**d, "format": "other"}, "not a mirage μGraph"),
    (lambda d: {**d, "version": 99}, "version 99"),
    (lambda d: [d], "expected an object"),
    (lambda d: {k: v for k, v in d.items() if k != "ops"}, "missing field 'ops'"),
    (lambda d: {**d, "outputs": [57]}, "outputs[0]: 57 names no tensor"),
    (lambda d: {**d, "inputs": [{**d["inputs"][0], "dtype": "f64"}] + d["inputs"][1:]},
     "inputs[0].dtype: unsupported element type 'f64'"),
    (lambda d: {**d, "inputs": [{**d["inputs"][0], "shape": [2, "a"]}] + d["inputs"][1:]},
     "inputs[0].shape: expected a list of integers"),
    (lambda d: {**d, "ops": [{**d["ops"][0], "inputs": [2, 1]}] + d["ops"][1:]}, "ops[0]: [shape]"),
    (lambda d: {**d, "ops": [{**d["ops"][0], "kind": "frobnicate"}] + d["ops"][1:]}, "ops[0]: [nesting]"),
])
def test_malformed_json_names_the_place(mutate, message):
    d = json.loads(BENCHMARKS["rmsnorm_linear"].reference(1).to_json())
    bad = mutate(d)
    src = bad if isinstance(bad, str) else json.dumps(bad)
    with pytest.raises(GraphJSONError) as e:
        mi.from_json(src)
    assert message in str(e.value)


def test_block_graph_errors_name_the_place():
    d = json.loads(BENCHMARKS["rmsnorm_linear"].fused(1).to_json())
    d["ops"][0]["block_graph"]["inputs"][2]["imap"] = [5, -1, -1]
    with pytest.raises(GraphJSONError, match=r"ops\[0\]\.block_graph\.inputs\[2\]: \[map\]"):
        mi.from_json(d)
    d = json.loads(BENCHMARKS["rmsnorm_linear"].fused(1).to_json())
    d["ops"][0]["block_graph"]["ops"][0]["inputs"] = [0, 40]
    with pytest.raises(GraphJSONError, match=r"ops\[0\]\.block_graph\.ops\[0\]\.inputs\[1\]: 40 names no tensor"):
        mi.from_json(d)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(GraphJSONError, match="cannot read the μGraph JSON"):
        mi.from_json(str(tmp_path / "nope.json"))
    with pytest.raises(GraphJSONError, match="takes a file path, JSON text or a dict"):
        mi.from_json(42)
