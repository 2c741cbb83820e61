// RUN: mirage-opt %s --mirage-layout | FileCheck %s
// The layout ILP: the 64x64 W tile is copied coalesced (last dim innermost, as W is
// row-major in device memory) and read by ldmatrix, so it gets the 128-byte swizzle that
// removes the 8-way bank conflict of 128-byte rows; the accumulator is not read by
// ldmatrix and stays unswizzled.

// CHECK-LABEL: func.func @mm
// CHECK: kn.graph_def {{.*}}tb.layout_cost =
// CHECK: tb.input {{.*}}tb.layout = #tb.layout<inner = 1, swizzle = 128>
// CHECK: tb.input {{.*}}tb.layout = #tb.layout<inner = 1, swizzle = 128>
// CHECK: tb.matmul {{.*}}tb.layout = #tb.layout<inner = 1, swizzle = 0>
// CHECK: tb.forloop_accum none {{.*}}tb.layout = #tb.layout<inner = 1, swizzle = 0>
func.func @mm(%x: tensor<16x256xf16>, %w: tensor<256x512xf16>) -> tensor<16x512xf16> {
  %0 = kn.graph_def (%x, %w) grid [8, 1, 1] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<16x256xf16>, tensor<256x512xf16>) -> tensor<16x512xf16> {
  ^bb0(%a: tensor<16x256xf16>, %b: tensor<256x512xf16>):
    %tx = tb.input %a map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    %tw = tb.input %b map <x -> 1, i -> 0> : tensor<256x512xf16> -> tensor<64x64xf16>
    %m = tb.matmul %tx, %tw : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
    %s = tb.forloop_accum none %m : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %s map <x -> 1> : tensor<16x64xf16>
  }
  return %0 : tensor<16x512xf16>
}
