"""The op table (`core/ops.py`) and the dialects' ODS agree: the compute operators each
dialect defines are the table's operators at that level, and every stage's list of
operators is derived from the table's categories."""
import inspect

import pytest

from mirage.core import ops as O

pytest.importorskip("mlir.ir")

STRUCTURAL = {"kn": {"graph_def"}, "tb": {"input", "output", "forloop_accum", "thread_graph"}, "th": {"yield"}}


@pytest.mark.parametrize("level", ["kn", "tb", "th"])
def test_ods_operators_are_the_table(level):
    import importlib

    gen = importlib.import_module(f"mirage.mlir.dialects._{level}_ops_gen")
    ods = {c.OPERATION_NAME.split(".", 1)[1] for _, c in inspect.getmembers(gen, inspect.isclass)
           if hasattr(c, "OPERATION_NAME")} - STRUCTURAL[level]
    table = {n for n, d in O.OPS.items() if level in d.levels}
    assert ods == table


def test_every_operator_has_a_category_and_the_lists_derive_from_it():
    from mirage.lower import scalar
    from mirage.optimize.layout import ELEMENTWISE as LAYOUT_EW
    from mirage.search import generator, threadgraph
    from mirage.verify import mutate

    assert all(d.category for d in O.OPS.values())
    assert set(O.ELEMENTWISE) == {n for n, d in O.OPS.items() if d.arity in (1, 2) and d.category in ("unary", "binary")}
    assert scalar.UNARY == generator.UNARY == mutate._UNARY == O.UNARY
    assert scalar.BINARY == generator.BINARY == mutate._BINARY == O.BINARY
    assert threadgraph.ELEMENTWISE == set(O.ELEMENTWISE) == LAYOUT_EW


def test_element_wise_operators_carry_their_gpu_code_and_builders_come_from_the_table():
    import mirage as mi
    from mirage.core.graph import WRITTEN_OUT

    assert all(O.OPS[n].gpu for n in O.ELEMENTWISE + ("constant",))
    assert all(d.lax == "nonlax" and d.category == "unary" for d in O.OPS.values() if d.real)
    graphs = {"kn": mi.new_kernel_graph(), "tb": mi.new_threadblock_graph((1, 1, 1), (128, 1, 1), 1, 64),
              "th": mi.new_thread_graph([mi.float16])}
    for name, d in O.OPS.items():
        for level, g in graphs.items():
            assert hasattr(g, name) == (level in d.levels), (name, level)
        if name not in WRITTEN_OUT and d.arity >= 1:
            params = list(inspect.signature(getattr(graphs[min(d.levels)], name)).parameters)
            assert params == ["A", "B"][:d.arity] + list(d.attrs), name


def test_float_and_gpu_semantics_of_the_activations_agree_with_torch():
    """The table's float64 functions are torch's (fresh random inputs, float64)."""
    torch = pytest.importorskip("torch")
    import numpy as np

    x = np.random.default_rng(0).standard_normal(1000) * 4
    ref = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu, "relu": torch.relu,
           "sigmoid": torch.sigmoid}
    assert {n for n, d in O.OPS.items() if d.real} == set(ref)
    for n, f in ref.items():
        np.testing.assert_allclose(O.OPS[n].real(x), f(torch.from_numpy(x)).numpy(), rtol=1e-12, atol=1e-12)
