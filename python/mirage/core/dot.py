"""Kernel graphs -> Graphviz DOT, block and thread graphs drawn as nested clusters
labelled with their launch dims and maps."""
from __future__ import annotations

from . import ops as O
from .graph import KNGraph, Op, TBGraph
from .mlir_text import fmt_map, tensor_type


class _Dot:
    def __init__(self):
        self.lines: list[str] = []
        self.ids: dict[int, str] = {}
        self.n = 0

    def node(self, label: str, shape: str = "box", key=None) -> str:
        name = f"n{self.n}"
        self.n += 1
        label = label.replace('"', '\\"')
        self.lines.append(f'  {name} [label="{label}", shape={shape}];')
        if key is not None:
            self.ids[id(key)] = name
        return name

    def edge(self, a: str, b: str, label: str = "") -> None:
        extra = f' [label="{label}"]' if label else ""
        self.lines.append(f"  {a} -> {b}{extra};")


def _tensor_edges(d: _Dot, op: Op, node: str) -> None:
    for t in op.inputs:
        d.edge(d.ids[id(t)], node, tensor_type(t))


def _block(d: _Dot, op: Op, idx: int) -> list[str]:
    tb: TBGraph = op.body
    g, b = tb.grid_dim, tb.block_dim
    d.lines.append(f"  subgraph cluster_k{idx} {{")
    d.lines.append(f'  label="graph_def #{idx}: grid {list(g)} block {list(b)} forloop {tb.forloop_range}";')
    d.lines.append("  style=rounded; color=blue;")
    for k, rec in enumerate(tb.inputs):
        n = d.node(f"input\\nmap {fmt_map(rec.imap, rec.forloop_dim)}\\n{tensor_type(rec.stensor)}",
                   "invhouse", rec.stensor)
        d.edge(d.ids[id(op.inputs[k])], n)
    for t_op in tb.ops:
        if t_op.kind == "thread_graph":
            d.lines.append(f"  subgraph cluster_th{d.n} {{ label=\"thread graph\"; color=darkgreen;")
            label = "\\n".join(o.kind for o in t_op.body.ops)
            n = d.node(label, "box")
            d.lines.append("  }")
        else:
            acc = t_op.attrs.get("kind") or t_op.attrs.get("acc")  # forloop_accum(_rescale)
            kind = t_op.kind + (f" {acc}" if O.is_accumulator(t_op.kind) else "")
            n = d.node(kind, "ellipse" if not O.is_accumulator(t_op.kind) else "doubleoctagon")
        _tensor_edges(d, t_op, n)
        for t in t_op.outputs:
            d.ids[id(t)] = n
    outs = []
    for rec in tb.outputs:
        n = d.node(f"output\\nmap {fmt_map(rec.omap, rec.forloop_dim)}", "house")
        d.edge(d.ids[id(rec.stensor)], n, tensor_type(rec.stensor))
        outs.append(n)
    d.lines.append("  }")
    return outs


def to_dot(g: KNGraph) -> str:
    d = _Dot()
    d.lines.append(f'digraph "{g.name}" {{')
    d.lines.append("  compound=true; rankdir=TB;")
    for k, t in enumerate(g.inputs):
        d.node(f"input {k}\\n{tensor_type(t)}", "invhouse", t)
    for idx, op in enumerate(g.ops):
        if op.kind == "graph_def":
            for t, n in zip(op.outputs, _block(d, op, idx)):
                d.ids[id(t)] = n
        else:
            n = d.node(op.kind)
            _tensor_edges(d, op, n)
            d.ids[id(op.outputs[0])] = n
    for k, t in enumerate(g.outputs):
        n = d.node(f"output {k}", "house")
        d.edge(d.ids[id(t)], n, tensor_type(t))
    d.lines.append("}")
    return "\n".join(d.lines) + "\n"
