// Upstream mlir-opt with the mirage dialect plugin parses, verifies and prints
// the same inputs as mirage-opt (the roundtrip tests of test/Dialect).
// REQUIRES: plugin
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Kernel/ops.mlir --split-input-file | mlir-opt --load-dialect-plugin=%dialect_plugin --split-input-file | FileCheck %S/../Dialect/Kernel/ops.mlir
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Block/ops.mlir --split-input-file | mlir-opt --load-dialect-plugin=%dialect_plugin --split-input-file | FileCheck %S/../Dialect/Block/ops.mlir
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Thread/ops.mlir --split-input-file | mlir-opt --load-dialect-plugin=%dialect_plugin --split-input-file | FileCheck %S/../Dialect/Thread/ops.mlir
// Generic form roundtrips too.
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Block/ops.mlir --split-input-file --mlir-print-op-generic | mlir-opt --load-dialect-plugin=%dialect_plugin --split-input-file | FileCheck %S/../Dialect/Block/ops.mlir
// And this file's own check:
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %s | FileCheck %s

// CHECK-LABEL: func.func @plugin
// CHECK: kn.graph_def (%{{.*}}) grid [4, 1, 1] block [128, 1, 1] forloop 2 dimx 1
// CHECK: tb.input %{{.*}} map <x -> 0, i -> 1> : tensor<16x64xf16> -> tensor<4x32xf16>
// CHECK: tb.forloop_accum sum %{{.*}} : tensor<4x32xf16> -> tensor<4x1xf16>
module attributes {kn.smem_capacity = 49152 : i64} {
  func.func @plugin(%a: tensor<16x64xf16>) -> tensor<16x1xf16> {
    %o = kn.graph_def (%a) grid [4, 1, 1] block [128, 1, 1] forloop 2 dimx 1
        : (tensor<16x64xf16>) -> tensor<16x1xf16> {
    ^bb0(%a0: tensor<16x64xf16>):
      %t = tb.input %a0 map <x -> 0, i -> 1> : tensor<16x64xf16> -> tensor<4x32xf16>
      %s = tb.forloop_accum sum %t : tensor<4x32xf16> -> tensor<4x1xf16>
      tb.output %s map <x -> 0> : tensor<4x1xf16>
    }
    return %o : tensor<16x1xf16>
  }
}
