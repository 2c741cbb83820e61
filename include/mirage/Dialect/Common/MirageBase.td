//===- MirageBase.td - shared ODS pieces of kn/tb/th -------*- tablegen -*-===//
//
// Pieces shared by the three μGraph dialects (kn, tb, th).
//
//===----------------------------------------------------------------------===//

#ifndef MIRAGE_DIALECT_COMMON_MIRAGEBASE_TD
#define MIRAGE_DIALECT_COMMON_MIRAGEBASE_TD

include "mlir/IR/OpBase.td"

// `nesting` rule: the op must sit directly inside `parentOp`. Like upstream
// `HasParent`, but the diagnostic starts with `[nesting]` as docs/ir.md asks.
class MirageNestedIn<string parentOp>
    : ParamNativeOpTrait<"NestedIn", parentOp> {
  let cppNamespace = "::mirage::OpTrait";
}

// Device tensors (kn) and shared-memory tiles (tb): builtin ranked tensors. Static
// shapes and the element types f16/bf16/f32 are checked by the verifiers so that
// the diagnostics carry the rule names `[shape]` and `[dtype]`.
def Mirage_Tensor : RankedTensorOf<[AnyType]>;

// A scalar fill value (an f64 attribute) printed in the shortest form that reads
// back exactly, with a `.` so MLIR lexes it as a float: `1.0e-06`, `2.0`, `0.5`.
defvar Mirage_ScalarValue = F64Attr;

#endif // MIRAGE_DIALECT_COMMON_MIRAGEBASE_TD
