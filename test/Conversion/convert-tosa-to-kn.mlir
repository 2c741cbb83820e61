// RUN: mirage-opt %s --split-input-file --convert-tosa-to-kn | FileCheck %s

// A linear layer as torch-mlir prints it: TOSA's rank-3 matmul with reshapes around
// it folds to one 2-D kn.matmul; the weight stays a function argument.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK: %[[T:.*]] = kn.transpose %[[W]] {permutation = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[M:.*]] = kn.matmul %[[X]], %[[T]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %[[M]]
// CHECK-NOT: tosa.
func.func @linear(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s1 = tosa.const_shape {values = dense<[1, 4, 8]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %s2 = tosa.const_shape {values = dense<[1, 8, 16]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %s3 = tosa.const_shape {values = dense<[4, 16]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %wt = tosa.transpose %w {perms = array<i32: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %a = tosa.reshape %x, %s1 : (tensor<4x8xf32>, !tosa.shape<3>) -> tensor<1x4x8xf32>
  %b = tosa.reshape %wt, %s2 : (tensor<8x16xf32>, !tosa.shape<3>) -> tensor<1x8x16xf32>
  %m = tosa.matmul %a, %b, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x16xf32>
  %r = tosa.reshape %m, %s3 : (tensor<1x4x16xf32>, !tosa.shape<2>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// RMSNorm (with eps) times a gain: pow 2 -> square, reduce_sum -> reduction, the mean's
// 1/n and eps -> kn.constant, rsqrt; the mul's shift operand disappears.
// CHECK-LABEL: func.func @rmsnorm
// CHECK-DAG: %[[N:.*]] = kn.constant 0.125 : tensor<1x1xf32>
// CHECK-DAG: %[[EPS:.*]] = kn.constant 9.999999974752427e-07 : tensor<1x1xf32>
// CHECK: %[[SQ:.*]] = kn.square %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[S:.*]] = kn.reduction %[[SQ]] {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[MEAN:.*]] = kn.mul %[[S]], %[[N]]
// CHECK-NEXT: %[[V:.*]] = kn.add %[[MEAN]], %[[EPS]]
// CHECK-NEXT: %[[R:.*]] = kn.rsqrt %[[V]] : tensor<4x1xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[Y:.*]] = kn.mul %arg0, %[[R]] : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[Z:.*]] = kn.mul %[[Y]], %arg1 : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Z]]
func.func @rmsnorm(%x: tensor<4x8xf32>, %g: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %two = "tosa.const"() <{values = dense<2.0> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %inv = "tosa.const"() <{values = dense<0.125> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %eps = "tosa.const"() <{values = dense<9.99999997E-7> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %0 = tosa.pow %x, %two : (tensor<4x8xf32>, tensor<1x1xf32>) -> tensor<4x8xf32>
  %1 = tosa.reduce_sum %0 {axis = 1 : i32} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = tosa.mul %1, %inv, %shift : (tensor<4x1xf32>, tensor<1x1xf32>, tensor<1xi8>) -> tensor<4x1xf32>
  %3 = tosa.add %2, %eps : (tensor<4x1xf32>, tensor<1x1xf32>) -> tensor<4x1xf32>
  %4 = tosa.rsqrt %3 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = tosa.mul %x, %4, %shift : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<1xi8>) -> tensor<4x8xf32>
  %6 = tosa.mul %5, %g, %shift : (tensor<4x8xf32>, tensor<1x8xf32>, tensor<1xi8>) -> tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}

// -----

// SiLU (x * sigmoid x), softmax's reciprocal (a * 1/b -> a / b), and GELU's erf form.
// CHECK-LABEL: func.func @patterns
// CHECK: %[[S:.*]] = kn.silu %arg0 : tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK: %[[M:.*]] = kn.reduce_max %arg0 {dim = 1 : i64}
// CHECK: %[[D:.*]] = kn.sub %arg0, %[[M]]
// CHECK: %[[E:.*]] = kn.exp %[[D]]
// CHECK: %[[SUM:.*]] = kn.reduction %[[E]] {dim = 1 : i64}
// CHECK: %[[P:.*]] = kn.div %[[E]], %[[SUM]] : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
// CHECK: %[[G:.*]] = kn.gelu %arg0 : tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK-NOT: kn.sigmoid
// CHECK-NOT: tosa.
func.func @patterns(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %half = "tosa.const"() <{values = dense<5.000000e-01> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %one = "tosa.const"() <{values = dense<1.000000e+00> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %isq2 = "tosa.const"() <{values = dense<0.707106769> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %sg = tosa.sigmoid %x : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %silu = tosa.mul %x, %sg, %shift : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<1xi8>) -> tensor<4x16xf32>
  %mx = tosa.reduce_max %x {axis = 1 : i32} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %d = tosa.sub %x, %mx : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %e = tosa.exp %d : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = tosa.reduce_sum %e {axis = 1 : i32} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %r = tosa.reciprocal %s : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %p = tosa.mul %e, %r, %shift : (tensor<4x16xf32>, tensor<4x1xf32>, tensor<1xi8>) -> tensor<4x16xf32>
  %a = tosa.mul %x, %isq2, %shift : (tensor<4x16xf32>, tensor<1x1xf32>, tensor<1xi8>) -> tensor<4x16xf32>
  %er = tosa.erf %a : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %b = tosa.add %er, %one : (tensor<4x16xf32>, tensor<1x1xf32>) -> tensor<4x16xf32>
  %c = tosa.mul %half, %b, %shift : (tensor<1x1xf32>, tensor<4x16xf32>, tensor<1xi8>) -> tensor<4x16xf32>
  %gelu = tosa.mul %x, %c, %shift : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<1xi8>) -> tensor<4x16xf32>
  return %silu, %p, %gelu : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// pow by 0.5 -> sqrt, by -0.5 -> rsqrt; tanh -> 2 sigmoid(2x) - 1.
// CHECK-LABEL: func.func @powers
// CHECK: kn.sqrt %arg0
// CHECK: kn.rsqrt %arg0
// CHECK: kn.sigmoid
// CHECK-NOT: tosa.
func.func @powers(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %h = "tosa.const"() <{values = dense<5.000000e-01> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %mh = "tosa.const"() <{values = dense<-5.000000e-01> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
  %0 = tosa.pow %x, %h : (tensor<2x8xf32>, tensor<1x1xf32>) -> tensor<2x8xf32>
  %1 = tosa.pow %x, %mh : (tensor<2x8xf32>, tensor<1x1xf32>) -> tensor<2x8xf32>
  %2 = tosa.tanh %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0, %1, %2 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// An op kn cannot express stays TOSA; the kn runs around it are outlined and called.
// CHECK-LABEL: func.func @partial_kn0
// CHECK: kn.exp %arg0
// CHECK-LABEL: func.func @partial_kn2
// CHECK: kn.mul
// CHECK-LABEL: func.func @partial(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[A:.*]] = call @partial_kn0(%arg0)
// CHECK: %[[L:.*]] = tosa.log %[[A]]
// CHECK: %[[B:.*]] = call @partial_kn2(%[[L]], %[[A]])
// CHECK: return %[[B]]
func.func @partial(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %0 = tosa.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = tosa.log %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = tosa.mul %1, %0, %shift : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<1xi8>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
