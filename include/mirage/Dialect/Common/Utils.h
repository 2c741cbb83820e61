//===- Utils.h - shared verifier helpers of kn/tb/th -------------*- C++ -*-===//
//
// Shape and element-type rules shared by the three μGraph dialects, the
// `[nesting]` trait, and the scalar-value directive used by the constant ops.
// Every diagnostic starts with the rule name in brackets (docs/ir.md).
//
//===----------------------------------------------------------------------===//

#ifndef MIRAGE_DIALECT_COMMON_UTILS_H
#define MIRAGE_DIALECT_COMMON_UTILS_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include <optional>
#include <string>

namespace mirage {

/// Default shared-memory capacity in bytes (227 KiB, sm_90).
constexpr int64_t kDefaultSmemCapacity = 232448;
/// Name of the module attribute that overrides it.
constexpr const char kSmemCapacityAttrName[] = "kn.smem_capacity";

/// f16, bf16 or f32.
bool isSupportedElementType(mlir::Type t);
/// Size in bytes of a static tensor of a supported element type.
int64_t tensorByteSize(mlir::RankedTensorType t);
/// "[16, 64]".
std::string formatShape(llvm::ArrayRef<int64_t> shape);
/// Numpy broadcast of two shapes, or nullopt if they do not broadcast.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// The static shape of a ranked-tensor value.
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);
/// `[shape]` static shapes + `[dtype]` one supported element type for all values.
llvm::LogicalResult verifyCommon(mlir::Operation *op);

/// `[shape]`: every tensor operand/result has a static shape.
llvm::LogicalResult verifyStaticShapes(mlir::Operation *op);
/// `[dtype]`: every operand/result (element) type is f16/bf16/f32 and, if
/// `requireSame`, all of them are equal.
llvm::LogicalResult verifySameSupportedDType(mlir::Operation *op,
                                             bool requireSame = true);
/// `[dtype]` only on the given values, each independently.
llvm::LogicalResult verifySupportedDType(mlir::Operation *op, mlir::Value v,
                                         llvm::StringRef what);

// Op-level verifiers: static shapes + `[dtype]` + the op's `[shape]` rule.
llvm::LogicalResult verifyElementwiseBinary(mlir::Operation *op);
llvm::LogicalResult verifyElementwiseUnary(mlir::Operation *op);
llvm::LogicalResult verifyMatmul(mlir::Operation *op);
llvm::LogicalResult verifyConstant(mlir::Operation *op);
llvm::LogicalResult verifyReduction(mlir::Operation *op, int64_t dim);
llvm::LogicalResult verifyConcat(mlir::Operation *op, int64_t dim);
llvm::LogicalResult verifyReshape(mlir::Operation *op);
llvm::LogicalResult verifyTranspose(mlir::Operation *op, llvm::ArrayRef<int64_t> perm);
llvm::LogicalResult verifyRepeat(mlir::Operation *op, llvm::ArrayRef<int64_t> reps);

/// Scalar literal directive `custom<ScalarValue>($value)`: parses any float or
/// integer literal; prints the shortest decimal that reads back exactly, in
/// Python `repr` style with a `.` always present: 1.0e-06, 2.0, 0.5, 1.0e+16.
mlir::ParseResult parseScalarValue(mlir::OpAsmParser &parser,
                                   mlir::FloatAttr &value);
void printScalarValue(mlir::OpAsmPrinter &p, mlir::Operation *op,
                      mlir::FloatAttr value);
/// The text printScalarValue writes for `v`.
std::string formatScalar(double v);

namespace OpTrait {
/// `nesting` rule: the op sits directly inside a `ParentOpType` (like upstream
/// HasParent, with a `[nesting]` diagnostic).
template <typename ParentOpType>
struct NestedIn {
  template <typename ConcreteType>
  class Impl : public mlir::OpTrait::TraitBase<ConcreteType, Impl> {
  public:
    static llvm::LogicalResult verifyTrait(mlir::Operation *op) {
      mlir::Operation *parent = op->getParentOp();
      if (parent && llvm::isa<ParentOpType>(parent))
        return mlir::success();
      auto diag = op->emitError()
                  << "[nesting] '" << op->getName() << "' must be nested "
                  << "directly in '" << ParentOpType::getOperationName() << "'";
      if (parent)
        diag << ", not in '" << parent->getName() << "'";
      return diag;
    }
    /// The enclosing op.
    ParentOpType getParentOp() {
      return llvm::cast<ParentOpType>(this->getOperation()->getParentOp());
    }
  };
};
} // namespace OpTrait

} // namespace mirage

#endif // MIRAGE_DIALECT_COMMON_UTILS_H
