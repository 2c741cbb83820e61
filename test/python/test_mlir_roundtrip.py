"""Kernel graphs <-> MLIR both ways, and the mirage-opt driver."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mirage as mi

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from benchmarks import BENCHMARKS  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.mlir"))


def mirage_opt(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "mirage.mlir.opt", *args], input=stdin,
                          capture_output=True, text=True)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@pytest.mark.parametrize("kind", ["reference", "fused"])
def test_graph_to_mlir_and_back(name, kind):
    b = BENCHMARKS[name]
    g = getattr(b, kind)(1)
    text = g.to_mlir()
    (g2,) = mi.parse_mlir(text)
    assert g2.to_mlir() == text
    xs = b.random_inputs(1, np.random.default_rng(0))
    np.testing.assert_array_equal(g.evaluate(xs)[0], g2.evaluate(xs)[0])


def test_examples_are_current():
    """examples/*.mlir are what examples/benchmarks.py generates."""
    for b in BENCHMARKS.values():
        for suffix, build in (("", b.reference), ("_fused", b.fused)):
            text = (ROOT / "examples" / f"{b.name}{suffix}.mlir").read_text()
            assert text.split("\n", 1)[1] == build(1).to_mlir()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_mirage_opt_roundtrip_is_stable(path):
    once = mirage_opt(str(path))
    assert once.returncode == 0, once.stderr
    twice = mirage_opt("-", stdin=once.stdout)
    assert twice.returncode == 0, twice.stderr
    assert once.stdout == twice.stdout
    assert "kn." in once.stdout


def test_mirage_opt_reports_errors_without_traceback(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f(%a: tensor<4x8xf16>, %b: tensor<5x8xf16>) -> tensor<4x8xf16> {\n"
                   "  %0 = kn.matmul %a, %b : (tensor<4x8xf16>, tensor<5x8xf16>) -> tensor<4x8xf16>\n"
                   "  return %0 : tensor<4x8xf16>\n}\n")
    r = mirage_opt(str(bad))
    assert r.returncode != 0
    assert f"{bad}:2:" in r.stderr and "error:" in r.stderr and "[shape]" in r.stderr
    assert "Traceback" not in r.stderr
    r = mirage_opt(str(tmp_path / "missing.mlir"))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    r = mirage_opt(str(bad), "--no-such-pass-xyz")
    assert r.returncode != 0 and "no-such-pass-xyz" in r.stderr and "Traceback" not in r.stderr


def test_mirage_opt_split_output_file_and_verify_diagnostics(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(
        "func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = kn.exp %x : tensor<4xf32> -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"
        "// -----\n"
        "func.func @b(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  // expected-error @+1 {{[shape]}}\n"
        "  %0 = kn.reduction %x {dim = 0 : i64} : tensor<4xf32> -> tensor<4xf32>\n"
        "  return %0 : tensor<4xf32>\n}\n")
    out = tmp_path / "out.mlir"
    r = mirage_opt(str(src), "--split-input-file", "--verify-diagnostics", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "@a" in out.read_text() and "kn.exp" in out.read_text()
    # without the annotation being satisfied, verification fails and says why
    src.write_text(src.read_text().replace("[shape]", "[nonexistent-rule]"))
    r = mirage_opt(str(src), "--split-input-file", "--verify-diagnostics")
    assert r.returncode == 1
    assert "unexpected error" in r.stderr and "was not produced" in r.stderr


def test_mirage_opt_help_lists_passes():
    r = mirage_opt("--help")
    assert r.returncode == 0
    assert "--pass-pipeline" in r.stdout and "Mirage passes:" in r.stdout


def test_mirage_opt_mixes_upstream_passes(tmp_path):
    src = ROOT / "examples" / "lora.mlir"
    r = mirage_opt(str(src), "--pass-pipeline=builtin.module(canonicalize, cse)", "--mlir-print-ir-after-all")
    assert r.returncode == 0, r.stderr
    assert "kn.matmul" in r.stdout and "IR Dump After" in r.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_upstream_mlir_opt_plugin_prints_the_same(path):
    """`mlir-opt --load-dialect-plugin=$(mirage-config --dialect-plugin)` parses every
    example and prints what mirage-opt prints."""
    import mlir

    from mirage.config import dialect_plugin

    mlir_opt = Path(list(mlir.__path__)[0]) / "bin" / "mlir-opt"
    up = subprocess.run([str(mlir_opt), f"--load-dialect-plugin={dialect_plugin()}", str(path)],
                        capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    ours = mirage_opt(str(path))
    assert up.stdout == ours.stdout


# ------------------------------------------------------ the optimizer passes compose

def _kernels(text: str) -> str:
    """The gpu modules of convert-mirage-to-gpu's output, the program's hash left out (a
    module annotated by the optimizer passes prints differently, computes the same)."""
    return re.sub(r"graph_hash\\22: \\22[0-9a-f]+", "graph_hash", text)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_optimizer_passes_then_lowering_equal_the_lowering_alone(name):
    """convert-mirage-to-gpu takes the layouts, the op order and the shared-memory plan
    that --mirage-layout, --mirage-schedule and --mirage-smem-plan recorded: being the
    choices it would make itself, the kernels come out the same (GQA's schedule reorders
    its two accumulators, gated MLP's interleaves matmuls and accumulators)."""
    pytest.importorskip("z3")
    path = str(ROOT / "examples" / f"{name}_fused.mlir")
    alone = mirage_opt(path, "--convert-mirage-to-gpu")
    planned = mirage_opt(path, "--mirage-layout", "--mirage-schedule", "--mirage-smem-plan")
    piped = mirage_opt("--convert-mirage-to-gpu", stdin=planned.stdout)
    assert alone.returncode == 0 and planned.returncode == 0 and piped.returncode == 0, \
        alone.stderr + planned.stderr + piped.stderr
    assert "gpu.module" in alone.stdout
    assert _kernels(piped.stdout) == _kernels(alone.stdout)


def test_smem_plan_with_the_lowerings_options_is_taken():
    """--mirage-smem-plan plans with the lowering's options: given the same ones (here two
    kernels for the split loop of RMSNorm + Linear, a partial and a combine one), the record
    is the plan of those kernels and the lowering takes it."""
    path = str(ROOT / "examples" / "rmsnorm_linear_fused.mlir")
    planned = mirage_opt(path, "--mirage-smem-plan=fold-combine=false stages=3")
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"tb.smem = \{combine = #tb.smem<stages = 1, .*>, partial = #tb.smem<stages = 3, .*>\}", planned.stdout)
    piped = mirage_opt("--convert-mirage-to-gpu=fold-combine=false stages=3", stdin=planned.stdout)
    alone = mirage_opt(path, "--convert-mirage-to-gpu=fold-combine=false stages=3")
    assert piped.returncode == 0 and alone.returncode == 0, piped.stderr + alone.stderr
    assert _kernels(piped.stdout) == _kernels(alone.stdout)
    # the default lowering folds the combine into the partial kernel, which then has an
    # arrival flag that this record does not place
    other = mirage_opt("--convert-mirage-to-gpu", stdin=planned.stdout)
    assert other.returncode != 0 and "Traceback" not in other.stderr
    assert "tb.smem (partial kernel): no offset for buffer flag" in other.stderr, other.stderr


def _gqa_smem_plan() -> str:
    r = mirage_opt(str(ROOT / "examples" / "gqa_fused.mlir"), "--mirage-smem-plan")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_lowering_takes_an_edited_smem_offset():
    """The offsets recorded in tb.smem are what the kernel uses: moving the tile of GQA's
    first kernel that holds the accumulated P V (op3, written after the loop) to a free
    place past the others moves its view in the GPU MLIR, its address in the PTX and the
    kernel's dynamic shared memory (to the new end)."""
    text = _gqa_smem_plan()
    m = re.search(r"op3 = (\d+) : i64", text)
    old, new = int(m.group(1)), 90112
    offsets = re.search(r"tb.smem = \{full = #tb.smem<stages = \d+, offsets = \{([^}]*)\}>", text).group(1)
    assert new % 128 == 0 and new > max(int(x) for x in re.findall(r"= (\d+) : i64", offsets))
    edited = text.replace(m.group(0), f"op3 = {new} : i64", 1)
    pipeline = ("--pass-pipeline=builtin.module(convert-mirage-to-gpu,gpu-lower-to-nvvm-pipeline{cubin-format=isa "
                "cubin-chip=sm_90 cubin-features=+ptx80 kernel-bare-ptr-calling-convention=true})")
    gpu = {k: mirage_opt("--convert-mirage-to-gpu", stdin=t) for k, t in (("old", text), ("new", edited))}
    ptx = {k: mirage_opt(pipeline, stdin=t) for k, t in (("old", text), ("new", edited))}
    for r in list(gpu.values()) + list(ptx.values()):
        assert r.returncode == 0, r.stderr
    view = r"memref.view %\d+\[%c{}\]"
    assert re.search(view.format(new), gpu["new"].stdout) and not re.search(view.format(new), gpu["old"].stdout)
    assert re.search(view.format(old), gpu["old"].stdout) and not re.search(view.format(old), gpu["new"].stdout)
    assert re.search(rf"\+{new}\]|, {new};", ptx["new"].stdout) and str(new) not in ptx["old"].stdout
    smem = lambda out: re.findall(r"\\22smem_bytes\\22: (\d+)", out)
    assert int(smem(gpu["old"].stdout)[0]) < new and smem(gpu["new"].stdout) == [str(new + 64 * 64 * 2)] + smem(gpu["old"].stdout)[1:]


def test_recorded_decisions_are_part_of_the_graph_hash():
    """Bundles are cached by graph_hash: a graph whose recorded shared-memory plan (or
    layouts) differ lowers to other kernels, so it must not hit another's bundle; a graph
    without records keeps the hash of its kn MLIR alone."""
    import hashlib

    from mirage.lower.convert import graph_hash

    text = _gqa_smem_plan()
    m = re.search(r"op3 = (\d+) : i64", text)
    edited = text.replace(m.group(0), "op3 = 90112 : i64", 1)
    (plain,), (rec,), (moved,) = (mi.parse_mlir(t) for t in (ROOT.joinpath("examples", "gqa_fused.mlir").read_text(),
                                                               text, edited))
    assert graph_hash(plain) == hashlib.sha256(plain.to_mlir().encode()).hexdigest()[:16]
    assert len({graph_hash(plain), graph_hash(rec), graph_hash(moved)}) == 3
    assert rec.to_mlir() == moved.to_mlir() == plain.to_mlir()


@pytest.mark.parametrize("edit, message", [
    (("op3 = {op3}", "op3 = 73792"), "offset 73792 of op3 is not a non-negative multiple of 128"),
    (("op3 = {op3}", "op3 = 0"), "in1 [0, 32768) and op3 [0, 8192) overlap, and both are live at step 0"),
    (("op3 = {op3}", "op3 = 229376"), "op3 (8192 bytes) at offset 229376 ends at 237568, past the capacity 232448"),
    (("op3 = {op3} : i64, ", ""), "no offset for buffer op3"),
    (("op3 = {op3}", "op9 = {op3}"), "no offset for buffer op3"),
    (("op3 = {op3} : i64", "op3 = {op3} : i64, red = 0 : i64"), "red: no such buffer in this kernel"),
    (("stages = 4", "stages = 5"), "stages = 5, but the ring of this kernel's loop-varying inputs takes 1 to 4"),
    (("stages = 4", "stages = 0"), "[smem] #tb.smem stages = 0: a ring of >= 1 stages"),
    (("{full = #tb.smem", "{partial = #tb.smem"), "but the lowering emits a full kernel"),
    (("{full = #tb.smem", "{whole = #tb.smem"), "[smem] tb.smem on a kn.graph_def is {<kernel> = #tb.smem<stages = S"),
    (("tb.smem = {full =", "tb.smem = {full = 4 : i64, partial ="), "with <kernel> full, partial or combine"),
])
def test_bad_smem_records_are_located_errors(edit, message):
    """A hand-edited shared-memory record that the kernel could not honour is an error at
    the kn.graph_def that carries it, not wrong code and not a traceback."""
    text = _gqa_smem_plan()
    op3 = re.search(r"op3 = (\d+) : i64", text).group(1)
    old, new = (x.replace("{op3}", op3) for x in edit)
    assert old in text
    bad = text.replace(old, new, 1)
    line = next(i for i, ln in enumerate(bad.splitlines(), 1) if "kn.graph_def" in ln)
    r = mirage_opt("--convert-mirage-to-gpu", stdin=bad)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert message in r.stderr and re.search(rf"<stdin>:{line}:\d+: error", r.stderr), r.stderr


def test_lowering_takes_recorded_layouts():
    """Recorded layouts are what the lowering uses: the ILP's layouts of the gated MLP
    (2-d tiles, all with the last dim innermost) with every swizzle set to 0 lower as
    layouts off do."""
    pytest.importorskip("z3")
    path = str(ROOT / "examples" / "gated_mlp_fused.mlir")
    laid = mirage_opt(path, "--mirage-layout")
    assert laid.returncode == 0, laid.stderr
    assert re.search(r"swizzle = (32|64|128)>", laid.stdout)  # the ILP swizzles some tiles
    assert set(re.findall(r"#tb.layout<inner = (\d+),", laid.stdout)) == {"1"}
    unswizzled = re.sub(r"swizzle = \d+>", "swizzle = 0>", laid.stdout)
    taken = mirage_opt("--convert-mirage-to-gpu", stdin=unswizzled)
    off = mirage_opt(path, "--convert-mirage-to-gpu=layout=false")
    default = mirage_opt(path, "--convert-mirage-to-gpu")
    assert taken.returncode == 0, taken.stderr
    assert _kernels(taken.stdout) == _kernels(off.stdout) != _kernels(default.stdout)


@pytest.mark.parametrize("attr, edit, message", [
    ("tb.layout", ("swizzle = 0>", "swizzle = 48>"), "[layout] #tb.layout swizzle = 48: 0, 32, 64 or 128 bytes"),
    ("tb.layout", ("inner = 2,", "inner = 5,"), "[layout] tb.layout #tb.layout<inner = 5, swizzle = 128> does not fit a "
                                                "tile of shape [1, 64, 64]"),
    ("tb.layout", ("swizzle = 0>", "swizzle = 256>"), "swizzle = 256: 0, 32, 64 or 128 bytes"),
    ("tb.order", ("tb.order = 0 : i64", "tb.order = 9 : i64"), "must number the 5 ops"),
    ("tb.order", ("tb.order = 1 : i64", "tb.order = 7 : i64"), "must number the 5 ops"),
])
def test_bad_recorded_decisions_are_located_errors(attr, edit, message):
    """A hand-edited layout or order that the lowering could not honour is an error at
    the op that carries it, not wrong code."""
    pytest.importorskip("z3")
    path = str(ROOT / "examples" / "gqa_fused.mlir")
    text = mirage_opt(path, "--mirage-layout", "--mirage-schedule").stdout
    assert edit[0] in text
    bad = text.replace(edit[0], edit[1], 1)
    r = mirage_opt("--convert-mirage-to-gpu", stdin=bad)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert message in r.stderr and re.search(r"<stdin>:\d+:\d+: error", r.stderr), r.stderr


def test_an_order_that_reads_before_it_writes_is_an_error():
    pytest.importorskip("z3")
    path = str(ROOT / "examples" / "gqa_fused.mlir")
    text = mirage_opt(path, "--mirage-schedule").stdout
    # swap the places of the first matmul (order 0) and the exp that reads it (order 1)
    bad = text.replace("tb.order = 0 : i64", "tb.order = X").replace("tb.order = 1 : i64", "tb.order = 0 : i64")
    bad = bad.replace("tb.order = X", "tb.order = 1 : i64")
    r = mirage_opt("--convert-mirage-to-gpu", stdin=bad)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "whose result it reads" in r.stderr, r.stderr
