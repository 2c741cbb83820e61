"""`seed.softmax_pv_seeds`: decode attention after its row maximum over a KV cache of 4096
positions plus the new one (4097 = 17 x 241 keys, which no tile size divides) is offered
as one kernel looping over 241-key chunks, which the lowering splits one step a block (the
enumeration alone holds all 4097 keys in each block)."""
from __future__ import annotations

import numpy as np
import pytest

import mirage as mi
from mirage.lower.kernel_plan import Options, choose_split
from mirage.search import build as B
from mirage.search.check import formal_equivalent
from mirage.search.config import SearchConfig
from mirage.search.seed import softmax_pv_seeds


def attention(heads=2, rows=4, keys=4097, cols=32, softmax_first=False):
    g = mi.new_kernel_graph("attn")
    s = g.new_input((1, heads, rows, keys), dtype=mi.float16)
    mx = g.new_input((1, heads, rows, 1), dtype=mi.float16)
    v = g.new_input((1, heads, keys, cols), dtype=mi.float16)
    e = g.exp(g.sub(s, mx))
    if softmax_first:  # as transformers writes it: softmax, then P @ V
        g.mark_output(g.matmul(g.div(e, g.reduction(e, 3)), v))
    else:
        g.mark_output(g.div(g.matmul(e, v), g.reduction(e, 3)))
    return g


@pytest.mark.parametrize("softmax_first", [False, True])
def test_the_seed_loops_over_241_key_chunks_and_is_equivalent(softmax_first):
    g = attention(softmax_first=softmax_first)
    plans = softmax_pv_seeds(g, SearchConfig())
    assert plans
    rng = np.random.default_rng(1)
    s = rng.standard_normal((1, 2, 4, 4097))
    xs = [s, s.max(3, keepdims=True), rng.standard_normal((1, 2, 4097, 32))]
    p = np.exp(xs[0] - xs[1])
    want = (p @ xs[2]) / p.sum(3, keepdims=True)
    for plan in plans:
        h = B.build(g, plan)
        (op,) = [o for o in h.ops if o.kind == "graph_def"]
        assert op.body.forloop_range == 17 and op.body.inputs[0].stensor.shape[-1] == 241
        assert choose_split(op.body, Options()) == 17  # one step a block
        np.testing.assert_allclose(h.evaluate(xs, dtype=np.float64)[0], want, rtol=1e-9, atol=1e-12)
        assert formal_equivalent(g, h)


def test_other_programs_get_no_seed():
    g = attention(keys=4096)  # 16 chunks of 256: a seed too
    assert softmax_pv_seeds(g, SearchConfig())
    h = mi.new_kernel_graph("softmax_only")  # no matmul
    x = h.new_input((1, 2, 4, 4097), dtype=mi.float16)
    m = h.new_input((1, 2, 4, 1), dtype=mi.float16)
    e = h.exp(h.sub(x, m))
    h.mark_output(h.div(e, h.reduction(e, 3)))
    assert softmax_pv_seeds(h, SearchConfig()) == []
