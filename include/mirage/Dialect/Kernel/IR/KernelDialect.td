//===- KernelDialect.td - the kn (kernel graph) dialect ----*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_TD
#define MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_TD

include "mlir/IR/OpBase.td"

def Kernel_Dialect : Dialect {
  let name = "kn";
  let cppNamespace = "::mirage::kn";
  let summary = "Mirage kernel graph: kernels over device tensors";
  let description = [{
    The `kn` dialect is the top level of a μGraph (Mirage, OSDI'25, §2). Its values
    are device tensors (builtin static `tensor<...>` of `f16`, `bf16` or `f32`) and
    its ops are pre-defined kernels (matmul, element-wise, reductions, rms_norm,
    concat, ...) plus the graph-defined kernel `kn.graph_def`, whose body is a block
    graph in the `tb` dialect.

    A μGraph is a `func.func` whose body holds `kn` ops:

    ```mlir
    func.func @rmsnorm_linear(%x: tensor<16x4096xf16>, %g: tensor<1x4096xf16>,
                              %w: tensor<4096x6144xf16>) -> tensor<16x6144xf16> {
      %0 = kn.rms_norm %x {normalized_shape = array<i64: 4096>} : tensor<16x4096xf16> -> tensor<16x4096xf16>
      %1 = kn.mul %0, %g : (tensor<16x4096xf16>, tensor<1x4096xf16>) -> tensor<16x4096xf16>
      %2 = kn.matmul %1, %w : (tensor<16x4096xf16>, tensor<4096x6144xf16>) -> tensor<16x6144xf16>
      return %2 : tensor<16x6144xf16>
    }
    ```

    Verifier diagnostics start with the validity rule's name in brackets, e.g.
    `[shape]`, `[dtype]`, `[launch]`, `[accumulator]`, `[smem]` (see docs/ir.md).
    The shared-memory capacity used by `[smem]` is the integer attribute
    `kn.smem_capacity` on the enclosing `builtin.module` (default 232448 bytes).
  }];
  let dependentDialects = ["::mirage::tb::BlockDialect"];
}

class Kernel_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kernel_Dialect, mnemonic, traits>;

#endif // MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_TD
