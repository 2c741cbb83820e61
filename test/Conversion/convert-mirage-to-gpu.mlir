// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 row-registers=false})' | FileCheck %s
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 row-registers=false},gpu-lower-to-nvvm-pipeline{cubin-format=isa cubin-chip=sm_90 cubin-features=+ptx80 kernel-bare-ptr-calling-convention=true})' | FileCheck %s --check-prefix=PTX
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 layout=false schedule=false smem-plan=false row-registers=false},gpu-lower-to-nvvm-pipeline{cubin-format=isa cubin-chip=sm_90 cubin-features=+ptx80 kernel-bare-ptr-calling-convention=true})' | FileCheck %s --check-prefix=OFF
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 layout=false})' | FileCheck %s --check-prefix=PAD
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1})' | FileCheck %s --check-prefix=ROWS

// A block matmul in a for-loop with a `none` accumulator: the loop-varying inputs
// are 16-byte cp.async copies into a ring (4 stages, capped by the 4 iterations), the
// matmul runs on the tensor cores with its fragments carried through the loop. With the
// optimizer's schedule the ring waits for this iteration's group (wait 2), then one
// barrier, then the copy of iteration i+3 is issued (without: issue, then wait 3). With
// its layouts the ldmatrix operands are swizzled (XOR of the 16-byte chunk), rows unpadded;
// without, rows are padded by 8 elements.
// CHECK-LABEL: gpu.module @mlp_kernels
// CHECK-SAME: mirage.launch
// CHECK: gpu.func @mlp_k0(%{{.*}}: memref<2048xf16>, %{{.*}}: memref<16384xf16>, %{{.*}}: memref<512xf16>) kernel
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: gpu.dynamic_shared_memory
// CHECK: nvgpu.device_async_copy {{.*}}, 8 {bypassL1}
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvvm.cp.async.wait.group 2
// CHECK: arith.xori
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<16x64xf16
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 2 : i32, transpose = true} : memref<64x32xf16
// PAD-LABEL: gpu.func @mlp_k0
// PAD-NOT: arith.xori
// PAD: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<16x72xf16
// PAD: nvgpu.ldmatrix {{.*}} {numTiles = 2 : i32, transpose = true} : memref<64x40xf16
// CHECK: nvgpu.mma.sync
// CHECK-SAME: mmaShape = [16, 8, 16]
// CHECK: vector.store {{.*}}alignment = 16
// PTX-LABEL: gpu.binary @mlp_kernels
// PTX-SAME: .entry mlp_k0(
// PTX-SAME: cp.async.cg.shared.global
// OFF-LABEL: gpu.binary @mlp_kernels
// OFF-SAME: cp.async.wait_group \093;
// PTX-SAME: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-SAME: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX-SAME: cp.async.wait_group \092;
// PTX-SAME: st.global.v4.b32
module {
  func.func @mlp(%arg0: tensor<8x256xf16>, %arg1: tensor<256x64xf16>) -> tensor<8x64xf16> {
    %0 = kn.graph_def (%arg0, %arg1) grid [2, 1, 1] block [128, 1, 1] forloop 4 dimx 64 : (tensor<8x256xf16>, tensor<256x64xf16>) -> tensor<8x64xf16> {
    ^bb0(%a0: tensor<8x256xf16>, %a1: tensor<256x64xf16>):
      %b0 = tb.input %a0 map <i -> 1> : tensor<8x256xf16> -> tensor<8x64xf16>
      %b1 = tb.input %a1 map <x -> 1, i -> 0> : tensor<256x64xf16> -> tensor<64x32xf16>
      %b2 = tb.matmul %b0, %b1 : (tensor<8x64xf16>, tensor<64x32xf16>) -> tensor<8x32xf16>
      %b3 = tb.forloop_accum none %b2 : tensor<8x32xf16> -> tensor<8x32xf16>
      %b4 = tb.silu %b3 : tensor<8x32xf16> -> tensor<8x32xf16>
      tb.output %b4 map <x -> 1> : tensor<8x32xf16>
    }
    return %0 : tensor<8x64xf16>
  }
}

// -----

// One element-wise op, no loop. With the optimizer's schedule: a barrier after the loads
// (copied by all threads; each thread then computes exp of its own elements) and one
// before the output saver: 2 (the SchedulePlan's count). Without (OFF): barriers after the
// prologue, after the loads, after the op, at the end of the iteration, after the loop;
// in the PTX LLVM merges the two back-to-back ones: 4 bar.sync. (These three with the rows
// in shared memory; by default, ROWS, they stay in registers: no barrier at all.)
// ROWS-LABEL: gpu.func @expk_k0
// ROWS-NOT: gpu.barrier
// ROWS: gpu.return
// CHECK-LABEL: gpu.func @expk_k0
// CHECK-COUNT-2: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
// PTX-LABEL: gpu.binary @expk_kernels
// PTX-COUNT-2: bar.sync
// PTX-NOT: bar.sync
// OFF-LABEL: gpu.binary @expk_kernels
// OFF-COUNT-4: bar.sync
// OFF-NOT: bar.sync
module {
  func.func @expk(%arg0: tensor<64x256xf16>) -> tensor<64x256xf16> {
    %0 = kn.graph_def (%arg0) grid [4, 1, 1] block [128, 1, 1] forloop 1 dimx 64 : (tensor<64x256xf16>) -> tensor<64x256xf16> {
    ^bb0(%a0: tensor<64x256xf16>):
      %b0 = tb.input %a0 map <x -> 0> : tensor<64x256xf16> -> tensor<16x256xf16>
      %b1 = tb.exp %b0 : tensor<16x256xf16> -> tensor<16x256xf16>
      tb.output %b1 map <x -> 0> : tensor<16x256xf16>
    }
    return %0 : tensor<64x256xf16>
  }
}

// -----

// rms_norm of a tile: one warp per row, the sum of squares combined by 5 butterfly
// shuffles.
// CHECK-LABEL: gpu.func @norm_k0
// CHECK-COUNT-5: gpu.shuffle xor
// PTX-LABEL: gpu.binary @norm_kernels
// OFF-LABEL: gpu.binary @norm_kernels
// PTX-COUNT-5: shfl.sync.bfly.b32
module {
  func.func @norm(%arg0: tensor<8x1024xf16>) -> tensor<8x1024xf16> {
    %0 = kn.graph_def (%arg0) grid [8, 1, 1] block [128, 1, 1] forloop 1 dimx 64 : (tensor<8x1024xf16>) -> tensor<8x1024xf16> {
    ^bb0(%a0: tensor<8x1024xf16>):
      %b0 = tb.input %a0 map <x -> 0> : tensor<8x1024xf16> -> tensor<1x1024xf16>
      %b1 = tb.rms_norm %b0 {normalized_shape = array<i64: 1024>} : tensor<1x1024xf16> -> tensor<1x1024xf16>
      tb.output %b1 map <x -> 0> : tensor<1x1024xf16>
    }
    return %0 : tensor<8x1024xf16>
  }
}

// -----

// Pre-defined kernel ops: one kernel each, lowered from its default block graph
// (lower/predefined.py) like a graph-defined kernel: the matmul copies its tiles with
// cp.async and runs on the tensor cores; relu is a 16-byte-vectorized element loop.
// The matmul result is an intermediate buffer between them.
// CHECK-LABEL: gpu.module @ref_kernels
// CHECK-SAME: \22buffers\22: [{\22shape\22: [4, 32], \22dtype\22: \22f16\22}]
// CHECK: gpu.func @ref_k0(
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.mma.sync
// CHECK: gpu.func @ref_k1(
// CHECK: nvgpu.device_async_copy
// CHECK: arith.maximumf
// CHECK: vector.store {{.*}}alignment = 16
// PTX-LABEL: gpu.binary @ref_kernels
// PTX-SAME: .entry ref_k0(
// PTX-SAME: .entry ref_k1(
module {
  func.func @ref(%arg0: tensor<4x64xf16>, %arg1: tensor<64x32xf16>) -> tensor<4x32xf16> {
    %0 = kn.matmul %arg0, %arg1 : (tensor<4x64xf16>, tensor<64x32xf16>) -> tensor<4x32xf16>
    %1 = kn.relu %0 : tensor<4x32xf16> -> tensor<4x32xf16>
    return %1 : tensor<4x32xf16>
  }
}
