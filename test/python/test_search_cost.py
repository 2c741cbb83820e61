"""The cost model (`search/cost.py`) costs the kernels the lowering emits
(`lower.convert.plan_graph`): a concat as one copy per operand into its output slice, a
transpose or a reshape of row-major memory that is not a graph output as a view (no
kernel), and a copy for an output that no kernel writes."""
from __future__ import annotations

import pytest

import mirage as mi
from mirage.lower.convert import plan_graph
from mirage.lower.kernel_plan import Options
from mirage.search.cost import cost


def _concat(g, a, b):
    return [g.exp(g.concat(a, b, 1))]


def _transpose_view(g, a, b):  # a transpose read by a matmul: a view
    return [g.matmul(g.transpose(a, (1, 0)), b)]


def _transpose_output(g, a, b):  # a transposed graph output keeps its kernel
    return [g.transpose(g.add(a, a), (1, 0)), g.exp(b)]


def _reshape_of_view(g, a, b):  # a reshape of a transposed view is not row-major: a kernel
    return [g.exp(g.reshape(g.transpose(a, (1, 0)), (32, 128))), b]


def _reshape_view(g, a, b):
    return [g.exp(g.reshape(a, (32, 128)))]


def _input_and_twice(g, a, b):  # an input marked as output, a tensor marked twice: copies
    e = g.exp(b)
    return [a, e, e]


CASES = [(_concat, (64, 32), (64, 96)), (_transpose_view, (64, 64), (64, 32)),
         (_transpose_output, (64, 64), (64, 32)), (_reshape_of_view, (64, 64), (64, 32)),
         (_reshape_view, (64, 64), (64, 32)), (_input_and_twice, (64, 64), (64, 32))]


@pytest.mark.parametrize("build,sa,sb", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_cost_counts_the_kernels_the_lowering_emits(build, sa, sb):
    g = mi.new_kernel_graph("t")
    a, b = g.new_input(sa), g.new_input(sb)
    for t in build(g, a, b):
        g.mark_output(t)
    planned = plan_graph(g, Options()).kernels
    assert all(k.plan.split == 1 for k in planned)  # (a split kernel is costed as one)
    got = cost(g).kernels
    # the same kernels in launch order: the same grids
    assert [k.blocks for k in got] == [k.plan.lead[0] * k.plan.lead[1] * k.plan.lead[2] for k in planned]
    assert [k.kind for k in got] == [k.notes.get("kind", "graph_def") for k in planned]


def test_concat_costs_its_slice_copies_not_a_whole_dim_block_graph():
    # the KV-cache append at decode: the cache (4096 rows) and the new row, each copied
    g = mi.new_kernel_graph("kv")
    cache, new = g.new_input((8, 8, 4096, 128)), g.new_input((8, 8, 1, 128))
    g.mark_output(g.concat(cache, new, 2))
    c = cost(g)
    assert [k.kind for k in c.kernels] == ["concat", "concat"]
    one = mi.new_kernel_graph("copy")
    x = one.new_input((8, 8, 4096, 128))
    one.mark_output(one.exp(x))  # an element-wise op over the cache: its grid is the copy's
    assert c.kernels[0].blocks == cost(one).kernels[0].blocks
    # every byte of both operands read once and written once
    assert c.dram_bytes == pytest.approx(2 * 2 * (8 * 8 * 4097 * 128))


def _input_out(g, a, b):  # an input marked as output: a copy
    return [g.exp(b), a]


def _marked_twice(g, a, b):  # one kernel's output marked twice: the second mark a copy
    e = g.exp(b)
    return [e, g.exp(a), e]


def _input_thrice(g, a, b):  # an input marked three times: three copies, nothing else
    return [a, a, a]


COPY_CASES = [(_input_out, [1]), (_marked_twice, [2]), (_input_thrice, [0, 1, 2]), (_input_and_twice, [0, 2])]


@pytest.mark.parametrize("build,copied", COPY_CASES, ids=[c[0].__name__.strip("_") for c in COPY_CASES])
def test_cost_counts_the_output_copies_the_lowering_emits(build, copied):
    g = mi.new_kernel_graph("t")
    a, b = g.new_input((64, 64)), g.new_input((64, 32))
    for t in build(g, a, b):
        g.mark_output(t)
    planned = [k for k in plan_graph(g, Options()).kernels if k.notes.get("kind") == "copy"]
    # the outputs the plan's copy kernels write, in launch order
    assert [k.args[-1] for k in planned] == [{"kind": "output", "index": i} for i in copied]
    costed = [k for k in cost(g).kernels if k.kind == "copy"]
    assert len(costed) == len(planned)
    # each costed copy is the kernel of its output's shape: the plan's grid
    assert [k.blocks for k in costed] == [k.plan.lead[0] * k.plan.lead[1] * k.plan.lead[2] for k in planned]


def test_a_long_fma_sum_costs_its_dependent_chain():
    """A block summing 4097 terms an output without tensor cores is bound by that chain, not
    by the SIMT throughput alone (the H100 took 51 us for such a P @ V at 128 threads): 512
    threads (`block_threads`), 8 lanes an output, 513 terms a lane, CHAIN_CYCLES each, one
    wave. With tensor cores (4096 terms) there is no chain floor."""
    from math import ceil

    from mirage.core.graph import TBGraph
    from mirage.search.cost import CHAIN_CYCLES, _graph_def_cost, chain_time
    from mirage.target import DEFAULT

    def attention_pv(keys):
        g = mi.new_kernel_graph("t")
        a = g.new_input((64, 4, keys), dtype=mi.float16)
        b = g.new_input((64, keys, 16), dtype=mi.float16)
        tb = TBGraph(grid_dim=[64, 1, 1], block_dim=(128, 1, 1), forloop_range=1, reduction_dimx=64)
        r = tb.matmul(tb.new_input(a, input_map=(0, -1, -1), forloop_dim=-1),
                      tb.new_input(b, input_map=(0, -1, -1), forloop_dim=-1))
        tb.new_output(r, output_map=(0, -1, -1), forloop_dim=-1)
        g.mark_output(g.customized([a, b], tb)[0])
        return g, tb

    g, tb = attention_pv(4097)
    want = ceil(4097 / 8) * CHAIN_CYCLES / DEFAULT.clock
    assert chain_time(tb) == pytest.approx(want)
    assert _graph_def_cost(g.ops[0], DEFAULT).time >= DEFAULT.launch + want
    assert chain_time(attention_pv(4096)[1]) == 0.0
