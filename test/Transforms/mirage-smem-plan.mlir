// RUN: mirage-opt %s --split-input-file --mirage-smem-plan | FileCheck %s
// RUN: not mirage-opt %s --split-input-file --mirage-smem-plan=capacity=16384 2>&1 | FileCheck %s --check-prefix=CAP

// An element-wise chain x -> exp -> sqrt -> exp: only two 16 KiB tiles are ever live,
// so the third tile reuses the first one's space (32 KiB instead of 64 KiB).
// CHECK-LABEL: func.func @chain
// CHECK: kn.graph_def {{.*}}tb.smem_bytes = 32768 : i64
// CHECK: tb.input {{.*}}tb.smem_offset = [[A:[0-9]+]] : i64
// CHECK: tb.exp {{.*}}tb.smem_offset = [[B:[0-9]+]] : i64
// CHECK: tb.sqrt {{.*}}tb.smem_offset = [[A]] : i64
// CHECK: tb.exp {{.*}}tb.smem_offset = [[B]] : i64
// CAP: error: [smem] the block graph needs 32768 bytes of shared memory, more than the capacity 16384
func.func @chain(%x: tensor<16x512xf16>) -> tensor<16x512xf16> {
  %0 = kn.graph_def (%x) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64
      : (tensor<16x512xf16>) -> tensor<16x512xf16> {
  ^bb0(%a: tensor<16x512xf16>):
    %1 = tb.input %a map <> : tensor<16x512xf16> -> tensor<16x512xf16>
    %2 = tb.exp %1 : tensor<16x512xf16> -> tensor<16x512xf16>
    %3 = tb.sqrt %2 : tensor<16x512xf16> -> tensor<16x512xf16>
    %4 = tb.exp %3 : tensor<16x512xf16> -> tensor<16x512xf16>
    tb.output %4 map <> : tensor<16x512xf16>
  }
  return %0 : tensor<16x512xf16>
}

// -----

// Double buffering: the loop-varying iterator tile takes two copies; the accumulator
// lives across the loop.
// CHECK-LABEL: func.func @mm
// CHECK: tb.input {{.*}}tb.smem_copies = 2 : i64
// CHECK: tb.input {{.*}}tb.smem_copies = 2 : i64
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
