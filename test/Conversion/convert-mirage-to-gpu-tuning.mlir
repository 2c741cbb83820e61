// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{row-registers=false})' | FileCheck %s
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu)' | FileCheck %s --check-prefix=ROWS
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu,gpu-lower-to-nvvm-pipeline{cubin-format=isa cubin-chip=sm_90 cubin-features=+ptx80 kernel-bare-ptr-calling-convention=true})' | FileCheck %s --check-prefix=ROWSPTX
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{threads=512})' | FileCheck %s --check-prefix=T512
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{vectorize=false})' | FileCheck %s --check-prefix=SCALAR
// RUN: mirage-opt %s --pass-pipeline='builtin.module(convert-mirage-to-gpu{pdl=false})' | FileCheck %s --check-prefix=NOPDL

// Tuning options that do not change what the block graph computes. By default the rows
// stay in registers (ROWS): each thread loads its 16-byte chunk of both inputs straight
// from device memory, multiplies, reduces the row (shuffles, then the 4 warps' partials
// behind the one barrier) and stores its chunk; no shared-memory tile. With
// `row-registers=false` the element-wise op moves 16-byte chunks of shared-memory tiles
// and the row reduction of rms_norm reads chunks; `threads` replaces the μGraph's block
// size (one row shared by 16 warps); `vectorize=false` goes back to one element a thread.
// The kernel is a programmatic dependent (`pdl`, sm_90): it waits for the grid before it
// ahead of its first access to memory and lets the next one launch after its last store
// (PTX: griddepcontrol.wait before the first ld.global, launch_dependents after the
// st.global); `pdl=false` leaves both out.
// ROWS-LABEL: gpu.func @norm_k0
// ROWS-SAME: known_block_size = array<i32: 128, 1, 1>
// ROWS-NEXT: nvvm.griddepcontrol wait
// ROWS: vector.load %arg0[{{.*}}] {alignment = 16 : i64} : memref<8192xf16>, vector<8xf16>
// ROWS: vector.load %arg1[{{.*}}] {alignment = 16 : i64} : memref<8192xf16>, vector<8xf16>
// ROWS: gpu.shuffle xor
// ROWS: gpu.barrier
// ROWS-NOT: gpu.barrier
// ROWS: vector.store {{.*}}, %arg2[{{.*}}] {alignment = 16 : i64} : memref<8192xf16>, vector<8xf16>
// ROWS-NEXT: nvvm.griddepcontrol launch_dependents
// ROWS-NEXT: gpu.return
// NOPDL-LABEL: gpu.func @norm_k0
// NOPDL-NOT: griddepcontrol
// ROWSPTX-NOT: ld.global
// ROWSPTX: griddepcontrol.wait
// ROWSPTX: ld.global.v4.b32
// ROWSPTX: ld.global.v4.b32
// ROWSPTX: shfl.sync.bfly.b32
// ROWSPTX: bar.sync
// ROWSPTX-NOT: bar.sync
// ROWSPTX: st.global.v4.b32
// ROWSPTX: griddepcontrol.launch_dependents
// ROWSPTX-NOT: st.global
// CHECK-LABEL: gpu.func @norm_k0
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: vector.load {{.*}} : memref<{{.*}}xf16, #gpu.address_space<workgroup>>, vector<8xf16>
// CHECK: arith.extf {{.*}} : vector<8xf16> to vector<8xf32>
// CHECK: vector.store {{.*}} : memref<{{.*}}xf16, #gpu.address_space<workgroup>>, vector<8xf16>
// CHECK: gpu.shuffle xor
// T512: known_block_size = array<i32: 512, 1, 1>
// SCALAR-LABEL: gpu.func @norm_k0
// SCALAR-NOT: vector<8xf16> to vector<8xf32>
module {
  func.func @norm(%arg0: tensor<8x1024xf16>, %arg1: tensor<8x1024xf16>) -> tensor<8x1024xf16> {
    %0 = kn.graph_def (%arg0, %arg1) grid [8, 1, 1] block [128, 1, 1] forloop 1 dimx 64 : (tensor<8x1024xf16>, tensor<8x1024xf16>) -> tensor<8x1024xf16> {
    ^bb0(%a0: tensor<8x1024xf16>, %a1: tensor<8x1024xf16>):
      %b0 = tb.input %a0 map <x -> 0> : tensor<8x1024xf16> -> tensor<1x1024xf16>
      %b1 = tb.input %a1 map <x -> 0> : tensor<8x1024xf16> -> tensor<1x1024xf16>
      %b2 = tb.mul %b0, %b1 : (tensor<1x1024xf16>, tensor<1x1024xf16>) -> tensor<1x1024xf16>
      %b3 = tb.rms_norm %b2 {normalized_shape = array<i64: 1024>} : tensor<1x1024xf16> -> tensor<1x1024xf16>
      tb.output %b3 map <x -> 0> : tensor<1x1024xf16>
    }
    return %0 : tensor<8x1024xf16>
  }
}
