// RUN: mirage-opt %s --split-input-file | mirage-opt --split-input-file | FileCheck %s

// The example of docs/ir.md.
// CHECK-LABEL: func.func @rmsnorm_linear
// CHECK-SAME: (%[[X:.*]]: tensor<16x4096xf16>, %[[G:.*]]: tensor<1x4096xf16>, %[[W:.*]]: tensor<4096x6144xf16>)
func.func @rmsnorm_linear(%x: tensor<16x4096xf16>, %g: tensor<1x4096xf16>,
                          %w: tensor<4096x6144xf16>) -> tensor<16x6144xf16> {
  // CHECK: %[[N:.*]] = kn.rms_norm %[[X]] {normalized_shape = array<i64: 4096>} : tensor<16x4096xf16> -> tensor<16x4096xf16>
  %0 = kn.rms_norm %x {normalized_shape = array<i64: 4096>} : tensor<16x4096xf16> -> tensor<16x4096xf16>
  // CHECK: %[[M:.*]] = kn.mul %[[N]], %[[G]] : (tensor<16x4096xf16>, tensor<1x4096xf16>) -> tensor<16x4096xf16>
  %1 = kn.mul %0, %g : (tensor<16x4096xf16>, tensor<1x4096xf16>) -> tensor<16x4096xf16>
  // CHECK: %[[R:.*]] = kn.matmul %[[M]], %[[W]] : (tensor<16x4096xf16>, tensor<4096x6144xf16>) -> tensor<16x6144xf16>
  %2 = kn.matmul %1, %w : (tensor<16x4096xf16>, tensor<4096x6144xf16>) -> tensor<16x6144xf16>
  // CHECK: return %[[R]] : tensor<16x6144xf16>
  return %2 : tensor<16x6144xf16>
}

// -----

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x16x64xbf16>, %b: tensor<64xbf16>, %c: tensor<16x1xbf16>) -> tensor<2x16x64xbf16> {
  // CHECK: kn.add %{{.*}}, %{{.*}} : (tensor<2x16x64xbf16>, tensor<64xbf16>) -> tensor<2x16x64xbf16>
  %0 = kn.add %a, %b : (tensor<2x16x64xbf16>, tensor<64xbf16>) -> tensor<2x16x64xbf16>
  // CHECK: kn.sub %{{.*}}, %{{.*}} : (tensor<16x1xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
  %1 = kn.sub %c, %0 : (tensor<16x1xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
  // CHECK: kn.mul %{{.*}}, %{{.*}} : (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
  %2 = kn.mul %1, %1 : (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16>
  // CHECK: kn.div %{{.*}}, %{{.*}} : (tensor<2x16x64xbf16>, tensor<16x1xbf16>) -> tensor<2x16x64xbf16>
  %3 = kn.div %2, %c : (tensor<2x16x64xbf16>, tensor<16x1xbf16>) -> tensor<2x16x64xbf16>
  // CHECK: kn.exp %{{.*}} : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  %4 = kn.exp %3 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.sqrt
  %5 = kn.sqrt %4 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.rsqrt
  %6 = kn.rsqrt %5 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.square
  %7 = kn.square %6 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.silu
  %8 = kn.silu %7 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.gelu
  %9 = kn.gelu %8 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.relu
  %10 = kn.relu %9 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  // CHECK: kn.sigmoid %{{.*}} : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  %11 = kn.sigmoid %10 : tensor<2x16x64xbf16> -> tensor<2x16x64xbf16>
  return %11 : tensor<2x16x64xbf16>
}

// -----

// Scalars print in the shortest exact form with a `.` (Python repr style).
// CHECK-LABEL: func.func @constants
func.func @constants() {
  // CHECK: kn.constant 1.0e-06 : tensor<16x1xf32>
  %0 = kn.constant 1.0e-06 : tensor<16x1xf32>
  // CHECK: kn.constant 2.0 : tensor<4xf16>
  %1 = kn.constant 2.0 : tensor<4xf16>
  // CHECK: kn.constant -0.1 : tensor<4xf32>
  %2 = kn.constant -0.1 : tensor<4xf32>
  // CHECK: kn.constant 0.0001 : tensor<4xf32>
  %3 = kn.constant 1.0e-4 : tensor<4xf32>
  // CHECK: kn.constant 1.0e+16 : tensor<4xf32>
  %4 = kn.constant 10000000000000000.0 : tensor<4xf32>
  // CHECK: kn.constant 0.3333333333333333 : tensor<4xf32>
  %5 = kn.constant 0.3333333333333333 : tensor<4xf32>
  return
}

// -----

// CHECK-LABEL: func.func @layout_and_reductions
func.func @layout_and_reductions(%a: tensor<2x16x64xf32>, %b: tensor<2x16x32xf32>) {
  // CHECK: kn.reduction %{{.*}} {dim = 1 : i64} : tensor<2x16x64xf32> -> tensor<2x1x64xf32>
  %0 = kn.reduction %a {dim = 1 : i64} : tensor<2x16x64xf32> -> tensor<2x1x64xf32>
  // CHECK: kn.reduce_max %{{.*}} {dim = 2 : i64} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %1 = kn.reduce_max %a {dim = 2 : i64} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  // CHECK: kn.concat %{{.*}}, %{{.*}} {dim = 2 : i64} : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x96xf32>
  %2 = kn.concat %a, %b {dim = 2 : i64} : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x96xf32>
  // CHECK: kn.reshape %{{.*}} : tensor<2x16x64xf32> -> tensor<32x64xf32>
  %3 = kn.reshape %a : tensor<2x16x64xf32> -> tensor<32x64xf32>
  // CHECK: kn.transpose %{{.*}} {permutation = array<i64: 0, 2, 1>} : tensor<2x16x64xf32> -> tensor<2x64x16xf32>
  %4 = kn.transpose %a {permutation = array<i64: 0, 2, 1>} : tensor<2x16x64xf32> -> tensor<2x64x16xf32>
  // CHECK: kn.repeat %{{.*}} {repeats = array<i64: 1, 4, 1>} : tensor<2x16x64xf32> -> tensor<2x64x64xf32>
  %5 = kn.repeat %a {repeats = array<i64: 1, 4, 1>} : tensor<2x16x64xf32> -> tensor<2x64x64xf32>
  // CHECK: kn.matmul %{{.*}}, %{{.*}} : (tensor<2x16x64xf32>, tensor<2x64x16xf32>) -> tensor<2x16x16xf32>
  %6 = kn.matmul %a, %4 : (tensor<2x16x64xf32>, tensor<2x64x16xf32>) -> tensor<2x16x16xf32>
  return
}

// -----

// The graph-defined kernel example of docs/ir.md (RMSNorm + Linear).
// CHECK-LABEL: func.func @graph_def
// CHECK-SAME: (%[[X:.*]]: tensor<16x4096xf16>, %[[W:.*]]: tensor<4096x4096xf16>)
func.func @graph_def(%x: tensor<16x4096xf16>, %w: tensor<4096x4096xf16>) -> tensor<16x4096xf16> {
  // CHECK: %[[O:.*]] = kn.graph_def (%[[X]], %[[W]]) grid [64, 1, 1] block [128, 1, 1] forloop 64 dimx 64 : (tensor<16x4096xf16>, tensor<4096x4096xf16>) -> tensor<16x4096xf16> {
  // CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<16x4096xf16>, %[[A1:.*]]: tensor<4096x4096xf16>):
  // CHECK-NEXT: %[[TX:.*]] = tb.input %[[A0]] map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
  // CHECK-NEXT: %[[TW:.*]] = tb.input %[[A1]] map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
  // CHECK-NEXT: %[[TM:.*]] = tb.matmul %[[TX]], %[[TW]] : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
  // CHECK-NEXT: %[[AX:.*]] = tb.forloop_accum rms %[[TX]] : tensor<16x64xf16> -> tensor<16x1xf16>
  // CHECK-NEXT: %[[AM:.*]] = tb.forloop_accum none %[[TM]] : tensor<16x64xf16> -> tensor<16x64xf16>
  // CHECK-NEXT: %[[TO:.*]] = tb.div %[[AM]], %[[AX]] : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16>
  // CHECK-NEXT: tb.output %[[TO]] map <x -> 1> : tensor<16x64xf16>
  // CHECK-NEXT: }
  %o = kn.graph_def (%x, %w) grid [64, 1, 1] block [128, 1, 1] forloop 64 dimx 64
      : (tensor<16x4096xf16>, tensor<4096x4096xf16>) -> tensor<16x4096xf16> {
  ^bb0(%a0: tensor<16x4096xf16>, %a1: tensor<4096x4096xf16>):
    %tx = tb.input %a0 map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
    %tw = tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
    %tm = tb.matmul %tx, %tw : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
    %ax = tb.forloop_accum rms %tx : tensor<16x64xf16> -> tensor<16x1xf16>
    %am = tb.forloop_accum none %tm : tensor<16x64xf16> -> tensor<16x64xf16>
    %to = tb.div %am, %ax : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16>
    tb.output %to map <x -> 1> : tensor<16x64xf16>
  }
  // CHECK: return %[[O]] : tensor<16x4096xf16>
  return %o : tensor<16x4096xf16>
}

// -----

// Two results, no for-loop, a replicated input (`map <>`), strided input, and a
// precision change on the result.
// CHECK-LABEL: func.func @graph_def_two_outputs
// CHECK-SAME: {kn.strides = array<i64: 64, 1>}
func.func @graph_def_two_outputs(%a: tensor<8x64xf16> {kn.strides = array<i64: 64, 1>}, %b: tensor<1x64xf16>)
    -> (tensor<8x64xf32>, tensor<8x1xf16>) {
  // CHECK: kn.graph_def (%{{.*}}, %{{.*}}) grid [8, 1, 1] block [32, 1, 1] forloop 1 dimx 1 : (tensor<8x64xf16>, tensor<1x64xf16>) -> (tensor<8x64xf32>, tensor<8x1xf16>) {
  // CHECK: tb.input %{{.*}} map <> : tensor<1x64xf16> -> tensor<1x64xf16>
  // CHECK: tb.forloop_accum none %{{.*}} : tensor<1x64xf16> -> tensor<1x64xf32>
  // CHECK: tb.output %{{.*}} map <x -> 0> : tensor<1x64xf32>
  // CHECK: tb.output %{{.*}} map <x -> 0> : tensor<1x1xf16>
  %r:2 = kn.graph_def (%a, %b) grid [8, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<8x64xf16>, tensor<1x64xf16>) -> (tensor<8x64xf32>, tensor<8x1xf16>) {
  ^bb0(%a0: tensor<8x64xf16>, %a1: tensor<1x64xf16>):
    %ta = tb.input %a0 map <x -> 0> : tensor<8x64xf16> -> tensor<1x64xf16>
    %tb = tb.input %a1 map <> : tensor<1x64xf16> -> tensor<1x64xf16>
    %m = tb.mul %ta, %tb : (tensor<1x64xf16>, tensor<1x64xf16>) -> tensor<1x64xf16>
    %f = tb.forloop_accum none %m : tensor<1x64xf16> -> tensor<1x64xf32>
    %s = tb.reduction %m {dim = 1 : i64} : tensor<1x64xf16> -> tensor<1x1xf16>
    tb.output %f map <x -> 0> : tensor<1x64xf32>
    tb.output %s map <x -> 0> : tensor<1x1xf16>
  }
  return %r#0, %r#1 : tensor<8x64xf32>, tensor<8x1xf16>
}

// -----

// Mirage's clamp, pow and mul_scalar at the kernel level; the scalars print in the
// shortest exact form.
// CHECK-LABEL: func.func @clamp_pow_mul_scalar
func.func @clamp_pow_mul_scalar(%a: tensor<16x64xf16>, %b: tensor<1x64xf16>) -> tensor<16x64xf16> {
  // CHECK: %[[C:.*]] = kn.clamp %{{.*}} min -1.5 max 6.0 : tensor<16x64xf16> -> tensor<16x64xf16>
  %c = kn.clamp %a min -1.5 max 6.0 : tensor<16x64xf16> -> tensor<16x64xf16>
  // CHECK: %[[P:.*]] = kn.pow %[[C]], %{{.*}} : (tensor<16x64xf16>, tensor<1x64xf16>) -> tensor<16x64xf16>
  %p = kn.pow %c, %b : (tensor<16x64xf16>, tensor<1x64xf16>) -> tensor<16x64xf16>
  // CHECK: kn.mul_scalar %[[P]], 1.0e-06 : tensor<16x64xf16> -> tensor<16x64xf16>
  %m = kn.mul_scalar %p, 0.000001 : tensor<16x64xf16> -> tensor<16x64xf16>
  return %m : tensor<16x64xf16>
}
