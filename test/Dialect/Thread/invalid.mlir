// RUN: mirage-opt %s --split-input-file --verify-diagnostics
// One case per validity rule checked on th ops (docs/ir.md).

func.func @dtype(%a: tensor<4xf16>) -> tensor<4xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4xf16>) -> tensor<4xf16> {
  ^bb0(%a0: tensor<4xf16>):
    %t = tb.input %a0 map <> : tensor<4xf16> -> tensor<4xf16>
    %r = tb.thread_graph (%t) : (tensor<4xf16>) -> tensor<4xf16> {
    ^bb0(%x: f16):
      // expected-error @+1 {{[dtype] result #0 has element type 'f64'; expected f16, bf16 or f32}}
      %c = th.constant 1.0 : f64
      th.yield %x : f16
    }
    tb.output %r map <> : tensor<4xf16>
  }
  return %o : tensor<4xf16>
}

// -----

func.func @nesting(%a: tensor<4xf16>) -> tensor<4xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4xf16>) -> tensor<4xf16> {
  ^bb0(%a0: tensor<4xf16>):
    // expected-error @+1 {{[nesting] 'th.constant' must be nested directly in 'tb.thread_graph', not in 'kn.graph_def'}}
    %c = th.constant 1.0 : f16
    %t = tb.input %a0 map <> : tensor<4xf16> -> tensor<4xf16>
    tb.output %t map <> : tensor<4xf16>
  }
  return %o : tensor<4xf16>
}

// -----

func.func @clamp_dtype(%a: tensor<4xf16>) -> tensor<4xf16> {
  %o = kn.graph_def (%a) grid [1, 1, 1] block [32, 1, 1] forloop 1 dimx 1
      : (tensor<4xf16>) -> tensor<4xf16> {
  ^bb0(%a0: tensor<4xf16>):
    %t = tb.input %a0 map <> : tensor<4xf16> -> tensor<4xf16>
    %r = tb.thread_graph (%t) : (tensor<4xf16>) -> tensor<4xf16> {
    ^bb0(%p: f16):
      // expected-error @+1 {{requires the same type for all operands and results}}
      %0 = "th.clamp"(%p) {min_val = 0.0 : f64, max_val = 1.0 : f64} : (f16) -> f32
      th.yield %p : f16
    }
    tb.output %r map <> : tensor<4xf16>
  }
  return %o : tensor<4xf16>
}
