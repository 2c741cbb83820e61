// Upstream mlir-opt with the mirage dialect plugin reports the same verifier
// diagnostics as mirage-opt (the invalid tests of test/Dialect), plus the
// module-level shared-memory capacity below.
// REQUIRES: plugin
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Kernel/invalid.mlir --split-input-file --verify-diagnostics
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Block/invalid.mlir --split-input-file --verify-diagnostics
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %S/../Dialect/Thread/invalid.mlir --split-input-file --verify-diagnostics
// RUN: mlir-opt --load-dialect-plugin=%dialect_plugin %s --split-input-file --verify-diagnostics
// A wrong expectation must fail (the diagnostics are really checked):
// RUN: sed 's/\[shape\] contracted/[shape] NOT-THIS/' %S/../Dialect/Kernel/invalid.mlir > %t.mlir
// RUN: not mlir-opt --load-dialect-plugin=%dialect_plugin %t.mlir --split-input-file --verify-diagnostics 2>&1 | FileCheck %s --check-prefix=WRONG
// WRONG: expected error "[shape] NOT-THIS

// kn.smem_capacity on the module overrides the default 232448 bytes:
// 16x64xf32 (4096 B) + 16x64xf32 (4096 B) > 6000 B.
module attributes {kn.smem_capacity = 6000 : i64} {
  func.func @smem_capacity(%a: tensor<16x64xf32>) -> tensor<16x64xf32> {
    // expected-error @+1 {{[smem] the block graph's tiles need 8192 bytes of shared memory, more than the capacity of 6000 bytes}}
    %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
        : (tensor<16x64xf32>) -> tensor<16x64xf32> {
    ^bb0(%a0: tensor<16x64xf32>):
      %t = tb.input %a0 map <> : tensor<16x64xf32> -> tensor<16x64xf32>
      %e = tb.exp %t : tensor<16x64xf32> -> tensor<16x64xf32>
      tb.output %e map <> : tensor<16x64xf32>
    }
    return %o : tensor<16x64xf32>
  }
}

// -----

// With forloop > 1, two accumulators on one path are invalid.
func.func @two_accumulators(%a: tensor<16x64xf32>) -> tensor<16x1xf32> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 2 dimx 1
      : (tensor<16x64xf32>) -> tensor<16x1xf32> {
  ^bb0(%a0: tensor<16x64xf32>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x64xf32> -> tensor<16x32xf32>
    %s = tb.forloop_accum none %t : tensor<16x32xf32> -> tensor<16x32xf32>
    // expected-error @+1 {{[accumulator] a path from a tb.input passes two tb.forloop_accum ops}}
    %u = tb.forloop_accum sum %s : tensor<16x32xf32> -> tensor<16x1xf32>
    tb.output %u map <> : tensor<16x1xf32>
  }
  return %o : tensor<16x1xf32>
}

// -----

func.func @input_not_region_arg(%a: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf32>) -> tensor<16x64xf32> {
  ^bb0(%a0: tensor<16x64xf32>):
    %t = tb.input %a0 map <> : tensor<16x64xf32> -> tensor<16x64xf32>
    // expected-error @+1 {{[map] tb.input must read a region argument of the enclosing kn.graph_def}}
    %u = tb.input %t map <> : tensor<16x64xf32> -> tensor<16x64xf32>
    tb.output %u map <> : tensor<16x64xf32>
  }
  return %o : tensor<16x64xf32>
}

// -----

func.func @output_result_shape(%a: tensor<16x64xf32>) -> tensor<16x32xf32> {
  %o = kn.graph_def (%a) grid [2, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf32>) -> tensor<16x32xf32> {
  ^bb0(%a0: tensor<16x64xf32>):
    %t = tb.input %a0 map <x -> 1> : tensor<16x64xf32> -> tensor<16x32xf32>
    // expected-error @+1 {{[omap] kernel result #0 has shape [16, 32] but tb.output #0 of tile [16, 32] writes [16, 64]}}
    tb.output %t map <x -> 1> : tensor<16x32xf32>
  }
  return %o : tensor<16x32xf32>
}

// -----

func.func @launch_outputs(%a: tensor<16x64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>) {
  // expected-error @+1 {{[launch] the body has 1 tb.output ops but the kernel has 2 results}}
  %o:2 = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>) {
  ^bb0(%a0: tensor<16x64xf32>):
    %t = tb.input %a0 map <> : tensor<16x64xf32> -> tensor<16x64xf32>
    tb.output %t map <> : tensor<16x64xf32>
  }
  return %o#0, %o#1 : tensor<16x64xf32>, tensor<16x64xf32>
}

// -----

func.func @thread_graph_yield(%a: tensor<4xf16>) -> tensor<4xf32> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4xf16>) -> tensor<4xf32> {
  ^bb0(%a0: tensor<4xf16>):
    %t = tb.input %a0 map <> : tensor<4xf16> -> tensor<4xf16>
    %r = tb.thread_graph (%t) : (tensor<4xf16>) -> tensor<4xf32> {
    ^bb0(%x: f16):
      // expected-error @+1 {{[dtype] yielded value #0 has type 'f16' but result #0 has element type 'f32'}}
      th.yield %x : f16
    }
    tb.output %r map <> : tensor<4xf32>
  }
  return %o : tensor<4xf32>
}

// -----

func.func @bad_map_attr(%a: tensor<4xf16>) -> tensor<4xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4xf16>) -> tensor<4xf16> {
  ^bb0(%a0: tensor<4xf16>):
    // expected-error @+1 {{[map] dim 'x' is mapped twice}}
    %t = tb.input %a0 map <x -> 0, x -> 0> : tensor<4xf16> -> tensor<4xf16>
    tb.output %t map <> : tensor<4xf16>
  }
  return %o : tensor<4xf16>
}
