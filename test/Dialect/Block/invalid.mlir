// RUN: mirage-opt %s --split-input-file --verify-diagnostics
// One case per validity rule checked on tb ops (docs/ir.md).

func.func @shape(%a: tensor<16x64xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] result shape [16, 64] of accumulator 'rms' must be [16, 1] for operand [16, 64]}}
    %r = tb.forloop_accum rms %t : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %r map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @dtype(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    // expected-error @+1 {{[dtype] result #0 has element type 'f32' but operand #0 has 'f16'}}
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf32>
    tb.output %t map <> : tensor<16x64xf32>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @map(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [2, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    // expected-error @+1 {{[map] 'x' maps to tensor dim 2 but the input has rank 2}}
    %t = tb.input %a0 map <x -> 2> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <x -> 0> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @divisibility(%a: tensor<16x100xf16>) -> tensor<16x100xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 64 dimx 1
      : (tensor<16x100xf16>) -> tensor<16x100xf16> {
  ^bb0(%a0: tensor<16x100xf16>):
    // expected-error @+1 {{[divisibility] tensor dim 1 of size 100 is not divisible into 64 parts}}
    %t = tb.input %a0 map <i -> 1> : tensor<16x100xf16> -> tensor<16x1xf16>
    tb.output %t map <i -> 1> : tensor<16x1xf16>
  }
  return %o : tensor<16x100xf16>
}

// -----

func.func @omap(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [4, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <x -> 1> : tensor<16x64xf16> -> tensor<16x16xf16>
    // expected-error @+1 {{[omap] grid dim 'x' has size 4 but is not mapped to a tensor dim}}
    tb.output %t map <> : tensor<16x16xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @dimx(%a: tensor<16x96xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64
      : (tensor<16x96xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x96xf16>):
    %t = tb.input %a0 map <> : tensor<16x96xf16> -> tensor<16x96xf16>
    // expected-error @+1 {{[dimx] the last dim of the operand shape [16, 96] must be a multiple of dimx 64}}
    %r = tb.reduction_to_dimx %t : tensor<16x96xf16> -> tensor<16x64xf16>
    tb.output %r map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @nesting() {
  // expected-error @+1 {{[nesting] 'tb.constant' must be nested directly in 'kn.graph_def', not in 'func.func'}}
  %c = tb.constant 1.0 : tensor<4xf16>
  return
}

// -----

func.func @reduction_max_shape(%a: tensor<16x64xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] the diff result's shape [16, 64] must equal the max result's shape [16, 1]}}
    %m:2 = tb.reduction_max %t {dim = 1 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x64xf16>)
    tb.output %m#0 map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @reduction_max_dim(%a: tensor<16x64xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] reduction dim 2 is out of range for operand shape [16, 64]}}
    %m:2 = tb.reduction_max %t {dim = 2 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x1xf16>)
    tb.output %m#0 map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @rescale_kind(%a: tensor<16x256xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<16x256xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x256xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    %m:2 = tb.reduction_max %t {dim = 1 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x1xf16>)
    // expected-error @+1 {{[accumulator] tb.forloop_accum_rescale takes the kinds none and sum, not 'mean'}}
    %r = tb.forloop_accum_rescale mean %t, %m#1 : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x1xf16>
    tb.output %r map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @rescale_shape(%a: tensor<16x256xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<16x256xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x256xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    %m:2 = tb.reduction_max %t {dim = 1 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x1xf16>)
    // expected-error @+1 {{[shape] result shape [16, 64] of rescale accumulator 'sum' must be [16, 1] for operand [16, 64]}}
    %r = tb.forloop_accum_rescale sum %t, %m#1 : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16>
    tb.output %r map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @rescale_factor(%a: tensor<16x256xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<16x256xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x256xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] the rescale factor's shape [16, 64] must broadcast to the accumulator's shape [16, 1]}}
    %r = tb.forloop_accum_rescale sum %t, %t : (tensor<16x64xf16>, tensor<16x64xf16>) -> tensor<16x1xf16>
    tb.output %r map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

// A rescaling accumulator counts for the [accumulator] rule like tb.forloop_accum.
func.func @rescale_accumulator(%a: tensor<16x256xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<16x256xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x256xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    %m:2 = tb.reduction_max %t {dim = 1 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x1xf16>)
    %r = tb.forloop_accum_rescale sum %t, %m#1 : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x1xf16>
    %s = tb.add %r, %m#0 : (tensor<16x1xf16>, tensor<16x1xf16>) -> tensor<16x1xf16>
    // expected-error @+1 {{[accumulator] with forloop 4, a path from a loop-varying tb.input to tb.output #0 passes no tb.forloop_accum}}
    tb.output %s map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @rescale_twice(%a: tensor<16x256xf16>) -> tensor<16x1xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 1
      : (tensor<16x256xf16>) -> tensor<16x1xf16> {
  ^bb0(%a0: tensor<16x256xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x256xf16> -> tensor<16x64xf16>
    %m:2 = tb.reduction_max %t {dim = 1 : i64} : tensor<16x64xf16> -> (tensor<16x1xf16>, tensor<16x1xf16>)
    %r = tb.forloop_accum_rescale sum %t, %m#1 : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x1xf16>
    // expected-error @+1 {{[accumulator] a path from a tb.input passes two tb.forloop_accum ops}}
    %s = tb.forloop_accum none %r : tensor<16x1xf16> -> tensor<16x1xf16>
    tb.output %s map <> : tensor<16x1xf16>
  }
  return %o : tensor<16x1xf16>
}

// -----

func.func @reshape_count(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] reshape from [16, 64] (1024 elements) to [16, 32] (512 elements) changes the element count}}
    %r = tb.reshape %t : tensor<16x64xf16> -> tensor<16x32xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @transpose_perm(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] permutation [0, 0] is not a permutation of the 2 dims of [16, 64]}}
    %r = tb.transpose %t {permutation = array<i64: 0, 0>} : tensor<16x64xf16> -> tensor<16x16xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @repeat_result(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[shape] result shape [16, 64] must be [16, 128] (operand [16, 64] repeated [1, 2])}}
    %r = tb.repeat %t {repeats = array<i64: 1, 2>} : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// The optimizer's plan attributes: `tb.layout` must fit the tile it is on.
func.func @layout_inner(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    // expected-error @+1 {{[layout] tb.layout #tb.layout<inner = 2, swizzle = 0> does not fit a tile of shape [16, 64] (inner: a dim of the tile; swizzle: 0, 32, 64 or 128 bytes dividing the row of 0 bytes)}}
    %t = tb.input %a0 map <> {tb.layout = #tb.layout<inner = 2, swizzle = 0>} : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @layout_row(%a: tensor<16x8xf16>) -> tensor<16x8xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x8xf16>) -> tensor<16x8xf16> {
  ^bb0(%a0: tensor<16x8xf16>):
    // expected-error @+1 {{[layout] tb.layout #tb.layout<inner = 1, swizzle = 32> does not fit a tile of shape [16, 8] (inner: a dim of the tile; swizzle: 0, 32, 64 or 128 bytes dividing the row of 16 bytes)}}
    %t = tb.input %a0 map <> {tb.layout = #tb.layout<inner = 1, swizzle = 32>} : tensor<16x8xf16> -> tensor<16x8xf16>
    tb.output %t map <> : tensor<16x8xf16>
  }
  return %o : tensor<16x8xf16>
}

// -----

func.func @layout_swizzle(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    // expected-error @+1 {{[layout] #tb.layout swizzle = 48: 0, 32, 64 or 128 bytes}}
    %t = tb.input %a0 map <> {tb.layout = #tb.layout<inner = 1, swizzle = 48>} : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @layout_form(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    // expected-error @+1 {{[layout] tb.layout must be a #tb.layout<inner = D, swizzle = S>}}
    %t = tb.input %a0 map <> {tb.layout = {inner = 1 : i64, swizzle = 0 : i64}} : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// `tb.smem`: kernel -> #tb.smem on the kn.graph_def, offsets aligned to 128 bytes.
func.func @smem_align(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[smem] #tb.smem offset 64 of in0 is not a non-negative multiple of 128}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1 {tb.smem = {full = #tb.smem<stages = 1, offsets = {in0 = 64 : i64}>}}
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @smem_stages(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[smem] #tb.smem stages = 0: a ring of >= 1 stages}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1 {tb.smem = {full = #tb.smem<stages = 0, offsets = {in0 = 0 : i64}>}}
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @smem_kernel(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[smem] tb.smem on a kn.graph_def is {<kernel> = #tb.smem<stages = S, offsets = {<buffer> = <bytes> : i64, ...}>, ...} with <kernel> full, partial or combine}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1 {tb.smem = {all = #tb.smem<stages = 1, offsets = {in0 = 0 : i64}>}}
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}
