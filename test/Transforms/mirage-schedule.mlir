// RUN: mirage-opt %s --mirage-schedule | FileCheck %s
// Depth scheduling: the two matmuls (depth 1) run between the same barriers, then the
// two accumulators (depth 2), then silu and mul after the loop, fused element-wise
// (no barrier between them). 5 barriers in program order, 4 after. The ops stay in place;
// each records its place in the order (tb.order), which convert-mirage-to-gpu follows.

// CHECK-LABEL: func.func @gated_mlp
// CHECK: kn.graph_def {{.*}}tb.barriers = 4 : i64, tb.barriers_program_order = 5 : i64
// CHECK: tb.matmul {{.*}}{tb.barrier, tb.order = 0 : i64, tb.stage = 0 : i64}
// CHECK-NEXT: tb.forloop_accum none {{.*}}{tb.barrier, tb.order = 2 : i64, tb.stage = 1 : i64}
// CHECK-NEXT: tb.matmul {{.*}}{tb.order = 1 : i64, tb.stage = 0 : i64}
// CHECK-NEXT: tb.forloop_accum none {{.*}}{tb.order = 3 : i64, tb.stage = 1 : i64}
// CHECK-NEXT: tb.silu {{.*}}{tb.barrier, tb.order = 4 : i64, tb.stage = 2 : i64}
// CHECK-NEXT: tb.mul {{.*}}{tb.order = 5 : i64, tb.stage = 2 : i64}
// CHECK-NEXT: tb.output
func.func @gated_mlp(%x: tensor<8x4096xf16>, %w1: tensor<4096x4096xf16>, %w2: tensor<4096x4096xf16>) -> tensor<8x4096xf16> {
  %0 = kn.graph_def (%x, %w1, %w2) grid [128, 1, 1] block [128, 1, 1] forloop 16 dimx 64
      : (tensor<8x4096xf16>, tensor<4096x4096xf16>, tensor<4096x4096xf16>) -> tensor<8x4096xf16> {
  ^bb0(%a: tensor<8x4096xf16>, %b: tensor<4096x4096xf16>, %c: tensor<4096x4096xf16>):
    %1 = tb.input %a map <i -> 1> : tensor<8x4096xf16> -> tensor<8x256xf16>
    %2 = tb.input %b map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<256x32xf16>
    %3 = tb.input %c map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<256x32xf16>
    %4 = tb.matmul %1, %2 : (tensor<8x256xf16>, tensor<256x32xf16>) -> tensor<8x32xf16>
    %5 = tb.forloop_accum none %4 : tensor<8x32xf16> -> tensor<8x32xf16>
    %6 = tb.matmul %1, %3 : (tensor<8x256xf16>, tensor<256x32xf16>) -> tensor<8x32xf16>
    %7 = tb.forloop_accum none %6 : tensor<8x32xf16> -> tensor<8x32xf16>
    %8 = tb.silu %5 : tensor<8x32xf16> -> tensor<8x32xf16>
    %9 = tb.mul %8, %7 : (tensor<8x32xf16>, tensor<8x32xf16>) -> tensor<8x32xf16>
    tb.output %9 map <x -> 1> : tensor<8x32xf16>
  }
  return %0 : tensor<8x4096xf16>
}
