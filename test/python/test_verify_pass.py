"""The mirage-verify pass logic on KNGraphs (the MLIR side is covered by
test/Transforms/mirage-verify.mlir under lit)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from benchmarks import BENCHMARKS  # noqa: E402

from mirage.mlir.registry import registry  # noqa: E402
from mirage.verify.mutate import replay  # noqa: E402
from mirage.mlir.passes.mirage_verify import verify_pairs  # noqa: E402

SH = dict(dims={256: 32, 4096: 64}, grid={64: 4})


def test_registered():
    assert "mirage-verify" in registry()


def test_verify_pairs_remark_and_error():
    b = BENCHMARKS["lora"]
    ref, fused = replay(b.reference(1), **SH), replay(b.fused(1), **SH)
    from mirage.verify.mutate import Mutation
    add_site = next(("tb", 0, j) for j, op in enumerate(fused.ops[0].body.ops) if op.kind == "add")
    bad = replay(fused, Mutation(add_site, ("optype", "sub")))
    out = verify_pairs({"ref": ref, "fused": fused, "bad": bad}, [("fused", "ref"), ("bad", "ref"), ("x", "nope")])
    assert out[0].ok and "@fused is equivalent to @ref" in out[0].message and "trials" in out[0].message
    assert not out[1].ok and "@bad is not equivalent to @ref" in out[1].message
    assert not out[2].ok and "not a function of this module" in out[2].message
