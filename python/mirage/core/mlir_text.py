"""Kernel graphs -> MLIR text in the syntax of docs/ir.md (no MLIR import needed)."""
from __future__ import annotations

from typing import Sequence

from .graph import GRID, LOOP, KNGraph, Op, TBGraph, Tensor, THGraph


def tensor_type(t: Tensor) -> str:
    if not t.shape:
        return t.dtype.mlir
    return "tensor<" + "x".join(str(d) for d in t.shape) + "x" + t.dtype.mlir + ">"


def fmt_float(v: float) -> str:
    r = repr(float(v))
    mant, _, exp = r.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


def fmt_map(dmap: Sequence[int], loop_dim: int) -> str:
    entries = [f"{g} -> {d}" for g, d in zip(GRID + (LOOP,), tuple(dmap) + (loop_dim,)) if d != -1]
    return "<" + ", ".join(entries) + ">"


def _i64s(v) -> str:
    return "array<i64: " + ", ".join(str(int(x)) for x in v) + ">"


# attributes printed in the op's own syntax (ODS assembly formats), not in the attr dict
_OWN_SYNTAX = {"clamp": ("min_val", "max_val"), "mul_scalar": ("scalar",), "forloop_accum_rescale": ("acc",)}


def _operands(op: Op, nm: "_Namer") -> str:
    """The operand list, with the scalar attributes / accumulator kind where the op's
    assembly format puts them: `%a min -1.0 max 1.0`, `%a, 0.125`, `none %a, %b`."""
    args = ", ".join(nm[t] for t in op.inputs)
    if op.kind == "clamp":
        return f"{args} min {fmt_float(op.attrs['min_val'])} max {fmt_float(op.attrs['max_val'])}"
    if op.kind == "mul_scalar":
        return f"{args}, {fmt_float(op.attrs['scalar'])}"
    if op.kind == "forloop_accum_rescale":
        return f"{op.attrs['acc']} {args}"
    return args


def _attr_dict(op: Op) -> str:
    parts = []
    for k, v in op.attrs.items():
        if k in ("value", "shape") and op.kind == "constant":
            continue
        if k == "shape" and op.kind == "reshape":
            continue
        if k == "dimx" or k in _OWN_SYNTAX.get(op.kind, ()):
            continue
        parts.append(f"{k} = {_i64s(v)}" if isinstance(v, tuple) else f"{k} = {int(v)} : i64")
    return (" {" + ", ".join(parts) + "}") if parts else ""


class _Namer:
    def __init__(self, prefix: str = ""):
        self.names: dict[int, str] = {}
        self.prefix = prefix
        self.count = 0

    def define(self, t: Tensor, name: str | None = None) -> str:
        if name is None:
            name = f"%{self.prefix}{self.count}"
            self.count += 1
        self.names[id(t)] = name
        return name

    def define_results(self, outs: Sequence[Tensor]) -> str:
        if len(outs) == 1:
            return self.define(outs[0])
        base = f"%{self.prefix}{self.count}"
        self.count += 1
        for k, t in enumerate(outs):
            self.names[id(t)] = f"{base}#{k}"
        return f"{base}:{len(outs)}"

    def __getitem__(self, t: Tensor) -> str:
        return self.names[id(t)]


def _compute_op(dialect: str, op: Op, nm: _Namer) -> str:
    args = _operands(op, nm)
    res = nm.define_results(op.outputs)
    out_t = tensor_type(op.outputs[0])
    if len(op.outputs) > 1:  # reduction_max: (max, diff)
        out_t = "(" + ", ".join(tensor_type(t) for t in op.outputs) + ")"
    if op.kind == "constant":
        return f"{res} = {dialect}.constant {fmt_float(op.attrs['value'])} : {out_t}"
    if dialect == "th":
        return f"{res} = th.{op.kind} {args} : {out_t}"
    in_t = [tensor_type(t) for t in op.inputs]
    sig = in_t[0] if len(in_t) == 1 else "(" + ", ".join(in_t) + ")"
    return f"{res} = {dialect}.{op.kind} {args}{_attr_dict(op)} : {sig} -> {out_t}"


def _signature(ins: Sequence[Tensor], outs: Sequence[Tensor]) -> str:
    i = "(" + ", ".join(tensor_type(t) for t in ins) + ")"
    o = [tensor_type(t) for t in outs]
    return f"{i} -> " + (o[0] if len(o) == 1 else "(" + ", ".join(o) + ")")


def _print_thread_graph(op: Op, nm: _Namer, ind: str) -> list[str]:
    th: THGraph = op.body
    inner = _Namer("t")
    head = ", ".join(f"{inner.define(s, f'%s{k}')}: {s.dtype.mlir}" for k, s in enumerate(th.inputs))
    res = nm.define_results(op.outputs)
    lines = [f"{ind}{res} = tb.thread_graph ({', '.join(nm[t] for t in op.inputs)}) : "
             f"{_signature(op.inputs, op.outputs)} {{", f"{ind}^bb0({head}):"]
    lines += [ind + "  " + _compute_op("th", o, inner) for o in th.ops]
    ys = ", ".join(inner[s] for s in th.outputs)
    lines.append(f"{ind}  th.yield {ys} : {', '.join(s.dtype.mlir for s in th.outputs)}")
    lines.append(ind + "}")
    return lines


def _print_block_graph(op: Op, nm: _Namer, ind: str) -> list[str]:
    tb: TBGraph = op.body
    inner = _Namer("b")
    args = [f"%a{k}" for k in range(len(tb.inputs))]
    res = nm.define_results(op.outputs)
    g, b = tb.grid_dim, tb.block_dim
    lines = [f"{ind}{res} = kn.graph_def ({', '.join(nm[t] for t in op.inputs)}) "
             f"grid [{g[0]}, {g[1]}, {g[2]}] block [{b[0]}, {b[1]}, {b[2]}] "
             f"forloop {tb.forloop_range} dimx {tb.reduction_dimx} : {_signature(op.inputs, op.outputs)} {{",
             f"{ind}^bb0(" + ", ".join(f"{a}: {tensor_type(t)}" for a, t in zip(args, op.inputs)) + "):"]
    ind2 = ind + "  "
    for a, rec in zip(args, tb.inputs):
        name = inner.define(rec.stensor)
        staged = f" {{k_chunk = {rec.k_chunk} : i64}}" if rec.k_chunk else ""
        lines.append(f"{ind2}{name} = tb.input {a} map {fmt_map(rec.imap, rec.forloop_dim)}{staged} : "
                     f"{tensor_type(rec.dtensor)} -> {tensor_type(rec.stensor)}")
    for o in tb.ops:
        if o.kind == "forloop_accum":
            x = o.inputs[0]
            lines.append(f"{ind2}{inner.define(o.outputs[0])} = tb.forloop_accum {o.attrs['kind']} {inner[x]} : "
                         f"{tensor_type(x)} -> {tensor_type(o.outputs[0])}")
        elif o.kind == "thread_graph":
            lines += _print_thread_graph(o, inner, ind2)
        else:
            lines.append(ind2 + _compute_op("tb", o, inner))
    for rec in tb.outputs:
        lines.append(f"{ind2}tb.output {inner[rec.stensor]} map {fmt_map(rec.omap, rec.forloop_dim)} : "
                     f"{tensor_type(rec.stensor)}")
    lines.append(ind + "}")
    return lines


def print_function(g: KNGraph, ind: str = "  ") -> list[str]:
    # the one place to_mlir, compile (graph hash), the search cache and the passes all reach
    g.require_outputs("MLIR of the graph")
    nm = _Namer()
    args = []
    for k, t in enumerate(g.inputs):
        a = nm.define(t, f"%arg{k}")
        st = g.strides.get(k)
        args.append(f"{a}: {tensor_type(t)}" + (f" {{kn.strides = {_i64s(st)}}}" if st else ""))
    outs = [tensor_type(t) for t in g.outputs]
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    lines = [f"{ind}func.func @{g.name}({', '.join(args)}) -> {ret} {{"]
    body = ind + "  "
    for op in g.ops:
        if op.kind == "graph_def":
            lines += _print_block_graph(op, nm, body)
        else:
            lines.append(body + _compute_op("kn", op, nm))
    lines.append(f"{body}return {', '.join(nm[t] for t in g.outputs)} : {', '.join(outs)}")
    lines.append(ind + "}")
    return lines


def print_module(graphs: Sequence[KNGraph]) -> str:
    caps = {g.smem_capacity for g in graphs if g.smem_capacity}
    attrs = f" attributes {{kn.smem_capacity = {caps.pop()} : i64}}" if len(caps) == 1 else ""
    lines = [f"module{attrs} {{"]
    for g in graphs:
        lines += print_function(g)
    lines.append("}")
    return "\n".join(lines) + "\n"
