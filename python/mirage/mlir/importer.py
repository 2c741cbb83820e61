"""MLIR (`kn`/`tb`/`th`) -> the Python μGraph model, through the MLIR Python bindings.

`parse_mlir(text)` returns one `KNGraph` per `func.func`; the graphs are rebuilt with
the builder API, so every Python-side validity check runs again on them.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from ..core.dtypes import dtype
from ..core.graph import KNGraph, TBGraph, THGraph, new_thread_graph
from ..core.ops import ACCUMULATORS, OPS


class MLIRImportError(ValueError):
    """MLIR that has no μGraph meaning (an op of another dialect, say), or that breaks a
    rule of the model. `op` is the mlir Operation at fault (passes report `reason` at its
    location); the message names it too, for callers of `parse_mlir` without MLIR."""

    def __init__(self, reason: str, op=None):
        self.reason, self.op = reason, op
        super().__init__(f"{op.name} at {op.location}: {reason}" if op is not None else reason)


# errors of the model's rules (GraphError is a ValueError, GraphTypeError a TypeError) and
# of the bindings' attribute casts; anything else escaping the import is a bug
_RULE_ERRORS = (ValueError, TypeError, OverflowError)


@contextmanager
def _at(op):
    """Errors raised while importing `op` (and not already placed at an op inside it)
    become MLIRImportErrors at `op`."""
    try:
        yield
    except MLIRImportError as e:
        if e.op is None:
            raise MLIRImportError(e.reason, op) from None
        raise
    except _RULE_ERRORS as e:
        raise MLIRImportError(str(e), op) from e


def _context():
    from .dialects import make_context

    return make_context()


def _shape_dtype(type_) -> tuple[tuple[int, ...], dtype]:
    import mlir.ir as ir

    if isinstance(type_, ir.RankedTensorType):
        return tuple(type_.shape), dtype.parse(str(type_.element_type))
    return (), dtype.parse(str(type_))


def _int(attr) -> int:
    import mlir.ir as ir

    return ir.IntegerAttr(attr).value


def _i64s(attr) -> tuple[int, ...]:
    import mlir.ir as ir

    return tuple(ir.DenseI64ArrayAttr(attr))


def _float(attr) -> float:
    import mlir.ir as ir

    return ir.FloatAttr(attr).value


def _attr(op, *names):
    attrs = op.attributes
    for n in names:
        if n in attrs:
            return attrs[n]
    raise MLIRImportError(f"missing attribute {' or '.join(names)}", op)


_MAP_ENTRY = re.compile(r"([xyzi])\s*->\s*(-?\d+)")


def parse_map(text: str) -> tuple[tuple[int, int, int], int]:
    """`#tb.map<x -> 1, i -> 0>` (or its body) -> ((x, y, z), loop_dim), -1 = replica."""
    m = {"x": -1, "y": -1, "z": -1, "i": -1}
    for k, v in _MAP_ENTRY.findall(text):
        m[k] = int(v)
    return (m["x"], m["y"], m["z"]), m["i"]


def _table_attrs(op, kind: str) -> dict:
    attrs = {}
    for name in OPS[kind].attrs:
        if name == "shape":
            attrs["shape"] = _shape_dtype(op.results[0].type)[0]
        elif name in ("value", "min_val", "max_val", "scalar"):
            attrs[name] = _float(_attr(op, name))
        elif name == "acc":  # forloop_accum_rescale: the accumulator enum `kind`, as for tb.forloop_accum
            attrs["acc"] = ACCUMULATORS[_int(_attr(op, "kind"))]
        elif name == "dimx":
            continue  # the enclosing graph's dimx
        elif name in ("dim",):
            attrs[name] = _int(_attr(op, name))
        else:
            attrs[name] = _i64s(_attr(op, name))
    return attrs


def _apply(builder, kind: str, op, ins):
    if kind == "constant":
        shape, dt = _shape_dtype(op.results[0].type)
        if isinstance(builder, THGraph):
            return builder.constant(_float(_attr(op, "value")), dt)
        return builder.constant(_float(_attr(op, "value")), shape, dt)
    if kind == "rms_norm" and isinstance(builder, TBGraph):
        return builder.rms_norm(*ins)
    if kind == "reduction_to_dimx":
        return builder.reduction_to_dimx(*ins)
    attrs = _table_attrs(op, kind)
    return builder._op(kind, ins, **attrs)


def _ops(block):
    """The generic Operations of a block (iteration yields OpViews, whose `.name` may be
    a symbol name)."""
    return [o.operation for o in block.operations]


class _Env(dict):
    """mlir Value (hashed by the underlying value) -> model tensor."""

    def __missing__(self, v):
        raise MLIRImportError(f"value {v.get_name()} is used outside its graph")  # placed by _at


def _import_thread_graph(op, env: _Env, tb: TBGraph):
    block = op.regions[0].blocks[0]
    th = new_thread_graph([_shape_dtype(a.type)[1] for a in block.arguments])
    inner = _Env()
    for a, s in zip(block.arguments, th.inputs):
        inner[a] = s
    for o in _ops(block):
        with _at(o):
            name = o.name
            if name == "th.yield":
                for v in o.operands:
                    th.output(inner[v])
                continue
            if not name.startswith("th."):
                raise MLIRImportError(f"'{name}' is not a thread-graph op", o)
            inner[o.results[0]] = _apply(th, name[3:], o, [inner[v] for v in o.operands])
    outs = tb.thread_graph([env[v] for v in op.operands], th)
    for r, t in zip(op.results, outs):
        env[r] = t


def _import_graph_def(op, env: _Env, g: KNGraph, origins: dict):
    tb = TBGraph(_i64s(_attr(op, "grid_dims")), _i64s(_attr(op, "block_dims")),
                 _int(_attr(op, "forloop_range")), _int(_attr(op, "dimx")))
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    dts = [env[v] for v in op.operands]
    inner = _Env()
    reads = []
    for o in _ops(block):
        with _at(o):
            name = o.name
            if name == "tb.input":
                src = o.operands[0]
                k = next((i for i, a in enumerate(args) if a == src), None)
                if k is None:
                    raise MLIRImportError("tb.input must read a region argument", o)
                imap, loop = parse_map(str(_attr(o, "map")))
                kc = _int(o.attributes["k_chunk"]) if "k_chunk" in o.attributes else 0
                inner[o.results[0]] = tb.new_input(dts[k], imap, loop, k_chunk=kc)
                origins[id(inner[o.results[0]])] = o
                reads.append(dts[k])
            elif name == "tb.output":
                omap, loop = parse_map(str(_attr(o, "map")))
                tb.new_output(inner[o.operands[0]], omap, loop)
            elif name == "tb.forloop_accum":
                kind = ACCUMULATORS[_int(_attr(o, "kind"))]  # the ODS enum lists them in this order
                inner[o.results[0]] = tb.forloop_accum(inner[o.operands[0]], None if kind == "none" else kind)
                origins[id(inner[o.results[0]])] = o
            elif name == "tb.thread_graph":
                _import_thread_graph(o, inner, tb)
                origins.update((id(inner[r]), o) for r in o.results)
            elif name.startswith("tb."):
                t = _apply(tb, name[3:], o, [inner[v] for v in o.operands])
                for r, x in zip(o.results, t.producer.outputs):  # reduction_max defines two
                    inner[r] = x
                    origins[id(x)] = o
            else:
                raise MLIRImportError(f"'{name}' is not a block-graph op", o)
    _read_plan(tb, origins)
    _read_smem(tb, op)
    outs = g.customized(reads, tb)
    origins[id(outs[0].producer)] = op
    for r, t in zip(op.results, outs):
        env[r] = t


_LAYOUT = re.compile(r"#tb\.layout<inner = (\d+), swizzle = (\d+)>")
_SMEM = re.compile(r"#tb\.smem<stages = (\d+), offsets = \{(.*)\}>")
_OFFSET = re.compile(r'([A-Za-z_][\w.$]*|"[^"]*") = (\d+) : \w+')


def _read_plan(tb: TBGraph, origins: dict) -> None:
    """The optimizer passes' decisions recorded on the block graph's ops: `tb.layout`
    (a `#tb.layout<inner = D, swizzle = S>`; an array of them on an op with several
    results) and `tb.order` (the op's place in the order the ops run). The dialect has
    verified each layout against its tile; the bindings have no class for `#tb.layout`,
    so it is read from its printed form."""
    import mlir.ir as ir

    from ..optimize.plan import tile_names

    for t, name in tile_names(tb).items():
        o = origins[t]
        if "tb.layout" not in o.attributes:
            continue
        a = o.attributes["tb.layout"]
        if isinstance(a, ir.ArrayAttr):
            a = ir.ArrayAttr(a)[int(name.split(".")[1]) if "." in name else 0]
        inner, swz = _LAYOUT.fullmatch(str(a)).groups()
        tb.recorded_layouts[name] = (int(inner), int(swz))
    ops = [origins[id(op.outputs[0])] for op in tb.ops]
    if any("tb.order" in o.attributes for o in ops):
        from ..optimize.schedule import valid_order

        where = next(o for o in ops if "tb.order" in o.attributes)
        with _at(where):
            if not all("tb.order" in o.attributes for o in ops):
                raise MLIRImportError("tb.order must be on every op of the block graph, or on none")
            order = [-1] * len(ops)  # a place out of range or taken twice leaves a -1: valid_order says so
            for j, o in enumerate(ops):
                place = _int(o.attributes["tb.order"])
                if 0 <= place < len(ops):
                    order[place] = j
            why = valid_order(tb, order)
            if why:
                raise MLIRImportError(why)
        tb.recorded_order = order


def _read_smem(tb: TBGraph, gdef) -> None:
    """`tb.smem` on the kn.graph_def, written by `--mirage-smem-plan` (the dialect has
    verified its form: kernel -> `#tb.smem<stages = S, offsets = {<buffer> = <bytes>}>`,
    kernel `full`, `partial` or `combine`), into `tb.recorded_smem` (kernel -> (stages,
    {buffer: offset})), from the printed form (no binding class). The lowering checks it
    against its own buffers (`KernelPlan`)."""
    import mlir.ir as ir

    if "tb.smem" not in gdef.attributes:
        return
    rec = {}
    for kernel in ir.DictAttr(gdef.attributes["tb.smem"]):
        stages, body = _SMEM.fullmatch(str(kernel.attr)).groups()
        rec[kernel.name] = (int(stages), {b.strip('"'): int(o) for b, o in _OFFSET.findall(body)})
    tb.recorded_smem = rec


def _import_function(func, smem_capacity: int | None, origins: dict) -> KNGraph:
    import mlir.ir as ir

    g = KNGraph(name_of(func))
    g.smem_capacity = smem_capacity  # the [smem] rule of its block graphs reads it
    env = _Env()
    block = func.regions[0].blocks[0]
    arg_attrs = func.attributes["arg_attrs"] if "arg_attrs" in func.attributes else None
    for k, a in enumerate(block.arguments):
        shape, dt = _shape_dtype(a.type)
        strides = None
        if arg_attrs is not None:
            d = ir.DictAttr(ir.ArrayAttr(arg_attrs)[k])
            if "kn.strides" in d:
                strides = _i64s(d["kn.strides"])
        env[a] = g.new_input(shape, strides, dt)
    for op in _ops(block):
        with _at(op):
            name = op.name
            if name == "func.return":
                if not op.operands:  # the model (and every pass) needs an output
                    raise MLIRImportError(f"function @{name_of(func)} returns nothing: a μGraph needs at "
                                          f"least one output", op)
                for v in op.operands:
                    g.mark_output(env[v])
            elif name == "kn.graph_def":
                _import_graph_def(op, env, g, origins)
            elif name.startswith("kn.") and name[3:] in OPS:
                env[op.results[0]] = _apply(g, name[3:], op, [env[v] for v in op.operands])
            elif name.startswith("tosa."):
                raise MLIRImportError(f"'{name}' is a TOSA op, not a kernel-graph op: run --convert-tosa-to-kn "
                                      f"first (ops it cannot express stay TOSA and cannot be optimized)", op)
            else:
                raise MLIRImportError(f"'{name}' is not a kernel-graph op", op)
    return g


def name_of(func) -> str:
    """The symbol name of a `func.func` Operation."""
    import mlir.ir as ir

    return ir.StringAttr(func.attributes["sym_name"]).value


def parse_mlir(source, origins: dict | None = None) -> list[KNGraph]:
    """MLIR text (or an `mlir.ir.Module` / module Operation) -> one KNGraph per function.
    `origins`, when given, receives id(model object) -> the mlir Operation it came from,
    for graph-defined kernel ops and every tile of their block graphs (passes annotate
    the IR through it)."""
    if isinstance(source, str):
        from .dialects import parse_module

        module = parse_module(source, _context())
        op = module.operation
    else:
        op = getattr(source, "operation", source)
    graphs = []
    with _at(op):
        cap = _int(op.attributes["kn.smem_capacity"]) if "kn.smem_capacity" in op.attributes else None
    for f in _ops(op.regions[0].blocks[0]):
        if f.name == "func.func":
            with _at(f):  # the arguments' rules (dtypes, sizes, strides)
                g = _import_function(f, cap, {} if origins is None else origins)
            graphs.append(g)
    return graphs


parse_module = parse_mlir


def load_mlir(path: str) -> list[KNGraph]:
    with open(path) as f:
        return parse_mlir(f.read())
