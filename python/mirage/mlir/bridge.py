"""The one crossing between an MLIR module and the μGraph model, shared by every pass.

A pass imports the module's functions as KNGraphs (`import_graphs`), works on the model,
and writes back either attributes on the ops the model objects came from (`graph_defs`,
`tile_ops`, `set_attr`: the importer records each object's Operation, so nothing is
paired by position) or whole new functions (`replace_body`).
"""
from __future__ import annotations

from typing import NamedTuple

from . import diagnostics as D
from .registry import PassFailure


def functions(module) -> list:
    """The `func.func` Operations of a module, in order (one per graph of `import_graphs`)."""
    return [f.operation for f in module.regions[0].blocks[0].operations if f.operation.name == "func.func"]


def import_graphs(module, pass_name: str, origins: dict | None = None) -> list:
    """The module's functions as KNGraphs; MLIR the model cannot take (another dialect's
    op, a broken model rule, a function returning nothing) is reported at the op at fault
    and fails the pass. `origins`: see `importer.parse_mlir`."""
    from .importer import MLIRImportError, parse_mlir

    try:
        return parse_mlir(module, origins)
    except MLIRImportError as e:
        D.error(e.op if e.op is not None else module, f"{pass_name}: {e.reason}")
        raise PassFailure(str(e)) from None


class GraphDef(NamedTuple):
    op: object  # the kn.graph_def Operation
    graph: object  # the KNGraph holding it
    kernel: object  # its kernel op in the model (`kernel.body`: the block graph)
    tiles: dict  # tile name (as `optimize.plan.tile_names`) -> the Operation defining the tile


def graph_defs(module, pass_name: str) -> list[GraphDef]:
    """Every graph-defined kernel of the module, in module order."""
    from ..optimize.plan import tile_names

    origins: dict = {}
    out = []
    for g in import_graphs(module, pass_name, origins):
        for op in g.ops:
            if op.kind == "graph_def":
                tiles = {name: origins[t] for t, name in tile_names(op.body).items()}
                out.append(GraphDef(origins[id(op)], g, op, tiles))
    return out


def graph_def_of(g, tb, origins: dict, default):
    """The kn.graph_def Operation (from `origins`, see `import_graphs`) of the kernel op of
    `g` whose block graph is `tb`; `default` when there is none (tb None, a pre-defined op's)."""
    return next((origins[id(op)] for op in g.ops if op.kind == "graph_def" and op.body is tb), default)


def set_attr(op, name: str, text: str) -> None:
    """Set attribute `name` of `op` to the attribute parsed from `text`."""
    import mlir.ir as ir

    op.attributes[name] = ir.Attribute.parse(text, op.context)


def replace_body(module_op, graphs) -> None:
    """Replace the functions of `module_op` by the MLIR of `graphs`."""
    import mlir.ir as ir

    from ..core.mlir_text import print_module

    new = ir.Module.parse(print_module(graphs), module_op.context)
    body = module_op.regions[0].blocks[0]
    for o in list(body.operations):
        o.erase()
    ip = ir.InsertionPoint(body)
    for o in list(new.body.operations):
        o.detach_from_parent()
        ip.insert(o)
