//===- BlockOps.td - tb dialect operations -----------------*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_TD
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_TD

include "mirage/Dialect/Block/IR/BlockDialect.td"
include "mirage/Dialect/Block/IR/BlockAttrs.td"
include "mirage/Dialect/Common/MirageBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Every tb op sits directly in a kn.graph_def body (`nesting` rule).
defvar InGraphDef = MirageNestedIn<"::mirage::kn::GraphDefOp">;

//===----------------------------------------------------------------------===//
// Iterators and savers
//===----------------------------------------------------------------------===//

def Block_InputOp : Block_Op<"input", [InGraphDef, Pure]> {
  let summary = "input iterator: the tile of a device tensor this block reads";
  let description = [{
    For block (bx, by, bz) at for-loop iteration k the tile is the slice of the
    device tensor (a region argument of the enclosing `kn.graph_def`) where each
    tensor dim `d` is split into equal parts by the grid dims and `i` that map to
    it, outer to inner in the order x, y, z, i. Tile dim d = D[d] / (product of the
    grid sizes mapping to d) / (forloop range if `i` maps to d).

    Example:

    ```mlir
    %tw = tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
    ```

    Verified rules: `[map]` (mapped dims exist; the operand is a region argument),
    `[divisibility]` (partitioned dims divide evenly; the tile type is the slice),
    `[dtype]`.

    `k_chunk` (optional) stages the tile: the one `tb.matmul` that reads it, whose
    other operand is a `tb.input` staged alike, reads both k_chunk at a time along
    the dim it contracts, through a ring of chunks, so that the whole tile never
    sits in shared memory (`[stage]`, checked by the enclosing `kn.graph_def`; its
    `[smem]` counts two chunks). The values are those of the tile without it.

    ```mlir
    %ta = tb.input %a0 map <y -> 0> {k_chunk = 64 : i64} : tensor<512x1024xf16> -> tensor<64x1024xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$source, Block_MapAttr:$map, OptionalAttr<I64Attr>:$k_chunk);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat =
      "$source `map` $map attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Block_OutputOp : Block_Op<"output", [InGraphDef]> {
  let summary = "output saver: writes this block's tile of a kernel result";
  let description = [{
    The block writes its tile to the slice of the k-th result of the enclosing
    `kn.graph_def` (for the k-th `tb.output` of the body), given by the map as for
    `tb.input`: result dim d = T[d] × (grid sizes mapping to d) × (forloop range if
    `i` maps to d). Every grid dim of size > 1 must be mapped (else blocks would
    overwrite each other).

    Example:

    ```mlir
    tb.output %to map <x -> 1> : tensor<16x64xf16>
    ```

    Verified rules: `[map]`, `[omap]`, `[dtype]`.
  }];
  let arguments = (ins Mirage_Tensor:$value, Block_MapAttr:$map);
  let assemblyFormat = "$value `map` $map attr-dict `:` type($value)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Compute ops on tiles (as the kn ops of the same name)
//===----------------------------------------------------------------------===//

class Block_BinaryOp<string mnemonic, string what>
    : Block_Op<mnemonic, [InGraphDef, Pure]> {
  let summary = "element-wise " # what # " of two tiles (broadcasting)";
  let description = [{
    Element-wise }] # what # [{ of two shared-memory tiles,
    broadcasting like numpy (as `kn.}] # mnemonic # [{`).

    Example:

    ```mlir
    }] # "%r = tb." # mnemonic # [{ %a, %b : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$lhs, Mirage_Tensor:$rhs);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyElementwiseBinary(getOperation());
    }
  }];
}

def Block_AddOp : Block_BinaryOp<"add", "addition">;
def Block_SubOp : Block_BinaryOp<"sub", "subtraction">;
def Block_MulOp : Block_BinaryOp<"mul", "multiplication">;
def Block_DivOp : Block_BinaryOp<"div", "division">;
def Block_PowOp : Block_BinaryOp<"pow", "power `lhs ** rhs`">;

class Block_UnaryOp<string mnemonic, string what>
    : Block_Op<mnemonic, [InGraphDef, Pure]> {
  let summary = "element-wise " # what # " of a tile";
  let description = [{
    Element-wise }] # what # [{ of a shared-memory tile; the
    result has the operand's type.

    Example:

    ```mlir
    }] # "%r = tb." # mnemonic # [{ %a : tensor<16x64xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyElementwiseUnary(getOperation());
    }
  }];
}

def Block_ExpOp : Block_UnaryOp<"exp", "exponential `exp(x)`">;
def Block_SqrtOp : Block_UnaryOp<"sqrt", "square root `sqrt(x)`">;
def Block_RsqrtOp : Block_UnaryOp<"rsqrt", "reciprocal square root `1/sqrt(x)`">;
def Block_SquareOp : Block_UnaryOp<"square", "square `x*x`">;
def Block_SiluOp : Block_UnaryOp<"silu", "SiLU `x*sigmoid(x)`">;
def Block_GeluOp : Block_UnaryOp<"gelu", "GELU">;
def Block_ReluOp : Block_UnaryOp<"relu", "ReLU `max(x, 0)`">;
def Block_SigmoidOp : Block_UnaryOp<"sigmoid", "logistic sigmoid `1/(1+exp(-x))`">;

def Block_ClampOp : Block_Op<"clamp", [InGraphDef, Pure]> {
  let summary = "element-wise clamp of a tile to [min, max]";
  let description = [{
    As `kn.clamp`, on a shared-memory tile: `min(max(x, min_val), max_val)`.

    Example:

    ```mlir
    %r = tb.clamp %a min 0.0 max 6.0 : tensor<16x64xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, Mirage_ScalarValue:$min_val,
                       Mirage_ScalarValue:$max_val);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input `min` custom<ScalarValue>($min_val) `max` "
                       "custom<ScalarValue>($max_val) attr-dict `:` type($input) "
                       "`->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyElementwiseUnary(getOperation());
    }
  }];
}

def Block_MulScalarOp : Block_Op<"mul_scalar", [InGraphDef, Pure]> {
  let summary = "multiplication of a tile by a scalar";
  let description = [{
    As `kn.mul_scalar`, on a shared-memory tile: `x * scalar` (Mirage's
    `TBGraph.mul_scalar`).

    Example:

    ```mlir
    %r = tb.mul_scalar %a, 0.125 : tensor<16x64xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, Mirage_ScalarValue:$scalar);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input `,` custom<ScalarValue>($scalar) attr-dict `:` "
                       "type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyElementwiseUnary(getOperation());
    }
  }];
}

def Block_MatmulOp : Block_Op<"matmul", [InGraphDef, Pure]> {
  let summary = "batched matrix multiplication of tiles";
  let description = [{
    As `kn.matmul`, on shared-memory tiles: contracts the last dim of `lhs` with
    the second-to-last of `rhs`; equal ranks (≥ 2) and equal batch dims.

    Example:

    ```mlir
    %tm = tb.matmul %tx, %tw : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$lhs, Mirage_Tensor:$rhs);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyMatmul(getOperation());
    }
  }];
}

def Block_ConstantOp : Block_Op<"constant", [InGraphDef, Pure]> {
  let summary = "a tile filled with one scalar";
  let description = [{
    As `kn.constant`, for a shared-memory tile.

    Example:

    ```mlir
    %c = tb.constant 1.0e-06 : tensor<16x1xf32>
    ```
  }];
  let arguments = (ins Mirage_ScalarValue:$value);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "custom<ScalarValue>($value) attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyConstant(getOperation());
    }
  }];
}

class Block_ReduceOp<string mnemonic, string what>
    : Block_Op<mnemonic, [InGraphDef, Pure]> {
  let summary = what # " of a tile along one dim, keeping the rank";
  let description = [{
    }] # what # [{ along `dim` (as `kn.}] # mnemonic # [{`); the
    reduced dim becomes 1.

    Example:

    ```mlir
    }] # "%r = tb." # mnemonic # [{ %a {dim = 1 : i64} : tensor<16x64xf16> -> tensor<16x1xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, I64Attr:$dim);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyReduction(getOperation(), getDim());
    }
  }];
}

def Block_ReductionOp : Block_ReduceOp<"reduction", "Sum">;
def Block_ReduceMaxOp : Block_ReduceOp<"reduce_max", "Maximum">;

def Block_ReductionMaxOp : Block_Op<"reduction_max", [InGraphDef, Pure]> {
  let summary = "running maximum of a tile along one dim, and its change (online softmax)";
  let description = [{
    Mirage's `reduction_max(A, dim)`: `max` is the maximum along `dim` (kept as a
    dim of size 1) of this iteration's tile and of every earlier for-loop
    iteration's (a running maximum, per block); `diff` is the previous running
    maximum minus the new one (≤ 0), and 0 at the first iteration. Outside the
    for-loop (one iteration, or after an accumulator) `max` is the tile's maximum
    and `diff` is 0. `exp(diff)` is the factor that rescales what
    `tb.forloop_accum_rescale` has accumulated so far.

    Example:

    ```mlir
    %m:2 = tb.reduction_max %a {dim = 2 : i64} : tensor<1x64x16xf16> -> (tensor<1x64x1xf16>, tensor<1x64x1xf16>)
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, I64Attr:$dim);
  let results = (outs Mirage_Tensor:$max, Mirage_Tensor:$diff);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` `(` type($max) `,` "
                       "type($diff) `)`";
  let hasVerifier = 1;
}

def Block_ConcatOp : Block_Op<"concat", [InGraphDef, Pure]> {
  let summary = "concatenation of two tiles along one dim";
  let description = [{
    As `kn.concat`, on shared-memory tiles.

    Example:

    ```mlir
    %r = tb.concat %a, %b {dim = 1 : i64} : (tensor<16x32xf16>, tensor<16x32xf16>) -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$lhs, Mirage_Tensor:$rhs, I64Attr:$dim);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyConcat(getOperation(), getDim());
    }
  }];
}

def Block_ReshapeOp : Block_Op<"reshape", [InGraphDef, Pure]> {
  let summary = "row-major reshape of a tile";
  let description = [{
    As `kn.reshape`, on a shared-memory tile.

    Example:

    ```mlir
    %r = tb.reshape %a : tensor<16x64xf16> -> tensor<16x2x32xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyReshape(getOperation());
    }
  }];
}

def Block_TransposeOp : Block_Op<"transpose", [InGraphDef, Pure]> {
  let summary = "permutation of a tile's dims";
  let description = [{
    As `kn.transpose`, on a shared-memory tile.

    Example:

    ```mlir
    %r = tb.transpose %a {permutation = array<i64: 1, 0>} : tensor<16x64xf16> -> tensor<64x16xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyTranspose(getOperation(), getPermutation());
    }
  }];
}

def Block_RepeatOp : Block_Op<"repeat", [InGraphDef, Pure]> {
  let summary = "tiling repetition of a tile (`numpy.tile`)";
  let description = [{
    As `kn.repeat`, on a shared-memory tile.

    Example:

    ```mlir
    %r = tb.repeat %a {repeats = array<i64: 1, 4>} : tensor<16x16xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, DenseI64ArrayAttr:$repeats);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyRepeat(getOperation(), getRepeats());
    }
  }];
}

def Block_RmsNormOp : Block_Op<"rms_norm", [InGraphDef, Pure]> {
  let summary = "RMS normalization of the tile's last dim";
  let description = [{
    `x / sqrt(mean(x², last dim))` over the last dim of the tile; the result has
    the operand's type.

    Example:

    ```mlir
    %r = tb.rms_norm %a : tensor<16x64xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifyElementwiseUnary(getOperation());
    }
  }];
}

def Block_ReductionToDimxOp : Block_Op<"reduction_to_dimx", [InGraphDef, Pure]> {
  let summary = "sums the tile's last dim down to dimx";
  let description = [{
    Sums the last dim down to the enclosing kernel's `dimx`: R[-1] = dimx and
    element j is the sum of A[..., k·dimx + j]. The last dim must be a multiple of
    dimx (`[dimx]` rule).

    Example (in a `kn.graph_def` with `dimx 64`):

    ```mlir
    %r = tb.reduction_to_dimx %a : tensor<16x256xf16> -> tensor<16x64xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// For-loop accumulator
//===----------------------------------------------------------------------===//

def Block_ForloopAccumOp : Block_Op<"forloop_accum", [InGraphDef, Pure]> {
  let summary = "for-loop accumulator";
  let description = [{
    Accumulates a tile across the for-loop iterations of the enclosing
    `kn.graph_def`. Ops before an accumulator run every iteration; ops after it
    run once, after the loop. Kinds (Mirage names; `none` is Mirage's `None`):

    | kind | R | value after the loop |
    |---|---|---|
    | `none` | A | element-wise sum over iterations |
    | `sum` | A with last dim 1 | sum over iterations and the tile's last dim |
    | `mean` | A with last dim 1 | that sum / (iterations × A[-1]) |
    | `rms` | A with last dim 1 | sqrt(sum of squares / (iterations × A[-1])) |
    | `max` | A | element-wise max over iterations |
    | `sum_todimx` | A with last dim `dimx` | sum over iterations of `reduction_to_dimx` |

    The result may have a different element type (precision) than the input.

    Example:

    ```mlir
    %ax = tb.forloop_accum rms %tx : tensor<16x64xf16> -> tensor<16x1xf32>
    ```
  }];
  let arguments = (ins Block_AccumKind:$kind, Mirage_Tensor:$input);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$kind $input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Block_ForloopAccumRescaleOp : Block_Op<"forloop_accum_rescale", [InGraphDef, Pure]> {
  let summary = "for-loop accumulator that rescales what it holds (online softmax)";
  let description = [{
    Mirage's `forloop_accum_rescale(A, rescale, acc)`: every iteration
    `acc = acc * rescale + A` (acc starts at 0), with `A`'s last dim first summed
    to 1 for kind `sum`; kind `none` keeps `A`'s shape. Only the kinds `none` and
    `sum` exist. `rescale` broadcasts to the result's shape (typically one factor
    per row, `exp(diff)` of `tb.reduction_max`). An accumulator: ops after it run
    once, after the loop, and it counts as one for the `[accumulator]` rule.

    Example:

    ```mlir
    %o = tb.forloop_accum_rescale sum %e, %s : (tensor<1x64x16xf16>, tensor<1x64x1xf16>) -> tensor<1x64x1xf16>
    ```
  }];
  let arguments = (ins Block_AccumKind:$kind, Mirage_Tensor:$input,
                       Mirage_Tensor:$rescale);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$kind $input `,` $rescale attr-dict `:` `(` type($input) `,` "
                       "type($rescale) `)` `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Thread graph
//===----------------------------------------------------------------------===//

def Block_ThreadGraphOp : Block_Op<"thread_graph", [
    InGraphDef, IsolatedFromAbove, SingleBlock, RecursiveMemoryEffects]> {
  let summary = "a fused element-wise chain run in registers (thread graph)";
  let description = [{
    The body (`th` ops ending in `th.yield`) is a scalar function applied
    element-wise to the operand tiles, which broadcast like the element-wise ops.
    The region has one scalar argument per operand, of the operand's element type;
    results have the broadcast shape and the yielded element types.

    Example:

    ```mlir
    %r = tb.thread_graph (%a, %b) : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16> {
    ^bb0(%x: f16, %y: f16):
      %q = th.div %x, %y : f16
      %s = th.silu %q : f16
      th.yield %s : f16
    }
    ```
  }];
  let arguments = (ins Variadic<Mirage_Tensor>:$inputs);
  let results = (outs Variadic<Mirage_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "` ` `(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_TD
