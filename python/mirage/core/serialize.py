"""μGraphs <-> JSON (Mirage's `to_json` / `from_json`), and the owner-independent hash.

The JSON describes the program, not the Python objects: tensors are numbered in
definition order (a graph's inputs first, then each op's results in turn) and referred
to by number, so equal programs give equal text whatever objects built them. Reading
back rebuilds the graph with the builder API, so every validity check runs again;
malformed JSON raises `GraphJSONError` naming the place (`ops[2].inputs[0]`).

    {"format": "mirage-kngraph", "version": 1, "name": "main", "smem_capacity": null,
     "inputs": [{"shape": [16, 64], "dtype": "f16", "strides": null}, ...],
     "ops": [{"kind": "matmul", "inputs": [0, 1], "attrs": {}},
             {"kind": "graph_def", "inputs": [0, 2], "block_graph": {
                 "grid_dim": [4, 1, 1], "block_dim": [128, 1, 1], "forloop_range": 2,
                 "reduction_dimx": 64,
                 "inputs": [{"imap": [-1, -1, -1], "forloop_dim": 1}, ...],  # k-th reads the op's k-th input
                                                      # (a staged one also "k_chunk": 64)
                 "ops": [{"kind": "forloop_accum", "inputs": [2], "attrs": {"kind": "sum"}},
                         {"kind": "thread_graph", "inputs": [3], "thread_graph": {
                             "inputs": ["f16"], "ops": [...], "outputs": [1]}}, ...],
                 "outputs": [{"tensor": 5, "omap": [0, -1, -1], "forloop_dim": -1}]}}],
     "outputs": [3]}

A constant op also records its element type (`"dtype"`); every other op's follows from
its operands. This module is Mirage's format in role only: Mirage's own JSON (its C++
graph dump) is not read.
"""
from __future__ import annotations

import hashlib
import json
import os
import re

from .dtypes import dtype
from .graph import GraphError, KNGraph, TBGraph, THGraph, new_thread_graph

FORMAT = "mirage-kngraph"
VERSION = 1


class GraphJSONError(ValueError):
    """JSON that does not describe a μGraph; the message names the place."""


# -- graph -> plain data -------------------------------------------------------------------

def _value(v):
    return [_value(x) for x in v] if isinstance(v, (tuple, list)) else v


def _attrs(op) -> dict:
    # dimx is the enclosing block graph's (re-derived on load), not the op's own
    return {k: _value(v) for k, v in op.attrs.items() if k != "dimx"}


class _Numbering:
    def __init__(self):
        self.ids: dict[int, int] = {}

    def define(self, t) -> None:
        self.ids[id(t)] = len(self.ids)

    def __getitem__(self, t) -> int:
        return self.ids[id(t)]


def _table_op(op, nm: _Numbering) -> dict:
    rec = {"kind": op.kind, "inputs": [nm[t] for t in op.inputs], "attrs": _attrs(op)}
    if op.kind == "constant":
        rec["dtype"] = op.outputs[0].dtype.mlir
    for t in op.outputs:
        nm.define(t)
    return rec


def _thread_graph(th: THGraph) -> dict:
    nm = _Numbering()
    for s in th.inputs:
        nm.define(s)
    ops = [_table_op(op, nm) for op in th.ops]
    return {"inputs": [s.dtype.mlir for s in th.inputs], "ops": ops, "outputs": [nm[s] for s in th.outputs]}


def _block_graph(tb: TBGraph) -> dict:
    nm = _Numbering()
    for rec in tb.inputs:
        nm.define(rec.stensor)
    ops = []
    for op in tb.ops:
        if op.kind == "thread_graph":
            ops.append({"kind": "thread_graph", "inputs": [nm[t] for t in op.inputs],
                        "thread_graph": _thread_graph(op.body)})
            for t in op.outputs:
                nm.define(t)
        else:  # forloop_accum keeps its accumulator in attrs["kind"]
            ops.append(_table_op(op, nm))
    return {"grid_dim": list(tb.grid_dim), "block_dim": list(tb.block_dim), "forloop_range": tb.forloop_range,
            "reduction_dimx": tb.reduction_dimx,
            "inputs": [{"imap": list(r.imap), "forloop_dim": r.forloop_dim,
                        **({"k_chunk": r.k_chunk} if r.k_chunk else {})} for r in tb.inputs],
            "ops": ops,
            "outputs": [{"tensor": nm[o.stensor], "omap": list(o.omap), "forloop_dim": o.forloop_dim}
                        for o in tb.outputs]}


def to_data(g: KNGraph) -> dict:
    """The JSON-ready description of `g` (see the module doc)."""
    nm = _Numbering()
    inputs = []
    for k, t in enumerate(g.inputs):
        nm.define(t)
        st = g.strides.get(k)
        inputs.append({"shape": list(t.shape), "dtype": t.dtype.mlir, "strides": list(st) if st else None})
    ops = []
    for op in g.ops:
        if op.kind == "graph_def":
            ops.append({"kind": "graph_def", "inputs": [nm[t] for t in op.inputs], "block_graph": _block_graph(op.body)})
            for t in op.outputs:
                nm.define(t)
        else:
            ops.append(_table_op(op, nm))
    return {"format": FORMAT, "version": VERSION, "name": g.name, "smem_capacity": g.smem_capacity,
            "inputs": inputs, "ops": ops, "outputs": [nm[t] for t in g.outputs]}


# a list of scalars (shapes, maps, operand numbers) as json.dumps indents it: the raw
# newlines are json's own (a string holds them escaped), so text inside strings never matches
_FLAT_LIST = re.compile(r"\[(?:\n *[^\[\]{}\n]+)+\n *\]")


def to_json(g: KNGraph, filename: str | os.PathLike | None = None) -> str:
    """`g` as JSON text; also written to `filename` when given (Mirage's `to_json(filename)`).
    Indented, with lists of scalars kept on one line so a shape or map reads as one."""
    text = json.dumps(to_data(g), indent=1)
    text = _FLAT_LIST.sub(lambda m: "[" + " ".join(m.group(0)[1:-1].split()) + "]", text) + "\n"
    if filename is not None:
        with open(filename, "w") as f:
            f.write(text)
    return text


def owner_independent_hash(g: KNGraph) -> int:
    """A 64-bit hash of the program `g` computes, independent of the graph's name and of
    the Python objects that hold it (Mirage's `get_owner_independent_hash`): stable across
    processes and machines, equal for equal programs built in the same op order."""
    data = to_data(g)
    del data["name"]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16)


# -- plain data -> graph -------------------------------------------------------------------

def _get(d, key, where: str, types):
    """`d[key]`, checked to be of `types` (a bool is not taken for an int)."""
    if not isinstance(d, dict):
        raise GraphJSONError(f"{where}: expected an object, got {type(d).__name__}")
    if key not in d:
        raise GraphJSONError(f"{where}: missing field '{key}'")
    v = d[key]
    types = types if isinstance(types, tuple) else (types,)
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
        raise GraphJSONError(f"{where}.{key}: expected {' or '.join(t.__name__ for t in types)}, got {v!r}")
    return v


def _ints(v, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise GraphJSONError(f"{where}: expected a list of integers, got {v!r}")
    return tuple(v)


def _dtype(v, where: str) -> dtype:
    try:
        return dtype.parse(v) if isinstance(v, str) else dtype.parse("")
    except ValueError:
        raise GraphJSONError(f"{where}: unsupported element type {v!r} (expected \"f16\", \"bf16\" or \"f32\")") from None


class _Env:
    """Tensors by number, in definition order."""

    def __init__(self, where: str):
        self.tensors: list = []
        self.where = where

    def add(self, t) -> None:
        self.tensors.append(t)

    def ref(self, v, where: str):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(self.tensors):
            raise GraphJSONError(f"{where}: {v!r} names no tensor defined before it "
                                 f"({len(self.tensors)} defined so far in {self.where})")
        return self.tensors[v]


def _load_attrs(rec: dict, where: str) -> dict:
    attrs = rec.get("attrs", {})
    if not isinstance(attrs, dict):
        raise GraphJSONError(f"{where}.attrs: expected an object, got {attrs!r}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


def _apply_table_op(builder, rec: dict, ins: list, where: str):
    kind = _get(rec, "kind", where, str)
    attrs = _load_attrs(rec, where)
    if kind == "constant":
        if "value" not in attrs or "shape" not in attrs:
            raise GraphJSONError(f"{where}: a constant needs attrs 'value' and 'shape'")
        dt = _dtype(_get(rec, "dtype", where, str), f"{where}.dtype")
        if isinstance(builder, THGraph):
            return builder.constant(attrs["value"], dt)
        return builder.constant(attrs["value"], attrs["shape"], dt)
    if isinstance(builder, TBGraph):
        if kind == "forloop_accum":
            acc = attrs.get("kind", "none")
            return builder.forloop_accum(*ins, None if acc == "none" else acc)
        if kind == "rms_norm":
            return builder.rms_norm(*ins)
        if kind == "reduction_to_dimx":
            return builder.reduction_to_dimx(*ins)
    return builder._op(kind, ins, **attrs)


def _op_inputs(rec, env: _Env, where: str) -> list:
    refs = _get(rec, "inputs", where, list)
    return [env.ref(v, f"{where}.inputs[{k}]") for k, v in enumerate(refs)]


def _load_thread_graph(data, where: str) -> THGraph:
    dts = [_dtype(v, f"{where}.inputs[{k}]") for k, v in enumerate(_get(data, "inputs", where, list))]
    th = new_thread_graph(dts)
    env = _Env(where)
    for s in th.inputs:
        env.add(s)
    for k, rec in enumerate(_get(data, "ops", where, list)):
        w = f"{where}.ops[{k}]"
        env.add(_build_step(lambda: _apply_table_op(th, rec, _op_inputs(rec, env, w), w), w))
    for k, v in enumerate(_get(data, "outputs", where, list)):
        th.output(env.ref(v, f"{where}.outputs[{k}]"))
    return th


def _load_block_graph(data, dts: list, where: str) -> TBGraph:
    tb = _build_step(lambda: TBGraph(_ints(_get(data, "grid_dim", where, list), f"{where}.grid_dim"),
                                     _ints(_get(data, "block_dim", where, list), f"{where}.block_dim"),
                                     _get(data, "forloop_range", where, int),
                                     _get(data, "reduction_dimx", where, int)), where)
    ins = _get(data, "inputs", where, list)
    if len(ins) != len(dts):
        raise GraphJSONError(f"{where}.inputs: {len(ins)} iterators for a kernel op with {len(dts)} inputs")
    env = _Env(where)
    for k, (rec, t) in enumerate(zip(ins, dts)):
        w = f"{where}.inputs[{k}]"
        imap = _ints(_get(rec, "imap", w, list), f"{w}.imap")
        kc = _get(rec, "k_chunk", w, int) if "k_chunk" in rec else 0
        env.add(_build_step(lambda: tb.new_input(t, imap, _get(rec, "forloop_dim", w, int), k_chunk=kc), w))
    for k, rec in enumerate(_get(data, "ops", where, list)):
        w = f"{where}.ops[{k}]"
        xs = _op_inputs(rec, env, w)
        if _get(rec, "kind", w, str) == "thread_graph":
            th = _load_thread_graph(_get(rec, "thread_graph", w, dict), f"{w}.thread_graph")
            for t in _build_step(lambda: tb.thread_graph(xs, th), w):
                env.add(t)
        else:
            t = _build_step(lambda: _apply_table_op(tb, rec, xs, w), w)
            for r in t.producer.outputs:  # reduction_max defines two tensors
                env.add(r)
    for k, rec in enumerate(_get(data, "outputs", where, list)):
        w = f"{where}.outputs[{k}]"
        s = env.ref(_get(rec, "tensor", w, int), f"{w}.tensor")
        omap = _ints(_get(rec, "omap", w, list), f"{w}.omap")
        _build_step(lambda: tb.new_output(s, omap, _get(rec, "forloop_dim", w, int)), w)
    return tb


def _build_step(fn, where: str):
    """Run one builder call; a rejection names the JSON place it came from."""
    try:
        return fn()
    except GraphJSONError:
        raise
    except (GraphError, TypeError, ValueError) as e:
        raise GraphJSONError(f"{where}: {e}") from None


def from_data(data, into: KNGraph | None = None) -> KNGraph:
    """Rebuild the KNGraph described by `data` (a dict from `to_data`); into `into` (reset
    first) when given, else a new graph."""
    if not isinstance(data, dict):
        raise GraphJSONError(f"top level: expected an object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise GraphJSONError(f"top level: not a mirage μGraph (format {data.get('format')!r}, expected {FORMAT!r})")
    if data.get("version") != VERSION:
        raise GraphJSONError(f"top level: format version {data.get('version')!r} is not supported (this is {VERSION})")
    name = _get(data, "name", "top level", str)
    g = _build_graph(data, KNGraph(name), name)
    if into is None:
        return g
    # built once more into `into` (tensors belong to the graph that made them); only after
    # the first build passed, so a rejected file leaves `into` as it was
    return _build_graph(data, into, name)


def _build_graph(data: dict, g: KNGraph, name: str) -> KNGraph:
    KNGraph.__init__(g, name)  # loading replaces the graph's program, as Mirage's from_json does
    cap = data.get("smem_capacity")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
        raise GraphJSONError(f"top level.smem_capacity: expected a positive integer or null, got {cap!r}")
    g.smem_capacity = cap
    env = _Env("the kernel graph")
    for k, rec in enumerate(_get(data, "inputs", "top level", list)):
        w = f"inputs[{k}]"
        shape = _ints(_get(rec, "shape", w, list), f"{w}.shape")
        st = rec.get("strides") if isinstance(rec, dict) else None
        strides = None if st is None else _ints(st, f"{w}.strides")
        dt = _dtype(_get(rec, "dtype", w, str), f"{w}.dtype")
        env.add(_build_step(lambda: g.new_input(shape, strides, dt), w))
    for k, rec in enumerate(_get(data, "ops", "top level", list)):
        w = f"ops[{k}]"
        xs = _op_inputs(rec, env, w)
        if _get(rec, "kind", w, str) == "graph_def":
            tb = _load_block_graph(_get(rec, "block_graph", w, dict), xs, f"{w}.block_graph")
            for t in _build_step(lambda: g.customized(xs, tb), w):
                env.add(t)
        else:
            env.add(_build_step(lambda: _apply_table_op(g, rec, xs, w), w))
    for k, v in enumerate(_get(data, "outputs", "top level", list)):
        w = f"outputs[{k}]"
        t = env.ref(v, w)
        _build_step(lambda: g.mark_output(t), w)
    return g


def from_json(source, into: KNGraph | None = None) -> KNGraph:
    """A KNGraph from JSON: `source` is a file path, the JSON text itself, or the parsed
    dict (Mirage's `from_json(filename)`)."""
    if isinstance(source, dict):
        return from_data(source, into)
    # a string is a path unless it is no file and looks like JSON (Mirage passes file names)
    looks_like_json = isinstance(source, str) and not os.path.exists(source) and (
        source.lstrip()[:1] in ("{", "[") or "{" in source or "\n" in source)
    if isinstance(source, (str, os.PathLike)) and not looks_like_json:
        path = os.fspath(source)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise GraphJSONError(f"{path}: cannot read the μGraph JSON ({e.strerror or e})") from None
        where = path
    elif isinstance(source, str):
        text, where = source, "JSON text"
    else:
        raise GraphJSONError(f"from_json takes a file path, JSON text or a dict, got {type(source).__name__}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphJSONError(f"{where}: invalid JSON: {e}") from None
    try:
        return from_data(data, into)
    except GraphJSONError as e:
        raise GraphJSONError(f"{where}: {e}") from None
