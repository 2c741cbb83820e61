// RUN: mirage-opt %s --split-input-file --mirage-smem-plan=row-registers=false | FileCheck %s
// RUN: mirage-opt %s --split-input-file --mirage-smem-plan | FileCheck %s --check-prefix=ROWS
// RUN: mirage-opt %s --split-input-file --mirage-smem-plan=fold-combine=false,clusters=false | FileCheck %s --check-prefix=NOFOLD
// RUN: mirage-opt %s --split-input-file --mirage-smem-plan=clusters=false | FileCheck %s --check-prefix=FOLD
// RUN: not mirage-opt %s --split-input-file --mirage-smem-plan=capacity=16384,row-registers=false 2>&1 | FileCheck %s --check-prefix=CAP

// An element-wise chain x -> exp -> sqrt -> exp with its tiles in shared memory: only
// two 16 KiB tiles are ever live, so the third and fourth reuse the first two's space
// (32 KiB instead of 64 KiB). With its rows in registers (the default) the kernel has no
// shared-memory tiles and no record.
// CHECK-LABEL: func.func @chain
// CHECK: kn.graph_def {{.*}}tb.smem = {full = #tb.smem<stages = 1, offsets = {in0 = [[A:[0-9]+]] : i64, op0 = [[B:[0-9]+]] : i64, op1 = [[A]] : i64, op2 = [[B]] : i64}>}
// ROWS-LABEL: func.func @chain
// ROWS-NOT: tb.smem
// ROWS: return
// CAP: mirage-smem-plan.mlir:[[# @LINE + 3]]:8: error: function @chain: [smem] kernel chain_k0: the block graph's tiles need 32768 bytes of shared memory with this lowering
// CAP-SAME: more than the capacity 16384
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

// A matmul over a for-loop of 8 on a grid of 8 blocks: the lowering splits the loop over 2
// blocks (one partial kernel whose 2 split blocks are a cluster that combines: no arrival
// flag), keeps the accumulator in registers (no tile for the matmul's result op0), and
// prefetches both loop-varying inputs in a ring of 4 stages (the 4 iterations each block
// runs); the blocks combine the partials from each other's shared memory, so the
// accumulator has no f16 tile. With clusters=false the partial kernel folds the combine
// into its last block (its arrival `flag`), which writes the f16 accumulator tile op1
// after the loop; with fold-combine=false too, a partial and a combine kernel, each with
// its own buffers.
// CHECK-LABEL: func.func @mm
// CHECK: kn.graph_def {{.*}}tb.smem = {partial = #tb.smem<stages = 4, offsets = {in0 = {{[0-9]+}} : i64, in1 = {{[0-9]+}} : i64}>}
// FOLD-LABEL: func.func @mm
// FOLD: kn.graph_def {{.*}}tb.smem = {partial = #tb.smem<stages = 4, offsets = {flag = {{[0-9]+}} : i64, in0 = {{[0-9]+}} : i64, in1 = {{[0-9]+}} : i64, op1 = {{[0-9]+}} : i64}>}
// NOFOLD-LABEL: func.func @mm
// NOFOLD: kn.graph_def {{.*}}tb.smem = {combine = #tb.smem<stages = 1, offsets = {in0 = {{[0-9]+}} : i64, in1 = {{[0-9]+}} : i64, op1 = {{[0-9]+}} : i64}>, partial = #tb.smem<stages = 4, offsets = {in0 = {{[0-9]+}} : i64, in1 = {{[0-9]+}} : i64, op1 = {{[0-9]+}} : i64}>}
func.func @mm(%x: tensor<16x512xf16>, %w: tensor<512x512xf16>) -> tensor<16x512xf16> {
  %0 = kn.graph_def (%x, %w) grid [8, 1, 1] block [128, 1, 1] forloop 8 dimx 64
      : (tensor<16x512xf16>, tensor<512x512xf16>) -> tensor<16x512xf16> {
  ^bb0(%a: tensor<16x512xf16>, %b: tensor<512x512xf16>):
    %tx = tb.input %a map <i -> 1> : tensor<16x512xf16> -> tensor<16x64xf16>
    %tw = tb.input %b map <x -> 1, i -> 0> : tensor<512x512xf16> -> tensor<64x64xf16>
    %m = tb.matmul %tx, %tw : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
    %s = tb.forloop_accum none %m : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %s map <x -> 1> : tensor<16x64xf16>
  }
  return %0 : tensor<16x512xf16>
}
