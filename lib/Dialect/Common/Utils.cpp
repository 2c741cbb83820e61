//===- Utils.cpp - shared verifier helpers of kn/tb/th --------------------===//

#include "mirage/Dialect/Common/Utils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <charconv>
#include <cmath>

using namespace mlir;

namespace mirage {

bool isSupportedElementType(Type t) { return t.isF16() || t.isBF16() || t.isF32(); }

int64_t tensorByteSize(RankedTensorType t) {
  int64_t bytes = t.getElementType().isF32() ? 4 : 2;
  for (int64_t d : t.getShape())
    bytes *= d;
  return bytes;
}

std::string formatShape(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                    ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> r(rank);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    r[rank - 1 - k] = da == 1 ? db : da;
  }
  return r;
}

static std::string describe(Operation *op, Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  for (OpOperand &o : op->getOpOperands())
    if (o.get() == v) {
      os << "operand #" << o.getOperandNumber();
      return s;
    }
  for (OpResult r : op->getResults())
    if (r == v) {
      os << "result #" << r.getResultNumber();
      return s;
    }
  return "value";
}

/// `check` on every operand, then every result; stops at the first failure.
template <typename Fn>
static LogicalResult forEachValue(Operation *op, Fn check) {
  for (Value v : op->getOperands())
    if (failed(check(v)))
      return failure();
  for (Value v : op->getResults())
    if (failed(check(v)))
      return failure();
  return success();
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

LogicalResult verifyStaticShapes(Operation *op) {
  auto check = [&](Value v) -> LogicalResult {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (t && !t.hasStaticShape())
      return op->emitError() << "[shape] " << describe(op, v) << " of type "
                             << t << " has a dynamic shape; μGraph tensors are static";
    return success();
  };
  return forEachValue(op, check);
}

static Type elementTypeOf(Type t) {
  if (auto st = dyn_cast<ShapedType>(t))
    return st.getElementType();
  return t;
}

LogicalResult verifySupportedDType(Operation *op, Value v, StringRef what) {
  Type et = elementTypeOf(v.getType());
  if (!isSupportedElementType(et))
    return op->emitError() << "[dtype] " << what << " has element type " << et
                           << "; expected f16, bf16 or f32";
  return success();
}

LogicalResult verifySameSupportedDType(Operation *op, bool requireSame) {
  Type first;
  std::string firstWhat;
  auto check = [&](Value v) -> LogicalResult {
    std::string what = describe(op, v);
    if (failed(verifySupportedDType(op, v, what)))
      return failure();
    Type et = elementTypeOf(v.getType());
    if (!first) {
      first = et;
      firstWhat = what;
      return success();
    }
    if (requireSame && et != first)
      return op->emitError()
             << "[dtype] " << what << " has element type " << et << " but "
             << firstWhat << " has " << first
             << "; the operands and result of '" << op->getName()
             << "' share one element type";
    return success();
  };
  return forEachValue(op, check);
}

LogicalResult verifyCommon(Operation *op) {
  if (failed(verifyStaticShapes(op)) || failed(verifySameSupportedDType(op)))
    return failure();
  return success();
}

LogicalResult verifyElementwiseBinary(Operation *op) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), b = shapeOf(op->getOperand(1)),
                    r = shapeOf(op->getResult(0));
  auto bc = broadcastShapes(a, b);
  if (!bc)
    return op->emitError() << "[shape] operand shapes " << formatShape(a) << " and "
                           << formatShape(b) << " do not broadcast";
  if (ArrayRef<int64_t>(*bc) != r)
    return op->emitError() << "[shape] result shape " << formatShape(r)
                           << " must be the broadcast shape " << formatShape(*bc)
                           << " of the operands " << formatShape(a) << " and "
                           << formatShape(b);
  return success();
}

LogicalResult verifyElementwiseUnary(Operation *op) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), r = shapeOf(op->getResult(0));
  if (a != r)
    return op->emitError() << "[shape] result shape " << formatShape(r)
                           << " must equal the operand shape " << formatShape(a);
  return success();
}

LogicalResult verifyMatmul(Operation *op) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), b = shapeOf(op->getOperand(1)),
                    r = shapeOf(op->getResult(0));
  if (a.size() < 2 || a.size() != b.size())
    return op->emitError() << "[shape] matmul operands must have the same rank >= 2, "
                           << "got " << formatShape(a) << " and " << formatShape(b);
  size_t n = a.size();
  for (size_t d = 0; d + 2 < n; ++d)
    if (a[d] != b[d])
      return op->emitError() << "[shape] batch dim " << d << " differs: " << a[d]
                             << " in " << formatShape(a) << " vs " << b[d] << " in "
                             << formatShape(b);
  if (a[n - 1] != b[n - 2])
    return op->emitError() << "[shape] contracted dims differ: lhs dim " << n - 1
                           << " is " << a[n - 1] << ", rhs dim " << n - 2 << " is "
                           << b[n - 2];
  SmallVector<int64_t> expect(a.drop_back(2));
  expect.push_back(a[n - 2]);
  expect.push_back(b[n - 1]);
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r)
                           << " must be " << formatShape(expect) << " for operands "
                           << formatShape(a) << " x " << formatShape(b);
  return success();
}

LogicalResult verifyConstant(Operation *op) { return verifyCommon(op); }

LogicalResult verifyReduction(Operation *op, int64_t dim) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), r = shapeOf(op->getResult(0));
  if (dim < 0 || dim >= (int64_t)a.size())
    return op->emitError() << "[shape] reduction dim " << dim
                           << " is out of range for operand shape " << formatShape(a);
  SmallVector<int64_t> expect(a);
  expect[dim] = 1;
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r) << " must be "
                           << formatShape(expect) << " (operand " << formatShape(a)
                           << " with dim " << dim << " reduced to 1)";
  return success();
}

LogicalResult verifyConcat(Operation *op, int64_t dim) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), b = shapeOf(op->getOperand(1)),
                    r = shapeOf(op->getResult(0));
  if (a.size() != b.size())
    return op->emitError() << "[shape] concat operands must have the same rank, got "
                           << formatShape(a) << " and " << formatShape(b);
  if (dim < 0 || dim >= (int64_t)a.size())
    return op->emitError() << "[shape] concat dim " << dim
                           << " is out of range for operand shape " << formatShape(a);
  SmallVector<int64_t> expect(a);
  for (size_t d = 0; d < a.size(); ++d)
    if ((int64_t)d != dim && a[d] != b[d])
      return op->emitError() << "[shape] concat operands differ in dim " << d << ": "
                             << formatShape(a) << " vs " << formatShape(b);
  expect[dim] = a[dim] + b[dim];
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r) << " must be "
                           << formatShape(expect);
  return success();
}

LogicalResult verifyReshape(Operation *op) {
  if (failed(verifyCommon(op)))
    return failure();
  auto a = cast<RankedTensorType>(op->getOperand(0).getType());
  auto r = cast<RankedTensorType>(op->getResult(0).getType());
  if (a.getNumElements() != r.getNumElements())
    return op->emitError() << "[shape] reshape from " << formatShape(a.getShape())
                       << " (" << a.getNumElements() << " elements) to "
                       << formatShape(r.getShape()) << " (" << r.getNumElements()
                       << " elements) changes the element count";
  return success();
}

LogicalResult verifyTranspose(Operation *op, ArrayRef<int64_t> perm) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), r = shapeOf(op->getResult(0));
  SmallVector<bool> seen(a.size(), false);
  bool ok = perm.size() == a.size();
  for (int64_t p : perm) {
    if (!ok || p < 0 || p >= (int64_t)a.size() || seen[p]) {
      ok = false;
      break;
    }
    seen[p] = true;
  }
  if (!ok)
    return op->emitError() << "[shape] permutation " << formatShape(perm)
                       << " is not a permutation of the " << a.size()
                       << " dims of " << formatShape(a);
  SmallVector<int64_t> expect;
  for (int64_t p : perm)
    expect.push_back(a[p]);
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r) << " must be "
                       << formatShape(expect) << " (operand " << formatShape(a)
                       << " permuted by " << formatShape(perm) << ")";
  return success();
}

LogicalResult verifyRepeat(Operation *op, ArrayRef<int64_t> reps) {
  if (failed(verifyCommon(op)))
    return failure();
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), r = shapeOf(op->getResult(0));
  if (reps.size() != a.size() || llvm::any_of(reps, [](int64_t x) { return x < 1; }))
    return op->emitError() << "[shape] repeats " << formatShape(reps)
                       << " must have one positive entry per dim of "
                       << formatShape(a);
  SmallVector<int64_t> expect;
  for (size_t d = 0; d < a.size(); ++d)
    expect.push_back(a[d] * reps[d]);
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r) << " must be "
                       << formatShape(expect) << " (operand " << formatShape(a)
                       << " repeated " << formatShape(reps) << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Scalar literals
//===----------------------------------------------------------------------===//

std::string formatScalar(double v) {
  if (!std::isfinite(v)) {
    // Not expressible as a decimal literal; MLIR reads hex bit patterns.
    std::string s;
    llvm::raw_string_ostream os(s);
    os << "0x";
    os << llvm::format_hex_no_prefix(llvm::bit_cast<uint64_t>(v), 16, /*Upper=*/true);
    return s;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci = sci.substr(1);
  }
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.')
      digits += c;
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  int decpt = exp + 1; // position of the decimal point in `digits`
  std::string out;
  if (v == 0.0) {
    out = "0.0";
  } else if (decpt > -4 && decpt <= 16) { // Python repr: fixed notation
    if (decpt <= 0)
      out = "0." + std::string(-decpt, '0') + digits;
    else if (decpt >= (int)digits.size())
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    else
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  } else {
    out = digits.substr(0, 1) + "." + (digits.size() > 1 ? digits.substr(1) : "0");
    std::string e = std::to_string(std::abs(exp));
    if (e.size() < 2)
      e = "0" + e;
    out += std::string("e") + (exp < 0 ? "-" : "+") + e;
  }
  return sign + out;
}

ParseResult parseScalarValue(OpAsmParser &parser, FloatAttr &value) {
  double v;
  if (parser.parseFloat(v))
    return failure();
  value = FloatAttr::get(Float64Type::get(parser.getContext()), v);
  return success();
}

void printScalarValue(OpAsmPrinter &p, Operation *, FloatAttr value) {
  p << formatScalar(value.getValueAsDouble());
}

} // namespace mirage
