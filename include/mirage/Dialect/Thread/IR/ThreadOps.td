//===- ThreadOps.td - th dialect operations ----------------*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_THREAD_IR_THREADOPS_TD
#define MIRAGE_DIALECT_THREAD_IR_THREADOPS_TD

include "mirage/Dialect/Thread/IR/ThreadDialect.td"
include "mirage/Dialect/Common/MirageBase.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Every th op sits directly in a tb.thread_graph body (`nesting` rule).
defvar InThreadGraph = MirageNestedIn<"::mirage::tb::ThreadGraphOp">;

class Thread_BinaryOp<string mnemonic, string what>
    : Thread_Op<mnemonic, [InThreadGraph, Pure, SameOperandsAndResultType]> {
  let summary = "scalar " # what;
  let description = [{
    Scalar }] # what # [{; operands and result share one type
    (`f16`, `bf16` or `f32`).

    Example:

    ```mlir
    }] # "%r = th." # mnemonic # [{ %a, %b : f16
    ```
  }];
  let arguments = (ins AnyType:$lhs, AnyType:$rhs);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation());
    }
  }];
}

def Thread_AddOp : Thread_BinaryOp<"add", "addition">;
def Thread_SubOp : Thread_BinaryOp<"sub", "subtraction">;
def Thread_MulOp : Thread_BinaryOp<"mul", "multiplication">;
def Thread_DivOp : Thread_BinaryOp<"div", "division">;
def Thread_PowOp : Thread_BinaryOp<"pow", "power `lhs ** rhs`">;

class Thread_UnaryOp<string mnemonic, string what>
    : Thread_Op<mnemonic, [InThreadGraph, Pure, SameOperandsAndResultType]> {
  let summary = "scalar " # what;
  let description = [{
    Scalar }] # what # [{; the result has the operand's type.

    Example:

    ```mlir
    }] # "%r = th." # mnemonic # [{ %a : f16
    ```
  }];
  let arguments = (ins AnyType:$input);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation());
    }
  }];
}

def Thread_ExpOp : Thread_UnaryOp<"exp", "exponential `exp(x)`">;
def Thread_SqrtOp : Thread_UnaryOp<"sqrt", "square root `sqrt(x)`">;
def Thread_RsqrtOp : Thread_UnaryOp<"rsqrt", "reciprocal square root `1/sqrt(x)`">;
def Thread_SquareOp : Thread_UnaryOp<"square", "square `x*x`">;
def Thread_SiluOp : Thread_UnaryOp<"silu", "SiLU `x*sigmoid(x)`">;
def Thread_GeluOp : Thread_UnaryOp<"gelu", "GELU">;
def Thread_ReluOp : Thread_UnaryOp<"relu", "ReLU `max(x, 0)`">;
def Thread_SigmoidOp : Thread_UnaryOp<"sigmoid", "logistic sigmoid `1/(1+exp(-x))`">;

def Thread_ClampOp : Thread_Op<"clamp", [InThreadGraph, Pure, SameOperandsAndResultType]> {
  let summary = "scalar clamp to [min, max]";
  let description = [{
    `min(max(x, min_val), max_val)` (as `kn.clamp`); the result has the
    operand's type.

    Example:

    ```mlir
    %r = th.clamp %a min -1.0 max 1.0 : f16
    ```
  }];
  let arguments = (ins AnyType:$input, Mirage_ScalarValue:$min_val,
                       Mirage_ScalarValue:$max_val);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$input `min` custom<ScalarValue>($min_val) `max` "
                       "custom<ScalarValue>($max_val) attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation());
    }
  }];
}

def Thread_MulScalarOp : Thread_Op<"mul_scalar", [InThreadGraph, Pure, SameOperandsAndResultType]> {
  let summary = "scalar multiplication by a constant";
  let description = [{
    `x * scalar` (as `kn.mul_scalar`); the result has the operand's type.

    Example:

    ```mlir
    %r = th.mul_scalar %a, 0.125 : f16
    ```
  }];
  let arguments = (ins AnyType:$input, Mirage_ScalarValue:$scalar);
  let results = (outs AnyType:$result);
  let assemblyFormat = "$input `,` custom<ScalarValue>($scalar) attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation());
    }
  }];
}

def Thread_ConstantOp : Thread_Op<"constant", [InThreadGraph, Pure]> {
  let summary = "a scalar constant";
  let description = [{
    A scalar of the result type equal to `value` (an `f64` attribute, converted
    to the result type). Printed in the shortest exact form with a `.`.

    Example:

    ```mlir
    %c = th.constant 2.0 : f16
    ```
  }];
  let arguments = (ins Mirage_ScalarValue:$value);
  let results = (outs AnyType:$result);
  let assemblyFormat = "custom<ScalarValue>($value) attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation());
    }
  }];
}

def Thread_YieldOp : Thread_Op<"yield", [
    InThreadGraph, Pure, Terminator, ReturnLike]> {
  let summary = "terminator of a thread graph";
  let description = [{
    Yields the per-element values of the enclosing `tb.thread_graph`'s results.

    Example:

    ```mlir
    th.yield %s : f16
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mirage::verifySameSupportedDType(getOperation(),
                                                /*requireSame=*/false);
    }
  }];
}

#endif // MIRAGE_DIALECT_THREAD_IR_THREADOPS_TD
