"""`--convert-tosa-to-kn`: convert TOSA functions to kn kernel graphs (`mirage.mlir.tosa`);
ops kn cannot express stay TOSA between outlined kn functions, each with a remark
(`allow-partial=false`: an error)."""
from __future__ import annotations

from .. import diagnostics as D
from ..registry import Option, Pass, PassFailure, parse_bool, register
from ..tosa import ConversionError, _ir, _loc, to_kn_text
from ...core.graph import GraphError


@register
class ConvertTosaToKn(Pass):
    argument = "convert-tosa-to-kn"
    summary = "Convert TOSA functions to kn kernel graphs; unsupported ops stay TOSA between outlined kn functions"
    options = (
        Option("allow-partial", parse_bool, True,
               "leave ops kn cannot express as TOSA (with a remark each); false: fail on them"),
    )

    def run(self, module, allow_partial: bool = True, **_) -> None:
        ir = _ir()
        try:
            text, results = to_kn_text(module)
        except (ConversionError, GraphError) as e:
            D.error(module, f"convert-tosa-to-kn: {e}")
            raise PassFailure(str(e)) from None
        failed = False
        for fr in results:
            for u in fr.unsupported:
                op = next((n.op for n in fr.nodes if n.kind == "opaque" and n.op.name == u.op
                           and _loc(n.op) == u.location), module)
                if allow_partial:
                    D.remark(op, f"{u.op} stays TOSA: {u.reason}")
                else:
                    D.error(op, f"{u.op} cannot be converted to kn: {u.reason}")
                    failed = True
        if failed:
            raise PassFailure("convert-tosa-to-kn: unsupported ops")
        new = ir.Module.parse(text, module.context)
        block = module.regions[0].blocks[0]
        for op in list(block.operations):
            op.operation.erase()
        for op in list(new.body.operations):
            op.operation.detach_from_parent()
            block.append(op.operation)
