"""The op table (`core/ops.py`) and the dialects' ODS agree: the compute operators each
dialect defines are the table's operators at that level, and every stage's list of
operators is derived from the table's categories."""
import inspect

import pytest

from mirage.core import ops as O

pytest.importorskip("mlir.ir")

STRUCTURAL = {"kn": {"graph_def"}, "tb": {"input", "output", "forloop_accum", "thread_graph"}, "th": {"yield"}}
# in the model (the lowering's default block graphs use them) but not yet in the tb dialect
NOT_IN_ODS = {"tb": {"reshape", "transpose", "repeat"}}


@pytest.mark.parametrize("level", ["kn", "tb", "th"])
def test_ods_operators_are_the_table(level):
    import importlib

    gen = importlib.import_module(f"mirage.mlir.dialects._{level}_ops_gen")
    ods = {c.OPERATION_NAME.split(".", 1)[1] for _, c in inspect.getmembers(gen, inspect.isclass)
           if hasattr(c, "OPERATION_NAME")} - STRUCTURAL[level]
    table = {n for n, d in O.OPS.items() if level in d.levels} - NOT_IN_ODS.get(level, set())
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
