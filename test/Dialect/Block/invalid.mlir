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
