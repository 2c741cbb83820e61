//===- KernelOps.td - kn dialect operations ----------------*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_TD
#define MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_TD

include "mirage/Dialect/Kernel/IR/KernelDialect.td"
include "mirage/Dialect/Common/MirageBase.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Element-wise binary ops
//===----------------------------------------------------------------------===//

class Kernel_BinaryOp<string mnemonic, string what>
    : Kernel_Op<mnemonic, [Pure]> {
  let summary = "element-wise " # what # " of two device tensors (broadcasting)";
  let description = [{
    Element-wise }] # what # [{ of two device tensors. Shapes
    broadcast like numpy: right-aligned, a missing or size-1 dim broadcasts; the
    result has the broadcast shape. Operands and result share one element type.

    Example:

    ```mlir
    }] # "%r = kn." # mnemonic # [{ %a, %b : (tensor<16x4096xf16>, tensor<1x4096xf16>) -> tensor<16x4096xf16>
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

def Kernel_AddOp : Kernel_BinaryOp<"add", "addition">;
def Kernel_SubOp : Kernel_BinaryOp<"sub", "subtraction">;
def Kernel_MulOp : Kernel_BinaryOp<"mul", "multiplication">;
def Kernel_DivOp : Kernel_BinaryOp<"div", "division">;
def Kernel_PowOp : Kernel_BinaryOp<"pow", "power `lhs ** rhs` (Mirage's `pow`)">;

//===----------------------------------------------------------------------===//
// Element-wise unary ops
//===----------------------------------------------------------------------===//

class Kernel_UnaryOp<string mnemonic, string what>
    : Kernel_Op<mnemonic, [Pure]> {
  let summary = "element-wise " # what # " of a device tensor";
  let description = [{
    Element-wise }] # what # [{ of a device tensor; the result has
    the operand's type.

    Example:

    ```mlir
    }] # "%r = kn." # mnemonic # [{ %a : tensor<16x4096xf16> -> tensor<16x4096xf16>
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

def Kernel_ExpOp : Kernel_UnaryOp<"exp", "exponential `exp(x)`">;
def Kernel_SqrtOp : Kernel_UnaryOp<"sqrt", "square root `sqrt(x)`">;
def Kernel_RsqrtOp : Kernel_UnaryOp<"rsqrt", "reciprocal square root `1/sqrt(x)`">;
def Kernel_SquareOp : Kernel_UnaryOp<"square", "square `x*x`">;
def Kernel_SiluOp : Kernel_UnaryOp<"silu", "SiLU `x*sigmoid(x)`">;
def Kernel_GeluOp : Kernel_UnaryOp<"gelu", "GELU">;
def Kernel_ReluOp : Kernel_UnaryOp<"relu", "ReLU `max(x, 0)`">;
def Kernel_SigmoidOp : Kernel_UnaryOp<"sigmoid", "logistic sigmoid `1/(1+exp(-x))`">;

def Kernel_ClampOp : Kernel_Op<"clamp", [Pure]> {
  let summary = "element-wise clamp of a device tensor to [min, max]";
  let description = [{
    `min(max(x, min_val), max_val)` element-wise (Mirage's `clamp`, with
    `torch.clamp`'s semantics: `min_val > max_val` gives `max_val`). The bounds
    are `f64` attributes written after `min` and `max`; the result has the
    operand's type.

    Example:

    ```mlir
    %r = kn.clamp %a min -1.0 max 1.0 : tensor<16x4096xf16> -> tensor<16x4096xf16>
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

def Kernel_MulScalarOp : Kernel_Op<"mul_scalar", [Pure]> {
  let summary = "multiplication of a device tensor by a scalar";
  let description = [{
    `x * scalar` element-wise (Mirage's `mul_scalar`); the scalar is an `f64`
    attribute written after the operand. The result has the operand's type.

    Example:

    ```mlir
    %r = kn.mul_scalar %a, 0.125 : tensor<16x4096xf16> -> tensor<16x4096xf16>
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

//===----------------------------------------------------------------------===//
// Other pre-defined kernels
//===----------------------------------------------------------------------===//

def Kernel_MatmulOp : Kernel_Op<"matmul", [Pure]> {
  let summary = "batched matrix multiplication";
  let description = [{
    Contracts the last dim of `lhs` with the second-to-last dim of `rhs`. Both have
    the same rank (≥ 2); the leading (batch) dims must be equal and are kept.

    Example:

    ```mlir
    %r = kn.matmul %a, %b : (tensor<16x4096xf16>, tensor<4096x6144xf16>) -> tensor<16x6144xf16>
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

def Kernel_ConstantOp : Kernel_Op<"constant", [Pure]> {
  let summary = "a device tensor filled with one scalar";
  let description = [{
    A tensor of the result type whose elements all equal `value` (an `f64`
    attribute, converted to the element type). The value prints in the shortest
    form that reads back exactly, always with a `.` (`1.0e-06`, `2.0`).

    Example:

    ```mlir
    %r = kn.constant 1.0e-06 : tensor<16x1xf32>
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

class Kernel_ReduceOp<string mnemonic, string what> : Kernel_Op<mnemonic, [Pure]> {
  let summary = what # " along one dim, keeping the rank";
  let description = [{
    }] # what # [{ along `dim`; the rank is kept: the reduced dim
    becomes 1.

    Example:

    ```mlir
    }] # "%r = kn." # mnemonic # [{ %a {dim = 1 : i64} : tensor<16x4096xf16> -> tensor<16x1xf16>
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

def Kernel_ReductionOp : Kernel_ReduceOp<"reduction", "Sum">;
def Kernel_ReduceMaxOp : Kernel_ReduceOp<"reduce_max", "Maximum">;

def Kernel_RmsNormOp : Kernel_Op<"rms_norm", [Pure]> {
  let summary = "RMS normalization over the trailing dims";
  let description = [{
    `x / sqrt(mean(x², trailing dims))` over the trailing dims named by
    `normalized_shape`, which must equal the operand's trailing dims. The result
    has the operand's type.

    Example:

    ```mlir
    %r = kn.rms_norm %a {normalized_shape = array<i64: 4096>} : tensor<16x4096xf16> -> tensor<16x4096xf16>
    ```
  }];
  let arguments = (ins Mirage_Tensor:$input, DenseI64ArrayAttr:$normalized_shape);
  let results = (outs Mirage_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kernel_ConcatOp : Kernel_Op<"concat", [Pure]> {
  let summary = "concatenation of two device tensors along one dim";
  let description = [{
    Concatenates `lhs` and `rhs` along `dim`; both have the same rank and equal
    sizes in every other dim.

    Example:

    ```mlir
    %r = kn.concat %a, %b {dim = 0 : i64} : (tensor<8x64xf16>, tensor<8x64xf16>) -> tensor<16x64xf16>
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

def Kernel_ReshapeOp : Kernel_Op<"reshape", [Pure]> {
  let summary = "row-major reshape";
  let description = [{
    Reinterprets the tensor in row-major order with a new shape of the same
    element count.

    Example:

    ```mlir
    %r = kn.reshape %a : tensor<16x4096xf16> -> tensor<16x32x128xf16>
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

def Kernel_TransposeOp : Kernel_Op<"transpose", [Pure]> {
  let summary = "permutation of dims";
  let description = [{
    Result dim `k` is operand dim `permutation[k]`.

    Example:

    ```mlir
    %r = kn.transpose %a {permutation = array<i64: 0, 2, 1>} : tensor<2x16x64xf16> -> tensor<2x64x16xf16>
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

def Kernel_RepeatOp : Kernel_Op<"repeat", [Pure]> {
  let summary = "tiling repetition (`numpy.tile`)";
  let description = [{
    Repeats the tensor `repeats[d]` times along each dim `d` (`numpy.tile`);
    `repeats` has one positive entry per dim.

    Example:

    ```mlir
    %r = kn.repeat %a {repeats = array<i64: 1, 4>} : tensor<16x64xf16> -> tensor<16x256xf16>
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

//===----------------------------------------------------------------------===//
// Graph-defined kernel
//===----------------------------------------------------------------------===//

def Kernel_GraphDefOp : Kernel_Op<"graph_def", [
    IsolatedFromAbove, SingleBlock, NoTerminator,
    RegionKindInterface, HasOnlyGraphRegion]> {
  let summary = "a graph-defined kernel whose body is a block graph";
  let description = [{
    A kernel defined by a block graph (`tb` ops) run by every thread block of the
    grid. `grid [x, y, z]` and `block [x, y, z]` are the launch dims, `forloop N`
    the for-loop range (1 = no loop) and `dimx D` the `reduction_dimx` of the
    Mirage API (the width `tb.reduction_to_dimx` and `tb.forloop_accum sum_todimx`
    reduce to).

    The single region block has one argument per operand, of the operand's type;
    the region is a graph region without terminator. The k-th `tb.output` in the
    body defines the k-th result.

    Example:

    ```mlir
    %o = kn.graph_def (%x, %w) grid [64, 1, 1] block [128, 1, 1] forloop 64 dimx 64
        : (tensor<16x4096xf16>, tensor<4096x4096xf16>) -> tensor<16x4096xf16> {
    ^bb0(%a0: tensor<16x4096xf16>, %a1: tensor<4096x4096xf16>):
      %tx = tb.input %a0 map <i -> 1> : tensor<16x4096xf16> -> tensor<16x64xf16>
      %tw = tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
      %tm = tb.matmul %tx, %tw : (tensor<16x64xf16>, tensor<64x64xf16>) -> tensor<16x64xf16>
      %ax = tb.forloop_accum rms %tx : tensor<16x64xf16> -> tensor<16x1xf16>
      %am = tb.forloop_accum none %tm : tensor<16x64xf16> -> tensor<16x64xf16>
      %to = tb.div %am, %ax : (tensor<16x64xf16>, tensor<16x1xf16>) -> tensor<16x64xf16>
      tb.output %to map <x -> 1> : tensor<16x64xf16>
    }
    ```

    Verified rules: `[launch]` (3 positive grid and block dims within CUDA's
    limits, 1 ≤ forloop ≤ 2^31-1, dimx ≥ 1, region arguments match operands, one
    `tb.output` per result, at least one), `[dtype]`, `[nesting]` (the body holds
    `tb` ops only), `[accumulator]` (with forloop > 1 every path from a
    loop-varying `tb.input`, one whose map has `i`, to a `tb.output` that does not
    map `i` passes exactly one `tb.forloop_accum`; loop-invariant inputs may reach
    ops after the loop directly; a `tb.output` that maps `i` is saved every
    iteration, so no path from any `tb.input` to it passes one, whatever the
    forloop; no path passes two) and `[smem]` (the tiles of all `tb` results fit
    in shared memory).
  }];
  let arguments = (ins Variadic<Mirage_Tensor>:$inputs,
                       DenseI64ArrayAttr:$grid_dims,
                       DenseI64ArrayAttr:$block_dims,
                       I64Attr:$forloop_range,
                       I64Attr:$dimx);
  let results = (outs Variadic<Mirage_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    ` ` `(` $inputs `)` `grid` $grid_dims `block` $block_dims `forloop` $forloop_range
    `dimx` $dimx attr-dict `:` functional-type($inputs, results) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The `tb.output` ops of the body, in order (the k-th defines result k).
    ::llvm::SmallVector<::mlir::Operation *> getOutputOps();
    /// The shared-memory capacity for this kernel (`kn.smem_capacity` on the
    /// enclosing module, default 232448).
    int64_t getSmemCapacity();
  }];
}

#endif // MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_TD
