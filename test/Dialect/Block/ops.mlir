// RUN: mirage-opt %s --split-input-file | mirage-opt --split-input-file | FileCheck %s

// Maps over all grid dims and the for-loop dim; the order of entries is x, y, z, i.
// CHECK-LABEL: func.func @maps
func.func @maps(%a: tensor<8x64x256xf16>) -> tensor<8x64x256xf16> {
  %o = kn.graph_def (%a) grid [2, 4, 8] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<8x64x256xf16>) -> tensor<8x64x256xf16> {
  ^bb0(%a0: tensor<8x64x256xf16>):
    // CHECK: tb.input %{{.*}} map <x -> 0, y -> 1, z -> 2, i -> 2> : tensor<8x64x256xf16> -> tensor<4x16x8xf16>
    %t = tb.input %a0 map <x -> 0, y -> 1, z -> 2, i -> 2> : tensor<8x64x256xf16> -> tensor<4x16x8xf16>
    // CHECK: tb.output %{{.*}} map <x -> 0, y -> 1, z -> 2, i -> 2> : tensor<4x16x8xf16>
    tb.output %t map <x -> 0, y -> 1, z -> 2, i -> 2> : tensor<4x16x8xf16>
  }
  return %o : tensor<8x64x256xf16>
}

// -----

// Every accumulator kind; compute ops on tiles.
// CHECK-LABEL: func.func @accumulators
func.func @accumulators(%a: tensor<16x1024xf32>, %b: tensor<16x1024xf32>)
    -> (tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %r:6 = kn.graph_def (%a, %b) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<16x1024xf32>, tensor<16x1024xf32>)
      -> (tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  ^bb0(%a0: tensor<16x1024xf32>, %a1: tensor<16x1024xf32>):
    %x = tb.input %a0 map <i -> 1> : tensor<16x1024xf32> -> tensor<16x256xf32>
    %y = tb.input %a1 map <i -> 1> : tensor<16x1024xf32> -> tensor<16x256xf32>
    // CHECK: tb.sub %{{.*}}, %{{.*}} : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
    %d = tb.sub %x, %y : (tensor<16x256xf32>, tensor<16x256xf32>) -> tensor<16x256xf32>
    // CHECK: tb.forloop_accum sum %{{.*}} : tensor<16x256xf32> -> tensor<16x1xf32>
    %s = tb.forloop_accum sum %d : tensor<16x256xf32> -> tensor<16x1xf32>
    // CHECK: tb.forloop_accum mean %{{.*}} : tensor<16x256xf32> -> tensor<16x1xf32>
    %m = tb.forloop_accum mean %x : tensor<16x256xf32> -> tensor<16x1xf32>
    // CHECK: tb.forloop_accum rms %{{.*}} : tensor<16x256xf32> -> tensor<16x1xf32>
    %q = tb.forloop_accum rms %y : tensor<16x256xf32> -> tensor<16x1xf32>
    // CHECK: tb.reduction_to_dimx %{{.*}} : tensor<16x256xf32> -> tensor<16x64xf32>
    %rd = tb.reduction_to_dimx %x : tensor<16x256xf32> -> tensor<16x64xf32>
    // CHECK: tb.forloop_accum max %{{.*}} : tensor<16x64xf32> -> tensor<16x64xf32>
    %mx = tb.forloop_accum max %rd : tensor<16x64xf32> -> tensor<16x64xf32>
    // CHECK: tb.forloop_accum sum_todimx %{{.*}} : tensor<16x256xf32> -> tensor<16x64xf32>
    %sd = tb.forloop_accum sum_todimx %y : tensor<16x256xf32> -> tensor<16x64xf32>
    // CHECK: tb.exp %{{.*}} : tensor<16x256xf32> -> tensor<16x256xf32>
    %e = tb.exp %x : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.sqrt
    %e1 = tb.sqrt %e : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.rsqrt
    %e2 = tb.rsqrt %e1 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.square
    %e3 = tb.square %e2 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.silu
    %e4 = tb.silu %e3 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.gelu
    %e5 = tb.gelu %e4 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.relu
    %e6 = tb.relu %e5 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.sigmoid %{{.*}} : tensor<16x256xf32> -> tensor<16x256xf32>
    %e7 = tb.sigmoid %e6 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.rms_norm %{{.*}} : tensor<16x256xf32> -> tensor<16x256xf32>
    %n = tb.rms_norm %e7 : tensor<16x256xf32> -> tensor<16x256xf32>
    // CHECK: tb.reduction %{{.*}} {dim = 1 : i64} : tensor<16x256xf32> -> tensor<16x1xf32>
    %rs = tb.reduction %n {dim = 1 : i64} : tensor<16x256xf32> -> tensor<16x1xf32>
    // CHECK: tb.reduce_max %{{.*}} {dim = 0 : i64} : tensor<16x256xf32> -> tensor<1x256xf32>
    %rm = tb.reduce_max %n {dim = 0 : i64} : tensor<16x256xf32> -> tensor<1x256xf32>
    // CHECK: tb.forloop_accum none %{{.*}} : tensor<16x1xf32> -> tensor<16x1xf32>
    %an = tb.forloop_accum none %rs : tensor<16x1xf32> -> tensor<16x1xf32>
    // CHECK: tb.constant 0.5 : tensor<16x1xf32>
    %c = tb.constant 0.5 : tensor<16x1xf32>
    // CHECK: tb.mul %{{.*}}, %{{.*}} : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
    %h = tb.mul %an, %c : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
    // CHECK: tb.add
    %h2 = tb.add %h, %s : (tensor<16x1xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
    // CHECK: tb.div
    %h3 = tb.div %sd, %q : (tensor<16x64xf32>, tensor<16x1xf32>) -> tensor<16x64xf32>
    tb.output %h2 map <> : tensor<16x1xf32>
    tb.output %m map <> : tensor<16x1xf32>
    tb.output %q map <> : tensor<16x1xf32>
    tb.output %mx map <> : tensor<16x64xf32>
    tb.output %sd map <> : tensor<16x64xf32>
    tb.output %h3 map <> : tensor<16x64xf32>
  }
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x1xf32>, tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}

// -----

// A matmul with a for-loop over K, tb.concat, and an output saved every
// iteration (maps i: no accumulator).
// CHECK-LABEL: func.func @matmul_concat
func.func @matmul_concat(%a: tensor<2x64x128xf16>, %b: tensor<2x128x32xf16>)
    -> (tensor<2x64x64xf16>, tensor<2x64x128xf16>) {
  %r:2 = kn.graph_def (%a, %b) grid [2, 1, 1] block [128, 1, 1] forloop 2 dimx 1
      : (tensor<2x64x128xf16>, tensor<2x128x32xf16>) -> (tensor<2x64x64xf16>, tensor<2x64x128xf16>) {
  ^bb0(%a0: tensor<2x64x128xf16>, %a1: tensor<2x128x32xf16>):
    %ta = tb.input %a0 map <x -> 0, i -> 2> : tensor<2x64x128xf16> -> tensor<1x64x64xf16>
    %tb = tb.input %a1 map <x -> 0, i -> 1> : tensor<2x128x32xf16> -> tensor<1x64x32xf16>
    // CHECK: tb.matmul %{{.*}}, %{{.*}} : (tensor<1x64x64xf16>, tensor<1x64x32xf16>) -> tensor<1x64x32xf16>
    %m = tb.matmul %ta, %tb : (tensor<1x64x64xf16>, tensor<1x64x32xf16>) -> tensor<1x64x32xf16>
    %acc = tb.forloop_accum none %m : tensor<1x64x32xf16> -> tensor<1x64x32xf16>
    // CHECK: tb.concat %{{.*}}, %{{.*}} {dim = 2 : i64} : (tensor<1x64x32xf16>, tensor<1x64x32xf16>) -> tensor<1x64x64xf16>
    %c = tb.concat %acc, %acc {dim = 2 : i64} : (tensor<1x64x32xf16>, tensor<1x64x32xf16>) -> tensor<1x64x64xf16>
    tb.output %c map <x -> 0> : tensor<1x64x64xf16>
    // CHECK: tb.output %{{.*}} map <x -> 0, i -> 2> : tensor<1x64x64xf16>
    tb.output %ta map <x -> 0, i -> 2> : tensor<1x64x64xf16>
  }
  return %r#0, %r#1 : tensor<2x64x64xf16>, tensor<2x64x128xf16>
}

// -----

// The thread-graph example of docs/ir.md.
// CHECK-LABEL: func.func @thread_graph
func.func @thread_graph(%x: tensor<16x64xf16>, %y: tensor<16x1xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%x, %y) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16> {
  ^bb0(%x0: tensor<16x64xf16>, %y0: tensor<16x1xf16>):
    %a = tb.input %x0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    %b = tb.input %y0 map <> : tensor<16x1xf16> -> tensor<16x1xf16>
    // CHECK: %[[R:.*]] = tb.thread_graph (%[[A:.*]], %[[B:.*]]) : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16> {
    // CHECK-NEXT: ^bb0(%[[P:.*]]: f16, %[[Q:.*]]: f16):
    // CHECK-NEXT: %[[D:.*]] = th.div %[[P]], %[[Q]] : f16
    // CHECK-NEXT: %[[S:.*]] = th.silu %[[D]] : f16
    // CHECK-NEXT: th.yield %[[S]] : f16
    // CHECK-NEXT: }
    %r = tb.thread_graph (%a, %b) : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16> {
    ^bb0(%p: f16, %q: f16):
      %d = th.div %p, %q : f16
      %s = th.silu %d : f16
      th.yield %s : f16
    }
    // CHECK: tb.output %[[R]] map <> : tensor<16x64xf16>
    tb.output %r map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// A loop-invariant input (its map has no `i`) may be read after the loop without
// an accumulator, as Mirage's RMSNorm gain: only paths from loop-varying inputs
// must pass exactly one tb.forloop_accum.
// CHECK-LABEL: func.func @loop_invariant_input
func.func @loop_invariant_input(%x: tensor<16x4096xf16>, %g: tensor<16x1xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%x, %g) grid [1, 1, 1] block [128, 1, 1] forloop 64 dimx 1
      : (tensor<16x4096xf16>, tensor<16x1xf16>) -> tensor<16x1xf16> {
  ^bb0(%x0: tensor<16x4096xf16>, %g0: tensor<16x1xf16>):
    %tx = tb.input %x0 map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
    // CHECK: %[[G:.*]] = tb.input %{{.*}} map <> : tensor<16x1xf16> -> tensor<16x1xf16>
    %tg = tb.input %g0 map <> : tensor<16x1xf16> -> tensor<16x1xf16>
    %s = tb.forloop_accum rms %tx : tensor<16x64xf16> -> tensor<16x1xf16>
    // CHECK: tb.mul %{{.*}}, %[[G]]
    %m = tb.mul %s, %tg : (tensor<16x1xf16>, tensor<16x1xf16>) -> tensor<16x1xf16>
    tb.output %m map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

// Online softmax (Mirage's group-query attention with reduction_max and the rescaling
// accumulators), and the element-wise clamp / mul_scalar / pow on tiles.
// CHECK-LABEL: func.func @online_softmax
func.func @online_softmax(%q: tensor<2x64x16xf16>, %k: tensor<2x16x128xf16>, %v: tensor<2x128x16xf16>)
    -> (tensor<2x64x64xf16>, tensor<2x64x4xf16>, tensor<2x64x4xf16>) {
  %o:3 = kn.graph_def (%q, %k, %v) grid [2, 4, 4] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<2x64x16xf16>, tensor<2x16x128xf16>, tensor<2x128x16xf16>)
      -> (tensor<2x64x64xf16>, tensor<2x64x4xf16>, tensor<2x64x4xf16>) {
  ^bb0(%q0: tensor<2x64x16xf16>, %k0: tensor<2x16x128xf16>, %v0: tensor<2x128x16xf16>):
    %bq = tb.input %q0 map <x -> 0, z -> 1> : tensor<2x64x16xf16> -> tensor<1x16x16xf16>
    %bk = tb.input %k0 map <x -> 0, y -> 2, i -> 2> : tensor<2x16x128xf16> -> tensor<1x16x8xf16>
    %bv = tb.input %v0 map <x -> 0, y -> 1, i -> 1> : tensor<2x128x16xf16> -> tensor<1x8x16xf16>
    %a0 = tb.matmul %bq, %bk : (tensor<1x16x16xf16>, tensor<1x16x8xf16>) -> tensor<1x16x8xf16>
    // CHECK: tb.clamp %{{.*}} min -30.0 max 30.0 : tensor<1x16x8xf16> -> tensor<1x16x8xf16>
    %a1 = tb.clamp %a0 min -30.0 max 30.0 : tensor<1x16x8xf16> -> tensor<1x16x8xf16>
    // CHECK: %[[A:.*]] = tb.mul_scalar %{{.*}}, 0.25 : tensor<1x16x8xf16> -> tensor<1x16x8xf16>
    %a = tb.mul_scalar %a1, 0.25 : tensor<1x16x8xf16> -> tensor<1x16x8xf16>
    // CHECK: %[[M:.*]], %[[D:.*]] = tb.reduction_max %[[A]] {dim = 2 : i64} : tensor<1x16x8xf16> -> (tensor<1x16x1xf16>, tensor<1x16x1xf16>)
    %m:2 = tb.reduction_max %a {dim = 2 : i64} : tensor<1x16x8xf16> -> (tensor<1x16x1xf16>, tensor<1x16x1xf16>)
    // CHECK: tb.sub %[[A]], %[[M]] :
    %s = tb.sub %a, %m#0 : (tensor<1x16x8xf16>, tensor<1x16x1xf16>) -> tensor<1x16x8xf16>
    %e = tb.exp %s : tensor<1x16x8xf16> -> tensor<1x16x8xf16>
    // CHECK: %[[R:.*]] = tb.exp %[[D]] :
    %r = tb.exp %m#1 : tensor<1x16x1xf16> -> tensor<1x16x1xf16>
    %p = tb.matmul %e, %bv : (tensor<1x16x8xf16>, tensor<1x8x16xf16>) -> tensor<1x16x16xf16>
    // CHECK: tb.forloop_accum_rescale none %{{.*}}, %[[R]] : (tensor<1x16x16xf16>, tensor<1x16x1xf16>) -> tensor<1x16x16xf16>
    %o1 = tb.forloop_accum_rescale none %p, %r : (tensor<1x16x16xf16>, tensor<1x16x1xf16>) -> tensor<1x16x16xf16>
    // CHECK: tb.forloop_accum_rescale sum %{{.*}}, %[[R]] : (tensor<1x16x8xf16>, tensor<1x16x1xf16>) -> tensor<1x16x1xf16>
    %o2 = tb.forloop_accum_rescale sum %e, %r : (tensor<1x16x8xf16>, tensor<1x16x1xf16>) -> tensor<1x16x1xf16>
    // CHECK: tb.forloop_accum max %[[M]] : tensor<1x16x1xf16> -> tensor<1x16x1xf16>
    %o3 = tb.forloop_accum max %m#0 : tensor<1x16x1xf16> -> tensor<1x16x1xf16>
    %o4 = tb.pow %o1, %o2 : (tensor<1x16x16xf16>, tensor<1x16x1xf16>) -> tensor<1x16x16xf16>
    tb.output %o4 map <x -> 0, y -> 2, z -> 1> : tensor<1x16x16xf16>
    tb.output %o2 map <x -> 0, y -> 2, z -> 1> : tensor<1x16x1xf16>
    tb.output %o3 map <x -> 0, y -> 2, z -> 1> : tensor<1x16x1xf16>
  }
  return %o#0, %o#1, %o#2 : tensor<2x64x64xf16>, tensor<2x64x4xf16>, tensor<2x64x4xf16>
}

// -----

// Layout ops on tiles: reshape, transpose, repeat.
// CHECK-LABEL: func.func @layout_ops
func.func @layout_ops(%a: tensor<64x256xf16>) -> tensor<64x256xf16> {
  %o = kn.graph_def (%a) grid [4, 1, 1] block [128, 1, 1] forloop 1 dimx 64
      : (tensor<64x256xf16>) -> tensor<64x256xf16> {
  ^bb0(%a0: tensor<64x256xf16>):
    %t = tb.input %a0 map <x -> 0> : tensor<64x256xf16> -> tensor<16x256xf16>
    // CHECK: tb.reshape %{{.*}} : tensor<16x256xf16> -> tensor<16x2x128xf16>
    %r = tb.reshape %t : tensor<16x256xf16> -> tensor<16x2x128xf16>
    // CHECK: tb.transpose %{{.*}} {permutation = array<i64: 0, 2, 1>} : tensor<16x2x128xf16> -> tensor<16x128x2xf16>
    %p = tb.transpose %r {permutation = array<i64: 0, 2, 1>} : tensor<16x2x128xf16> -> tensor<16x128x2xf16>
    %f = tb.reshape %p : tensor<16x128x2xf16> -> tensor<16x256xf16>
    // CHECK: tb.repeat %{{.*}} {repeats = array<i64: 1, 1>} : tensor<16x256xf16> -> tensor<16x256xf16>
    %q = tb.repeat %f {repeats = array<i64: 1, 1>} : tensor<16x256xf16> -> tensor<16x256xf16>
    tb.output %q map <x -> 0> : tensor<16x256xf16>
  }
  return %o : tensor<64x256xf16>
}

// -----

// The optimizer's plan attributes (--mirage-layout, --mirage-smem-plan) print back as written.
// CHECK-LABEL: func.func @plan
// CHECK: kn.graph_def {{.*}}{tb.smem = {full = #tb.smem<stages = 1, offsets = {in0 = 0 : i64, op0 = 2048 : i64}>}}
// CHECK: tb.input {{.*}}{tb.layout = #tb.layout<inner = 1, swizzle = 128>}
// CHECK: tb.exp {{.*}}{tb.layout = #tb.layout<inner = 0, swizzle = 0>}
func.func @plan(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64 {tb.smem = {full = #tb.smem<stages = 1, offsets = {in0 = 0 : i64, op0 = 2048 : i64}>}}
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> {tb.layout = #tb.layout<inner = 1, swizzle = 128>} : tensor<16x64xf16> -> tensor<16x64xf16>
    %e = tb.exp %t {tb.layout = #tb.layout<inner = 0, swizzle = 0>} : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %e map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// Staged inputs: [smem] counts two chunks of each (32 KiB), not the whole tiles (256 KiB).
// CHECK-LABEL: func.func @staged
func.func @staged(%a: tensor<64x1024xf16>, %b: tensor<1024x64xf16>) -> tensor<64x64xf16> {
  %o = kn.graph_def (%a, %b) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<64x1024xf16>, tensor<1024x64xf16>) -> tensor<64x64xf16> {
  ^bb0(%a0: tensor<64x1024xf16>, %a1: tensor<1024x64xf16>):
    // CHECK: tb.input %{{.*}} map <> {k_chunk = 64 : i64} : tensor<64x1024xf16> -> tensor<64x1024xf16>
    %ta = tb.input %a0 map <> {k_chunk = 64 : i64} : tensor<64x1024xf16> -> tensor<64x1024xf16>
    %tb = tb.input %a1 map <> {k_chunk = 64 : i64} : tensor<1024x64xf16> -> tensor<1024x64xf16>
    %c = tb.matmul %ta, %tb : (tensor<64x1024xf16>, tensor<1024x64xf16>) -> tensor<64x64xf16>
    tb.output %c map <> : tensor<64x64xf16>
  }
  return %o : tensor<64x64xf16>
}
