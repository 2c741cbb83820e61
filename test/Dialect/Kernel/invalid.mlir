// RUN: mirage-opt %s --split-input-file --verify-diagnostics
// One case per validity rule checked on kn ops (docs/ir.md).

func.func @shape(%a: tensor<16x64xf16>, %b: tensor<32x8xf16>) {
  // expected-error @+1 {{[shape] contracted dims differ: lhs dim 1 is 64, rhs dim 0 is 32}}
  %0 = kn.matmul %a, %b : (tensor<16x64xf16>, tensor<32x8xf16>) -> tensor<16x8xf16>
  return
}

// -----

func.func @dtype(%a: tensor<16x64xf16>, %b: tensor<16x64xf32>) {
  // expected-error @+1 {{[dtype] operand #1 has element type 'f32' but operand #0 has 'f16'}}
  %0 = kn.add %a, %b : (tensor<16x64xf16>, tensor<16x64xf32>) -> tensor<16x64xf16>
  return
}

// -----

func.func @launch(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] grid [0, 1, 1] must have 3 positive entries}}
  %o = kn.graph_def (%a) grid [0, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// negative forloop and dimx (read as unsigned, they passed or were misreported)
func.func @launch_negative_forloop(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] forloop -4 must be >= 1}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop -4 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @launch_negative_dimx(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] dimx -64 must be >= 1}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx -64
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// CUDA's launch limits (dims near 2^63 used to pass and break the lowering)
func.func @launch_huge_block(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] block [9223372036854775807, 1, 1]: x = 9223372036854775807 exceeds the CUDA limit 1024}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [9223372036854775807, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @launch_huge_grid(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] grid [1, 9223372036854775806, 1]: y = 9223372036854775806 exceeds the CUDA limit 65535}}
  %o = kn.graph_def (%a) grid [1, 9223372036854775806, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @launch_threads(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] block [1024, 2, 1] has 2048 threads, more than the CUDA limit of 1024 per block}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [1024, 2, 1] forloop 1 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @launch_huge_forloop(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] forloop 9223372036854775807 must be <= 2147483647}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 9223372036854775807 dimx 1
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %t map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

func.func @accumulator(%a: tensor<16x4096xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 64 dimx 1
      : (tensor<16x4096xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x4096xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
    %e = tb.exp %t : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[accumulator] with forloop 64, a path from a loop-varying tb.input to tb.output #0 passes no tb.forloop_accum}}
    tb.output %e map <> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// 128x1024xf16 = 256 KiB > 227 KiB.
func.func @smem(%a: tensor<128x1024xf16>) -> tensor<128x1024xf16> {
  // expected-error @+1 {{[smem] the block graph's tiles need 262144 bytes of shared memory, more than the capacity of 232448 bytes}}
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<128x1024xf16>) -> tensor<128x1024xf16> {
  ^bb0(%a0: tensor<128x1024xf16>):
    %t = tb.input %a0 map <> : tensor<128x1024xf16> -> tensor<128x1024xf16>
    tb.output %t map <> : tensor<128x1024xf16>
  }
  return %o : tensor<128x1024xf16>
}

// -----

// A staged tb.input's matmul reads its other operand whole.
func.func @stage(%a: tensor<64x1024xf16>, %b: tensor<1024x64xf16>) -> tensor<64x64xf16> {
  %o = kn.graph_def (%a, %b) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<64x1024xf16>, tensor<1024x64xf16>) -> tensor<64x64xf16> {
  ^bb0(%a0: tensor<64x1024xf16>, %a1: tensor<1024x64xf16>):
    // expected-error @+1 {{[stage] the other operand of the tb.matmul reading a staged tb.input must be a tb.input staged alike (k_chunk = 64)}}
    %ta = tb.input %a0 map <> {k_chunk = 64 : i64} : tensor<64x1024xf16> -> tensor<64x1024xf16>
    %tb = tb.input %a1 map <> : tensor<1024x64xf16> -> tensor<1024x64xf16>
    %c = tb.matmul %ta, %tb : (tensor<64x1024xf16>, tensor<1024x64xf16>) -> tensor<64x64xf16>
    tb.output %c map <> : tensor<64x64xf16>
  }
  return %o : tensor<64x64xf16>
}

// -----

// A staged tile read by a second op (and twice by the matmul).
func.func @stage_read_twice(%a: tensor<64x64xf16>) -> tensor<64x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 1
      : (tensor<64x64xf16>) -> tensor<64x64xf16> {
  ^bb0(%a0: tensor<64x64xf16>):
    // expected-error @+1 {{[stage] a staged tb.input (k_chunk = 32) must be read by one tb.matmul alone}}
    %ta = tb.input %a0 map <> {k_chunk = 32 : i64} : tensor<64x64xf16> -> tensor<64x64xf16>
    %e = tb.exp %ta : tensor<64x64xf16> -> tensor<64x64xf16>
    %c = tb.matmul %ta, %ta : (tensor<64x64xf16>, tensor<64x64xf16>) -> tensor<64x64xf16>
    tb.output %c map <> : tensor<64x64xf16>
  }
  return %o : tensor<64x64xf16>
}

// -----

func.func @clamp_shape(%a: tensor<16x64xf16>) {
  // expected-error @+1 {{[shape] result shape [16, 1] must equal the operand shape [16, 64]}}
  %0 = kn.clamp %a min 0.0 max 1.0 : tensor<16x64xf16> -> tensor<16x1xf16>
  return
}

// -----

func.func @pow_shape(%a: tensor<16x64xf16>, %b: tensor<16x32xf16>) {
  // expected-error @+1 {{[shape] operand shapes [16, 64] and [16, 32] do not broadcast}}
  %0 = kn.pow %a, %b : (tensor<16x64xf16>, tensor<16x32xf16>) -> tensor<16x64xf16>
  return
}

// -----

func.func @mul_scalar_dtype(%a: tensor<16x64xf16>) {
  // expected-error @+1 {{[dtype] result #0 has element type 'f32' but operand #0 has 'f16'}}
  %0 = kn.mul_scalar %a, 2.0 : tensor<16x64xf16> -> tensor<16x64xf32>
  return
}

// -----

func.func @kn_op_in_a_block_graph(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %0 = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64 : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %b0 = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[nesting] 'kn.square' does not exist at the block level}}
    %b1 = kn.square %b0 : tensor<16x64xf16> -> tensor<16x64xf16>
    tb.output %b1 map <> : tensor<16x64xf16>
  }
  return %0 : tensor<16x64xf16>
}

// -----

// A kernel that writes nothing (the Python builder's rule; C++ accepted it).
func.func @launch_no_output(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  // expected-error @+1 {{[launch] the block graph has no output (no tb.output)}}
  kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64 : (tensor<16x64xf16>) -> () {
  ^bb0(%a0: tensor<16x64xf16>):
    %b0 = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
  }
  return %a : tensor<16x64xf16>
}

// -----

// An output that maps i is saved inside the loop: with forloop 1 too, no accumulator
// on the way to it (the Python builder's rule; C++ checked it with forloop > 1 only).
func.func @accumulator_saved_every_iteration_forloop1(%a: tensor<16x64xf16>) -> tensor<16x64xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 1 dimx 64
      : (tensor<16x64xf16>) -> tensor<16x64xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <i -> 1> : tensor<16x64xf16> -> tensor<16x64xf16>
    %s = tb.forloop_accum none %t : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[accumulator] tb.output #0 maps the for-loop dim i (saved every iteration) but a path from a tb.input to it passes a tb.forloop_accum}}
    tb.output %s map <i -> 1> : tensor<16x64xf16>
  }
  return %o : tensor<16x64xf16>
}

// -----

// ... and from a loop-invariant input neither.
func.func @accumulator_saved_every_iteration_invariant(%a: tensor<16x64xf16>) -> tensor<16x256xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [128, 1, 1] forloop 4 dimx 64
      : (tensor<16x64xf16>) -> tensor<16x256xf16> {
  ^bb0(%a0: tensor<16x64xf16>):
    %t = tb.input %a0 map <> : tensor<16x64xf16> -> tensor<16x64xf16>
    %s = tb.forloop_accum max %t : tensor<16x64xf16> -> tensor<16x64xf16>
    // expected-error @+1 {{[accumulator] tb.output #0 maps the for-loop dim i}}
    tb.output %s map <i -> 1> : tensor<16x64xf16>
  }
  return %o : tensor<16x256xf16>
}
