// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 wgmma=false})' | FileCheck %s
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1 wgmma=false},gpu-lower-to-nvvm-pipeline{cubin-format=isa cubin-chip=sm_90 cubin-features=+ptx80 kernel-bare-ptr-calling-convention=true})' | FileCheck %s --check-prefix=PTX
// RUN: mirage-opt %s --split-input-file --pass-pipeline='builtin.module(convert-mirage-to-gpu{split=1})' | FileCheck %s --check-prefix=WG

// With warpgroup matmuls (the default on sm_90), both GEMMs of a chain are wgmma: the
// first's A by ldmatrix, the second's A the first's fragments rounded to f16 (no ldmatrix
// between them); C's group is waited for at once, E's at the loop body's end.
// WG-LABEL: gpu.func @gemm_chain_k0
// WG: scf.for {{.*}} iter_args
// WG: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<64x32xf16
// WG: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}} wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}} wgmma.wait_group.sync.aligned 0;
// WG-NOT: nvgpu.ldmatrix
// WG: vector.from_elements {{.*}} : vector<4x2xf16>
// WG-NOT: nvgpu.ldmatrix
// WG: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16
// WG-SAME: wgmma.commit_group.sync.aligned; }
// WG-NEXT: llvm.extractvalue
// WG: "wgmma.wait_group.sync.aligned 0;"
// WG-NEXT: scf.yield
// WG: gpu.return
// WG-LABEL: gpu.func @attn_chain_k0
// WG: scf.for {{.*}} iter_args
// WG: wgmma.mma_async.sync.aligned.m64n64k16
// WG-COUNT-32: ex2.approx.ftz.f32
// WG: wgmma.mma_async.sync.aligned.m64n32k16
// WG: scf.yield

// MCFuser's GEMM chain E = (A @ B) @ D, tiled as the chain search's warp-resident seeds
// (search/mbci.py, `warp_resident`): 64 rows of A for 4 warps, the loop over n in steps
// of 64. Each warp owns 16 whole rows of C, so C's mma fragments, rounded to f16, are the
// second mma's A operand (vector<4x2xf16> from registers, no ldmatrix of C, no store of C
// to shared memory and no barrier between the two GEMMs); E is carried in registers
// through the loop (iter_args) and stored once after it.
// CHECK-LABEL: gpu.func @gemm_chain_k0
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<64x32xf16
// CHECK: nvgpu.mma.sync
// CHECK-NOT: gpu.barrier
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK-NOT: gpu.barrier
// CHECK: %[[A:.*]] = vector.from_elements {{.*}} : vector<4x2xf16>
// CHECK-NOT: gpu.barrier
// (a warp's two 8-column tiles of E share one ldmatrix.x4 of D, split by vector.shuffle)
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true} : memref<64x32xf16
// CHECK-NEXT: %[[B0:.*]] = vector.shuffle {{.*}} [0, 1]
// CHECK-NEXT: %[[B1:.*]] = vector.shuffle {{.*}} [2, 3]
// CHECK-NEXT: nvgpu.mma.sync(%[[A]], %[[B0]], %arg{{[0-9]+}})
// CHECK-NEXT: %[[A1:.*]] = vector.from_elements {{.*}} : vector<4x2xf16>
// CHECK-NEXT: nvgpu.mma.sync(%[[A1]], %[[B1]], %arg{{[0-9]+}})
// CHECK: scf.yield
// CHECK-NOT: nvgpu.mma.sync
// CHECK: gpu.return
// PTX-LABEL: .entry gemm_chain_k0
// PTX-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX-NOT: mma.sync
// PTX: ret;
module {
  func.func @gemm_chain(%arg0: tensor<1x64x32xf16>, %arg1: tensor<1x32x128xf16>, %arg2: tensor<1x128x32xf16>) -> tensor<1x64x32xf16> {
    %0 = kn.graph_def (%arg0, %arg1, %arg2) grid [1, 1, 1] block [128, 1, 1] forloop 2 dimx 64 : (tensor<1x64x32xf16>, tensor<1x32x128xf16>, tensor<1x128x32xf16>) -> tensor<1x64x32xf16> {
    ^bb0(%a0: tensor<1x64x32xf16>, %a1: tensor<1x32x128xf16>, %a2: tensor<1x128x32xf16>):
      %b0 = tb.input %a0 map <> : tensor<1x64x32xf16> -> tensor<1x64x32xf16>
      %b1 = tb.input %a1 map <i -> 2> : tensor<1x32x128xf16> -> tensor<1x32x64xf16>
      %b2 = tb.input %a2 map <i -> 1> : tensor<1x128x32xf16> -> tensor<1x64x32xf16>
      %b3 = tb.matmul %b0, %b1 : (tensor<1x64x32xf16>, tensor<1x32x64xf16>) -> tensor<1x64x64xf16>
      %b4 = tb.matmul %b3, %b2 : (tensor<1x64x64xf16>, tensor<1x64x32xf16>) -> tensor<1x64x32xf16>
      %b5 = tb.forloop_accum none %b4 : tensor<1x64x32xf16> -> tensor<1x64x32xf16>
      tb.output %b5 map <> : tensor<1x64x32xf16>
    }
    return %0 : tensor<1x64x32xf16>
  }
}

// -----

// Self-attention in Mirage's form (exp-normalized), the same tiling: exp(s * (Q @ K))
// (a thread graph chaining two unary ops) is applied to the first mma's fragments in
// f32 (32 values a thread, unrolled), feeds the second mma's A operand from registers
// and the row-sum accumulator, whose per-thread partial sums the loop carries (quad
// shuffles after it); no element loop evaluates the thread graph.
// CHECK-LABEL: gpu.func @attn_chain_k0
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvgpu.mma.sync
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-32: ex2.approx.ftz.f32
// CHECK-NOT: gpu.barrier
// CHECK-NOT: gpu.shuffle
// CHECK: vector.from_elements {{.*}} : vector<4x2xf16>
// CHECK: nvgpu.mma.sync
// CHECK: scf.yield
// CHECK-NOT: ex2.approx.ftz.f32
// CHECK: gpu.shuffle xor
// CHECK: gpu.return
// PTX-LABEL: .entry attn_chain_k0
// PTX-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// PTX-NOT: mma.sync
// PTX: ret;
module {
  func.func @attn_chain(%arg0: tensor<1x64x32xf16>, %arg1: tensor<1x32x128xf16>, %arg2: tensor<1x128x32xf16>) -> tensor<1x64x32xf16> {
    %0 = kn.graph_def (%arg0, %arg1, %arg2) grid [1, 1, 1] block [128, 1, 1] forloop 2 dimx 64 : (tensor<1x64x32xf16>, tensor<1x32x128xf16>, tensor<1x128x32xf16>) -> tensor<1x64x32xf16> {
    ^bb0(%a0: tensor<1x64x32xf16>, %a1: tensor<1x32x128xf16>, %a2: tensor<1x128x32xf16>):
      %b0 = tb.input %a0 map <> : tensor<1x64x32xf16> -> tensor<1x64x32xf16>
      %b1 = tb.input %a1 map <i -> 2> : tensor<1x32x128xf16> -> tensor<1x32x64xf16>
      %b2 = tb.input %a2 map <i -> 1> : tensor<1x128x32xf16> -> tensor<1x64x32xf16>
      %b3 = tb.matmul %b0, %b1 : (tensor<1x64x32xf16>, tensor<1x32x64xf16>) -> tensor<1x64x64xf16>
      %b4 = tb.thread_graph (%b3) : (tensor<1x64x64xf16>) -> tensor<1x64x64xf16> {
      ^bb0(%s0: f16):
        %t0 = th.mul_scalar %s0, 0.125 : f16
        %t1 = th.exp %t0 : f16
        th.yield %t1 : f16
      }
      %b5 = tb.matmul %b4, %b2 : (tensor<1x64x64xf16>, tensor<1x64x32xf16>) -> tensor<1x64x32xf16>
      %b6 = tb.forloop_accum none %b5 : tensor<1x64x32xf16> -> tensor<1x64x32xf16>
      %b7 = tb.forloop_accum sum %b4 : tensor<1x64x64xf16> -> tensor<1x64x1xf16>
      %b8 = tb.thread_graph (%b6, %b7) : (tensor<1x64x32xf16>, tensor<1x64x1xf16>) -> tensor<1x64x32xf16> {
      ^bb0(%s0: f16, %s1: f16):
        %t0 = th.div %s0, %s1 : f16
        th.yield %t0 : f16
      }
      tb.output %b8 map <> : tensor<1x64x32xf16>
    }
    return %0 : tensor<1x64x32xf16>
  }
}
