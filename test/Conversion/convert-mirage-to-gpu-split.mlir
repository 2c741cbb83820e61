// RUN: mirage-opt %s --convert-mirage-to-gpu | FileCheck %s --check-prefix=CLU
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{clusters=false})' | FileCheck %s
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{clusters=false fold-combine=false})' | FileCheck %s --check-prefix=TWO

// 2 blocks are far fewer than the SMs: the 8-iteration loop is split over 2 blocks
// (grid z). Default: the 2 blocks of a split group are a cluster. Each keeps its f32
// partial in its shared memory; after a cluster barrier each sums its 4 of the 8 rows over
// both blocks' partials (distributed shared memory) and stores them into the first block's
// accumulator tile; after a second barrier the first block runs silu and the saver. No
// workspace.
// CLU-LABEL: gpu.module @mlp_kernels
// CLU-SAME: \22buffers\22: []
// CLU: gpu.func @mlp_k0_split(%{{.*}}: memref<4096xf16>, %{{.*}}: memref<32768xf16>, %{{.*}}: memref<512xf16>) kernel
// CLU-SAME: known_grid_size = array<i32: 2, 1, 2>, nvvm.cluster_dim = array<i32: 1, 1, 2>
// CLU: nvgpu.mma.sync
// CLU: nvvm.cluster.arrive
// CLU-NEXT: nvvm.cluster.wait
// CLU: mapa.shared::cluster.u64
// CLU: ld.shared::cluster.v4.f32
// CLU: st.shared::cluster.b16
// CLU-NOT: ex2.approx.ftz.f32
// CLU: nvvm.cluster.arrive
// CLU-NEXT: nvvm.cluster.wait
// CLU: scf.if
// CLU: ex2.approx.ftz.f32
// CLU: gpu.return
// CLU-NOT: gpu.func

// Without clusters: one kernel; every block writes its raw f32 accumulators to the
// workspace, counts its arrival (atomic add on a per-group counter after the
// workspace's partials), and the last block of the group sums the partials, runs silu and
// the saver, and resets the counter. The workspace is 2 splits x 2 blocks x 8x32 + 2 counters.
// CHECK-LABEL: gpu.module @mlp_kernels
// CHECK-SAME: \22buffers\22: [{\22shape\22: [1026], \22dtype\22: \22f32\22}]
// CHECK: gpu.func @mlp_k0_split(%{{.*}}: memref<4096xf16>, %[[W:.*]]: memref<32768xf16>, %[[WS:.*]]: memref<1026xf32>, %{{.*}}: memref<512xf16>) kernel
// CHECK-SAME: known_grid_size = array<i32: 2, 1, 2>
// CHECK: gpu.block_id z
// CHECK: memref.extract_aligned_pointer_as_index %[[W]]
// CHECK: L2::evict_first
// CHECK: nvgpu.mma.sync
// CHECK: vector.store {{.*}}, %[[WS]]
// CHECK: fence.acq_rel.gpu
// CHECK: memref.atomic_rmw addf {{.*}}, %[[WS]]
// CHECK: scf.if
// CHECK: memref.load %[[WS]]
// CHECK: ex2.approx.ftz.f32
// CHECK: memref.store {{.*}}, %[[WS]]
// CHECK: gpu.return
// CHECK-NOT: gpu.func

// With fold-combine=false too: the partial kernel writes raw f32 accumulators to a workspace
// buffer, a second (combine) kernel sums them, then runs silu and the saver.
// TWO-LABEL: gpu.module @mlp_kernels
// TWO-SAME: \22buffers\22: [{\22shape\22: [1024], \22dtype\22: \22f32\22}]
// TWO: gpu.func @mlp_k0_partial(%{{.*}}: memref<4096xf16>, %{{.*}}: memref<32768xf16>, %[[WS:.*]]: memref<1024xf32>) kernel
// TWO-SAME: known_grid_size = array<i32: 2, 1, 2>
// TWO: gpu.block_id z
// TWO: nvgpu.mma.sync
// TWO: vector.store {{.*}}, %[[WS]]
// TWO: gpu.func @mlp_k0_combine(%{{.*}}: memref<4096xf16>, %{{.*}}: memref<32768xf16>, %[[WS2:.*]]: memref<1024xf32>, %{{.*}}: memref<512xf16>) kernel
// TWO-SAME: known_grid_size = array<i32: 2, 1, 1>
// TWO: memref.load %[[WS2]]
// TWO: ex2.approx.ftz.f32
// TWO-NOT: nvgpu.mma.sync
// TWO: gpu.return
module {
  func.func @mlp(%arg0: tensor<8x512xf16>, %arg1: tensor<512x64xf16>) -> tensor<8x64xf16> {
    %0 = kn.graph_def (%arg0, %arg1) grid [2, 1, 1] block [128, 1, 1] forloop 8 dimx 64 : (tensor<8x512xf16>, tensor<512x64xf16>) -> tensor<8x64xf16> {
    ^bb0(%a0: tensor<8x512xf16>, %a1: tensor<512x64xf16>):
      %b0 = tb.input %a0 map <i -> 1> : tensor<8x512xf16> -> tensor<8x64xf16>
      %b1 = tb.input %a1 map <x -> 1, i -> 0> : tensor<512x64xf16> -> tensor<64x32xf16>
      %b2 = tb.matmul %b0, %b1 : (tensor<8x64xf16>, tensor<64x32xf16>) -> tensor<8x32xf16>
      %b3 = tb.forloop_accum none %b2 : tensor<8x32xf16> -> tensor<8x32xf16>
      %b4 = tb.silu %b3 : tensor<8x32xf16> -> tensor<8x32xf16>
      tb.output %b4 map <x -> 1> : tensor<8x32xf16>
    }
    return %0 : tensor<8x64xf16>
  }
}
