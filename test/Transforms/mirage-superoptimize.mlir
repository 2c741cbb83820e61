// The superoptimizer on a reduced RMSNorm+Linear (small shapes, at most 9 block ops,
// 2 workers): the reference's three kernels become one graph-defined kernel that
// accumulates the RMS and the matmul in the same for-loop and divides after the loop
// (paper §3). The result is parsed back by mirage-opt (the C++ verifiers run on it).
// With keep-top-k=2 the second-best verified candidate is kept as @rmsnorm_linear_alt1.
// verbose=0 prints no progress; otherwise each phase (enumeration, checks) shows a line on
// stderr. The result is cached (here in %t.cache; by default in the user cache directory):
// the third run is answered from the cache; cache-dir=none searches without one.
//
// RUN: rm -rf %t.cache
// RUN: mirage-opt %s '--mirage-superoptimize=max-block-ops=9 workers=2 time-limit=60 verbose=0 cache-dir=%t.cache' 2>%t.quiet.err | mirage-opt - | FileCheck %s
// RUN: FileCheck %s --allow-empty --check-prefix=QUIET < %t.quiet.err
// RUN: mirage-opt %s '--mirage-superoptimize=max-block-ops=9 workers=2 time-limit=60 keep-top-k=2 cache-dir=none' 2>%t.err | mirage-opt - | FileCheck %s --check-prefix=TOPK
// RUN: FileCheck %s --check-prefix=PROGRESS < %t.err
// RUN: mirage-opt %s '--mirage-superoptimize=max-block-ops=9 workers=2 time-limit=60 cache-dir=%t.cache' 2>%t.cached.err | mirage-opt - | FileCheck %s
// RUN: FileCheck %s --check-prefix=CACHED < %t.cached.err

func.func @rmsnorm_linear(%x: tensor<2x512xf16>, %g: tensor<512xf16>, %w: tensor<512x256xf16>) -> tensor<2x256xf16> {
  %0 = kn.rms_norm %x {normalized_shape = array<i64: 512>} : tensor<2x512xf16> -> tensor<2x512xf16>
  %1 = kn.mul %0, %g : (tensor<2x512xf16>, tensor<512xf16>) -> tensor<2x512xf16>
  %2 = kn.matmul %1, %w : (tensor<2x512xf16>, tensor<512x256xf16>) -> tensor<2x256xf16>
  return %2 : tensor<2x256xf16>
}

// CHECK-LABEL: func.func @rmsnorm_linear(
// CHECK-NOT:     kn.rms_norm
// CHECK:         kn.graph_def
// CHECK-SAME:      forloop
// CHECK-DAG:       tb.forloop_accum rms
// CHECK-DAG:       tb.matmul
// CHECK-DAG:       tb.forloop_accum none
// CHECK:           tb.output
// CHECK-NOT:     kn.graph_def
// CHECK-NOT:     kn.matmul
// CHECK:         return
// CHECK-NOT:   func.func

// TOPK: func.func @rmsnorm_linear(
// TOPK: kn.graph_def
// TOPK: func.func @rmsnorm_linear_alt1(

// QUIET-NOT: [search]

// PROGRESS: [search] enumeration: {{[0-9]+}} work items
// PROGRESS: [search] enumeration done in {{.*}} items, candidates
// PROGRESS: [search] checks: the best of
// PROGRESS: [search] checks done in {{.*}} verified
// PROGRESS: formally verified
// PROGRESS: [mirage-superoptimize] @rmsnorm_linear: best
// PROGRESS-NOT: from cache

// CACHED-NOT: [search]
// CACHED: [mirage-superoptimize] @rmsnorm_linear: best {{.*}} (from cache {{.*}}.cache)
