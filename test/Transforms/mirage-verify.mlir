// RUN: mirage-opt %s --split-input-file --mirage-verify --verify-diagnostics

// RMSNorm + linear: a fused candidate (one graph_def, the division after the loop, as in
// paper §3) is equivalent to the reference.
func.func @ref(%x: tensor<2x64xf16>, %g: tensor<1x64xf16>, %w: tensor<64x48xf16>) -> tensor<2x48xf16> {
  %0 = kn.rms_norm %x {normalized_shape = array<i64: 64>} : tensor<2x64xf16> -> tensor<2x64xf16>
  %1 = kn.mul %0, %g : (tensor<2x64xf16>, tensor<1x64xf16>) -> tensor<2x64xf16>
  %2 = kn.matmul %1, %w : (tensor<2x64xf16>, tensor<64x48xf16>) -> tensor<2x48xf16>
  return %2 : tensor<2x48xf16>
}

// expected-remark @+1 {{mirage-verify: @fused is equivalent to @ref}}
func.func @fused(%x: tensor<2x64xf16>, %g: tensor<1x64xf16>, %w: tensor<64x48xf16>) -> tensor<2x48xf16> attributes {mirage.candidate_of = @ref} {
  %o = kn.graph_def (%x, %g, %w) grid [3, 1, 1] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<2x64xf16>, tensor<1x64xf16>, tensor<64x48xf16>) -> tensor<2x48xf16> {
  ^bb0(%a0: tensor<2x64xf16>, %a1: tensor<1x64xf16>, %a2: tensor<64x48xf16>):
    %tx = tb.input %a0 map <i -> 1> : tensor<2x64xf16> -> tensor<2x16xf16>
    %tg = tb.input %a1 map <i -> 1> : tensor<1x64xf16> -> tensor<1x16xf16>
    %tw = tb.input %a2 map <x -> 1, i -> 0> : tensor<64x48xf16> -> tensor<16x16xf16>
    %xg = tb.mul %tx, %tg : (tensor<2x16xf16>, tensor<1x16xf16>) -> tensor<2x16xf16>
    %m = tb.matmul %xg, %tw : (tensor<2x16xf16>, tensor<16x16xf16>) -> tensor<2x16xf16>
    %r = tb.forloop_accum rms %tx : tensor<2x16xf16> -> tensor<2x1xf16>
    %s = tb.forloop_accum none %m : tensor<2x16xf16> -> tensor<2x16xf16>
    %d = tb.div %s, %r : (tensor<2x16xf16>, tensor<2x1xf16>) -> tensor<2x16xf16>
    tb.output %d map <x -> 1> : tensor<2x16xf16>
  }
  return %o : tensor<2x48xf16>
}

// -----

// The same candidate with a `mean` accumulator where `rms` belongs: not equivalent.
func.func @ref(%x: tensor<2x64xf16>, %g: tensor<1x64xf16>, %w: tensor<64x48xf16>) -> tensor<2x48xf16> {
  %0 = kn.rms_norm %x {normalized_shape = array<i64: 64>} : tensor<2x64xf16> -> tensor<2x64xf16>
  %1 = kn.mul %0, %g : (tensor<2x64xf16>, tensor<1x64xf16>) -> tensor<2x64xf16>
  %2 = kn.matmul %1, %w : (tensor<2x64xf16>, tensor<64x48xf16>) -> tensor<2x48xf16>
  return %2 : tensor<2x48xf16>
}

// expected-error @+1 {{mirage-verify: @wrong is not equivalent to @ref: output 0 element [0, 0] differs}}
func.func @wrong(%x: tensor<2x64xf16>, %g: tensor<1x64xf16>, %w: tensor<64x48xf16>) -> tensor<2x48xf16> attributes {mirage.candidate_of = @ref} {
  %o = kn.graph_def (%x, %g, %w) grid [3, 1, 1] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<2x64xf16>, tensor<1x64xf16>, tensor<64x48xf16>) -> tensor<2x48xf16> {
  ^bb0(%a0: tensor<2x64xf16>, %a1: tensor<1x64xf16>, %a2: tensor<64x48xf16>):
    %tx = tb.input %a0 map <i -> 1> : tensor<2x64xf16> -> tensor<2x16xf16>
    %tg = tb.input %a1 map <i -> 1> : tensor<1x64xf16> -> tensor<1x16xf16>
    %tw = tb.input %a2 map <x -> 1, i -> 0> : tensor<64x48xf16> -> tensor<16x16xf16>
    %xg = tb.mul %tx, %tg : (tensor<2x16xf16>, tensor<1x16xf16>) -> tensor<2x16xf16>
    %m = tb.matmul %xg, %tw : (tensor<2x16xf16>, tensor<16x16xf16>) -> tensor<2x16xf16>
    %r = tb.forloop_accum mean %tx : tensor<2x16xf16> -> tensor<2x1xf16>
    %s = tb.forloop_accum none %m : tensor<2x16xf16> -> tensor<2x16xf16>
    %d = tb.div %s, %r : (tensor<2x16xf16>, tensor<2x1xf16>) -> tensor<2x16xf16>
    tb.output %d map <x -> 1> : tensor<2x16xf16>
  }
  return %o : tensor<2x48xf16>
}

// -----

// Attention: exp-normalized softmax against a candidate that sums the keys in two halves
// with a loop; equivalent (Theorem 2 gives no bound for 8 keys, the remark says so).
func.func @attn(%q: tensor<1x4x8xf16>, %k: tensor<1x8x8xf16>, %v: tensor<1x8x8xf16>) -> tensor<1x4x8xf16> {
  %s = kn.matmul %q, %k : (tensor<1x4x8xf16>, tensor<1x8x8xf16>) -> tensor<1x4x8xf16>
  %e = kn.exp %s : tensor<1x4x8xf16> -> tensor<1x4x8xf16>
  %n = kn.matmul %e, %v : (tensor<1x4x8xf16>, tensor<1x8x8xf16>) -> tensor<1x4x8xf16>
  %d = kn.reduction %e {dim = 2 : i64} : tensor<1x4x8xf16> -> tensor<1x4x1xf16>
  %o = kn.div %n, %d : (tensor<1x4x8xf16>, tensor<1x4x1xf16>) -> tensor<1x4x8xf16>
  return %o : tensor<1x4x8xf16>
}

// expected-remark @+1 {{mirage-verify: @attn_loop is equivalent to @attn}}
func.func @attn_loop(%q: tensor<1x4x8xf16>, %k: tensor<1x8x8xf16>, %v: tensor<1x8x8xf16>) -> tensor<1x4x8xf16> attributes {mirage.candidate_of = @attn} {
  %o = kn.graph_def (%q, %k, %v) grid [1, 1, 1] block [128, 1, 1] forloop 2 dimx 64
      : (tensor<1x4x8xf16>, tensor<1x8x8xf16>, tensor<1x8x8xf16>) -> tensor<1x4x8xf16> {
  ^bb0(%a0: tensor<1x4x8xf16>, %a1: tensor<1x8x8xf16>, %a2: tensor<1x8x8xf16>):
    %tq = tb.input %a0 map <> : tensor<1x4x8xf16> -> tensor<1x4x8xf16>
    %tk = tb.input %a1 map <i -> 2> : tensor<1x8x8xf16> -> tensor<1x8x4xf16>
    %tv = tb.input %a2 map <i -> 1> : tensor<1x8x8xf16> -> tensor<1x4x8xf16>
    %s = tb.matmul %tq, %tk : (tensor<1x4x8xf16>, tensor<1x8x4xf16>) -> tensor<1x4x4xf16>
    %e = tb.exp %s : tensor<1x4x4xf16> -> tensor<1x4x4xf16>
    %n = tb.matmul %e, %tv : (tensor<1x4x4xf16>, tensor<1x4x8xf16>) -> tensor<1x4x8xf16>
    %an = tb.forloop_accum none %n : tensor<1x4x8xf16> -> tensor<1x4x8xf16>
    %ad = tb.forloop_accum sum %e : tensor<1x4x4xf16> -> tensor<1x4x1xf16>
    %o = tb.div %an, %ad : (tensor<1x4x8xf16>, tensor<1x4x1xf16>) -> tensor<1x4x8xf16>
    tb.output %o map <> : tensor<1x4x8xf16>
  }
  return %o : tensor<1x4x8xf16>
}

// -----

// expected-error @+1 {{mirage-verify: @orphan is a candidate of @missing, which is not a function of this module}}
func.func @orphan(%x: tensor<4x8xf16>) -> tensor<4x8xf16> attributes {mirage.candidate_of = @missing} {
  %0 = kn.exp %x : tensor<4x8xf16> -> tensor<4x8xf16>
  return %0 : tensor<4x8xf16>
}
