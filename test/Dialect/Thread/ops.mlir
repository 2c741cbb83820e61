// RUN: mirage-opt %s --split-input-file | mirage-opt --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @scalar_ops
func.func @scalar_ops(%x: tensor<4x8xbf16>, %y: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %o:2 = kn.graph_def (%x, %y) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  ^bb0(%x0: tensor<4x8xbf16>, %y0: tensor<4x8xbf16>):
    %a = tb.input %x0 map <> : tensor<4x8xbf16> -> tensor<4x8xbf16>
    %b = tb.input %y0 map <> : tensor<4x8xbf16> -> tensor<4x8xbf16>
    %r:2 = tb.thread_graph (%a, %b) : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
    ^bb0(%p: bf16, %q: bf16):
      // CHECK: %[[C:.*]] = th.constant 2.0 : bf16
      %c = th.constant 2.0 : bf16
      // CHECK: th.add %{{.*}}, %[[C]] : bf16
      %0 = th.add %p, %c : bf16
      // CHECK: th.sub %{{.*}}, %{{.*}} : bf16
      %1 = th.sub %0, %q : bf16
      // CHECK: th.mul %{{.*}}, %{{.*}} : bf16
      %2 = th.mul %1, %1 : bf16
      // CHECK: th.div %{{.*}}, %{{.*}} : bf16
      %3 = th.div %2, %q : bf16
      // CHECK: th.exp %{{.*}} : bf16
      %4 = th.exp %3 : bf16
      // CHECK: th.sqrt %{{.*}} : bf16
      %5 = th.sqrt %4 : bf16
      // CHECK: th.rsqrt %{{.*}} : bf16
      %6 = th.rsqrt %5 : bf16
      // CHECK: th.square %{{.*}} : bf16
      %7 = th.square %6 : bf16
      // CHECK: th.silu %{{.*}} : bf16
      %8 = th.silu %7 : bf16
      // CHECK: th.gelu %{{.*}} : bf16
      %9 = th.gelu %8 : bf16
      // CHECK: th.relu %{{.*}} : bf16
      %10 = th.relu %9 : bf16
      // CHECK: th.sigmoid %{{.*}} : bf16
      %11 = th.sigmoid %10 : bf16
      // CHECK: th.yield %{{.*}}, %{{.*}} : bf16, bf16
      th.yield %11, %0 : bf16, bf16
    }
    tb.output %r#0 map <> : tensor<4x8xbf16>
    tb.output %r#1 map <> : tensor<4x8xbf16>
  }
  return %o#0, %o#1 : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// CHECK-LABEL: func.func @f32_constant
func.func @f32_constant(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %o = kn.graph_def (%x) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x0: tensor<4x8xf32>):
    %a = tb.input %x0 map <> : tensor<4x8xf32> -> tensor<4x8xf32>
    %r = tb.thread_graph (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
    ^bb0(%p: f32):
      // CHECK: th.constant 1.0e-06 : f32
      %c = th.constant 1.0e-06 : f32
      %0 = th.add %p, %c : f32
      th.yield %0 : f32
    }
    tb.output %r map <> : tensor<4x8xf32>
  }
  return %o : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @clamp_pow_mul_scalar
func.func @clamp_pow_mul_scalar(%x: tensor<4x8xf16>, %y: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %o = kn.graph_def (%x, %y) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16> {
  ^bb0(%x0: tensor<4x8xf16>, %y0: tensor<4x8xf16>):
    %a = tb.input %x0 map <> : tensor<4x8xf16> -> tensor<4x8xf16>
    %b = tb.input %y0 map <> : tensor<4x8xf16> -> tensor<4x8xf16>
    %r = tb.thread_graph (%a, %b) : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16> {
    ^bb0(%p: f16, %q: f16):
      // CHECK: %[[C:.*]] = th.clamp %{{.*}} min 0.0 max 6.0 : f16
      %0 = th.clamp %p min 0.0 max 6.0 : f16
      // CHECK: %[[P:.*]] = th.pow %[[C]], %{{.*}} : f16
      %1 = th.pow %0, %q : f16
      // CHECK: th.mul_scalar %[[P]], 0.125 : f16
      %2 = th.mul_scalar %1, 0.125 : f16
      th.yield %2 : f16
    }
    tb.output %r map <> : tensor<4x8xf16>
  }
  return %o : tensor<4x8xf16>
}
