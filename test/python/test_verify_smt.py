"""Z3 fallback on small non-Lax programs."""
import mirage as mi
from mirage.verify.smt import prove_equivalence


def _relu_pair(swap_bad=False):
    a = mi.new_kernel_graph()
    x, y = a.new_input((2, 3)), a.new_input((3, 2))
    a.mark_output(a.relu(a.matmul(x, y)))
    b = mi.new_kernel_graph()
    x, y = b.new_input((2, 3)), b.new_input((3, 2))
    m = b.matmul(x, y)
    b.mark_output(b.relu(b.sub(m, m) if swap_bad else b.div(b.mul(m, m), m)) if swap_bad else
                  b.relu(b.add(m, b.constant(0.0, (1, 1)))))
    return a, b


def test_proved_with_relu_and_silu():
    a, b = _relu_pair()
    assert prove_equivalence(a, b).status == "proved"
    g = mi.new_kernel_graph()
    x = g.new_input((2, 4))
    g.mark_output(g.silu(g.reduction(g.mul(x, g.constant(2.0, (1, 1))), 1)))
    h = mi.new_kernel_graph()
    x = h.new_input((2, 4))
    h.mark_output(h.silu(h.add(h.reduction(x, 1), h.reduction(x, 1))))
    assert prove_equivalence(g, h).status == "proved"


def test_max_split_proved_and_refuted():
    def build(split, wrong=False):
        g = mi.new_kernel_graph()
        x = g.new_input((2, 4))
        if split:
            tb = mi.new_threadblock_graph((1, 1, 1), forloop_range=2)
            t = tb.new_input(x, (-1, -1, -1), 1)
            r = tb.forloop_accum(tb.reduce_max(t, 1), "sum" if wrong else "max")
            tb.new_output(r, (-1, -1, -1))
            g.mark_output(g.customized([x], tb)[0])
        else:
            g.mark_output(g.reduce_max(x, 1))
        return g
    assert prove_equivalence(build(False), build(True)).status == "proved"
    r = prove_equivalence(build(False), build(True, wrong=True))
    assert r.status == "refuted" and r.counterexample and r.output == 0
    x = r.counterexample["input 0"]
    import numpy as np
    assert max(x[r.index[0]]) != max(x[r.index[0]][:2]) + max(x[r.index[0]][2:])


def test_rms_sqrt():
    g = mi.new_kernel_graph()
    x = g.new_input((1, 3))
    g.mark_output(g.rms_norm(x, (3,)))
    h = mi.new_kernel_graph()
    x = h.new_input((1, 3))
    h.mark_output(h.div(x, h.sqrt(h.div(h.reduction(h.square(x), 1), h.constant(3.0, (1, 1))))))
    assert prove_equivalence(g, h).status == "proved"
