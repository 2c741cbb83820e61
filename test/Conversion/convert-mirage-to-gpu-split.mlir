// RUN: mirage-opt %s --convert-mirage-to-gpu | FileCheck %s

// 2 blocks are far fewer than the SMs: the 4-iteration loop is split over 2 blocks
// (grid z). The partial kernel writes raw f32 accumulators to a workspace buffer, the
// combine kernel sums them, then runs silu and the saver.
// CHECK-LABEL: gpu.module @mlp_kernels
// CHECK-SAME: \22buffers\22: [{\22shape\22: [1024], \22dtype\22: \22f32\22}]
// CHECK: gpu.func @mlp_k0_partial(%{{.*}}: memref<2048xf16>, %{{.*}}: memref<16384xf16>, %[[WS:.*]]: memref<1024xf32>) kernel
// CHECK-SAME: known_grid_size = array<i32: 2, 1, 2>
// CHECK: gpu.block_id z
// CHECK: nvgpu.mma.sync
// CHECK: memref.store {{.*}}, %[[WS]]
// CHECK: gpu.func @mlp_k0_combine(%{{.*}}: memref<2048xf16>, %{{.*}}: memref<16384xf16>, %[[WS2:.*]]: memref<1024xf32>, %{{.*}}: memref<512xf16>) kernel
// CHECK-SAME: known_grid_size = array<i32: 2, 1, 1>
// CHECK: memref.load %[[WS2]]
// CHECK: math.exp
// CHECK-NOT: nvgpu.mma.sync
// CHECK: gpu.return
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
