# The dialects in the upstream Python bindings: make_context(), parsing, verifier
# diagnostics, and building ops with the generated classes.
# RUN: %python %s | FileCheck %s
import sys

import mirage  # noqa: F401

assert "mlir" not in sys.modules, "import mirage must not import MLIR"

from mlir import ir
from mlir.dialects import func

from mirage.mlir.dialects import format_scalar, kn, make_context, tb, th

ctx = make_context()
with ctx, ir.Location.unknown():
    f16 = ir.F16Type.get()
    x_t = ir.RankedTensorType.get([16, 4096], f16)
    w_t = ir.RankedTensorType.get([4096, 4096], f16)
    o_t = ir.RankedTensorType.get([16, 4096], f16)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("built", ([x_t, w_t], [o_t]))
        with ir.InsertionPoint(fn.add_entry_block()):
            x, w = fn.arguments
            g = kn.GraphDefOp([o_t], [x, w], grid_dims=[64, 1, 1], block_dims=[128, 1, 1],
                              forloop_range=64, dimx=64)
            body = g.body.blocks.append(x_t, w_t)
            with ir.InsertionPoint(body):
                tile = lambda *s: ir.RankedTensorType.get(list(s), f16)
                tx = tb.input(tile(16, 64), body.arguments[0], tb.map_attr(i=1))
                tw = tb.input(tile(64, 64), body.arguments[1], {"x": 1, "i": 0})
                tm = tb.matmul(tile(16, 64), tx, tw)
                ax = tb.forloop_accum(tile(16, 1), tb.AccumKind.Rms, tx)
                am = tb.forloop_accum(tile(16, 64), tb.AccumKind.None_, tm)
                to = tb.div(tile(16, 64), am, ax)
                tb.output(to, "<x -> 1>")
            func.ReturnOp([g.result])
    # CHECK: verified: True
    print("verified:", module.operation.verify())
    # CHECK: kn.graph_def (%{{.*}}, %{{.*}}) grid [64, 1, 1] block [128, 1, 1] forloop 64 dimx 64 : (tensor<16x4096xf16>, tensor<4096x4096xf16>) -> tensor<16x4096xf16> {
    # CHECK: tb.input %{{.*}} map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
    # CHECK: tb.input %{{.*}} map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
    # CHECK: tb.forloop_accum rms
    # CHECK: tb.forloop_accum none
    # CHECK: tb.output %{{.*}} map <x -> 1> : tensor<16x64xf16>
    print(module)

    # Text printed by the C++ printer parses back to the same text.
    text = str(module)
    # CHECK: reparsed equal: True
    print("reparsed equal:", str(ir.Module.parse(text)) == text)

    # Verifier diagnostics reach Python with their rule names.
    bad = """
    func.func @bad(%a: tensor<16x64xf16>, %b: tensor<32x8xf16>) -> tensor<16x8xf16> {
      %0 = kn.matmul %a, %b : (tensor<16x64xf16>, tensor<32x8xf16>) -> tensor<16x8xf16>
      return %0 : tensor<16x8xf16>
    }"""
    try:
        ir.Module.parse(bad)
    except ir.MLIRError as e:
        # CHECK: error: [shape] contracted dims differ: lhs dim 1 is 64, rhs dim 0 is 32
        print("error:", e.error_diagnostics[0].message)

    # The C++ scalar printer agrees with format_scalar.
    vals = [1e-06, 2.0, -0.1, 0.5, 1e16, 1e-4, 1e-5, 1 / 3, 123456.789, 3e20, 0.0]
    src = "func.func @c() {\n" + "".join(
        f"  %c{k} = kn.constant {format_scalar(v)} : tensor<1xf32>\n" for k, v in enumerate(vals)
    ) + "  return\n}"
    printed = str(ir.Module.parse(src))
    # CHECK: scalars agree: True
    print("scalars agree:", all(f"kn.constant {format_scalar(v)} :" in printed for v in vals))
