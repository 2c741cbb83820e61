"""Input prologues folded back two ways (`search.prologue.variants`): into the kernels that
read them (recomputed per block) and as kernels of their own that run first; both are
exact rewrites of the reference."""
import os
import sys

import numpy as np

from mirage.search import build as B
from mirage.search.config import make_config
from mirage.search.prologue import analyze, fold
from mirage.search.seed import attention_seeds

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from benchmarks import qknorm_reference  # noqa: E402


def test_a_prologue_folds_in_or_runs_as_its_own_kernel():
    ref = qknorm_reference(1)
    P = analyze(ref)
    plans = attention_seeds(P.core, make_config("attention"))
    assert plans
    # Q's rms_norm reduces its last dim (rows, folded into registers): no variant; K's
    # norm reduces its head dim (a column norm): folded, or a kernel of its own first
    folded, k_alone = P.variants(plans[0])
    q_alone = fold(P, plans[0], separate={0})
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(t.shape) for t in ref.inputs]
    want = ref.evaluate(xs)[0]
    graphs = [B.build(ref, p) for p in (folded, q_alone, k_alone)]
    for g in graphs:
        got = g.evaluate(xs)[0]
        assert np.max(np.abs(got - want)) <= 1e-9 * np.max(np.abs(want))
    gf, gq, gk = graphs
    kinds = lambda g: [[o.kind for o in op.body.ops] for op in g.ops]  # noqa: E731
    # folded: the attention kernel normalizes Q and K per block; K alone: K's column norm
    # is a kernel of its own first, the attention kernel keeps only Q's rms_norm
    assert all(op.kind == "graph_def" for g in graphs for op in g.ops)
    assert len(gq.ops) == len(gk.ops) == len(gf.ops) + 1
    assert "rms_norm" in kinds(gf)[0] and "reduction" in kinds(gf)[0]
    assert "reduction" in kinds(gk)[0] and "rms_norm" not in kinds(gk)[0]
    assert "rms_norm" in kinds(gk)[1] and "reduction" not in kinds(gk)[1]
    assert "rms_norm" in kinds(gq)[0] and "rms_norm" not in kinds(gq)[1]
    # the K-norm kernel's tiles hold K's reduced dim (the head dim, 64) whole
    assert gk.ops[0].body.inputs[0].stensor.shape[1] == ref.inputs[1].shape[1]
