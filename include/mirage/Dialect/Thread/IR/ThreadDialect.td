//===- ThreadDialect.td - the th (thread graph) dialect ----*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_TD
#define MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_TD

include "mlir/IR/OpBase.td"

def Thread_Dialect : Dialect {
  let name = "th";
  let cppNamespace = "::mirage::th";
  let summary = "Mirage thread graph: element-wise chains in registers";
  let description = [{
    The `th` dialect is the lowest level of a μGraph: the body of a
    `tb.thread_graph`, a scalar function (values are `f16`, `bf16` or `f32`
    registers of one thread) applied element-wise between a shared-memory load
    and store. All operands and the result of an op share one scalar type.

    ```mlir
    %r = tb.thread_graph (%a, %b) : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16> {
    ^bb0(%x: f16, %y: f16):
      %q = th.div %x, %y : f16
      %s = th.silu %q : f16
      th.yield %s : f16
    }
    ```
  }];
}

class Thread_Op<string mnemonic, list<Trait> traits = []>
    : Op<Thread_Dialect, mnemonic, traits>;

#endif // MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_TD
