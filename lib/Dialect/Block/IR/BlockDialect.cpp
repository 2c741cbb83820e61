//===- BlockDialect.cpp - the tb dialect ----------------------------------===//

#include "mirage/Dialect/Block/IR/BlockDialect.h"
#include "mirage/Dialect/Block/IR/BlockAttrs.h"
#include "mirage/Dialect/Block/IR/BlockOps.h"
#include "mirage/Dialect/Thread/IR/ThreadDialect.h"

using namespace mlir;
using namespace mirage::tb;

#include "mirage/Dialect/Block/IR/BlockDialect.cpp.inc"

void BlockDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mirage/Dialect/Block/IR/BlockOps.cpp.inc"
      >();
  registerAttributes();
}

/// `tb.layout` on the op defining a tile (an array, one per result, on an op with several
/// results) fits the tile; `tb.smem` on a kn.graph_def maps kernels to #tb.smem.
LogicalResult BlockDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name == "tb.layout") {
    SmallVector<Attribute> lays;
    if (auto arr = dyn_cast<ArrayAttr>(attr.getValue()))
      lays.append(arr.begin(), arr.end());
    else
      lays.push_back(attr.getValue());
    if (lays.size() > op->getNumResults())
      return op->emitError() << "[layout] tb.layout has " << lays.size() << " entries for an op with "
                             << op->getNumResults() << " result(s)";
    for (auto [k, a] : llvm::enumerate(lays)) {
      auto lay = dyn_cast<LayoutAttr>(a);
      if (!lay)
        return op->emitError() << "[layout] tb.layout must be a #tb.layout<inner = D, swizzle = S> (an "
                                  "array of them, one per result, on an op with several results)";
      auto t = dyn_cast<RankedTensorType>(op->getResult(k).getType());
      int64_t rank = t ? t.getRank() : 0, inner = lay.getInner(), swz = lay.getSwizzle();
      int64_t row = 0;
      if (t && inner < rank && t.getElementType().isIntOrFloat())
        row = t.getDimSize(inner) * (t.getElementType().getIntOrFloatBitWidth() / 8);
      if (inner >= rank || (swz && row % swz)) {
        auto d = op->emitError() << "[layout] tb.layout " << lay << " does not fit a tile of shape [";
        if (t)
          llvm::interleave(t.getShape(), d, ", ");
        return d << "] (inner: a dim of the tile; swizzle: 0, 32, 64 or 128 bytes dividing the row of "
                 << row << " bytes)";
      }
    }
  } else if (name == "tb.smem") {
    auto kernels = dyn_cast<DictionaryAttr>(attr.getValue());
    bool ok = kernels && op->getName().getStringRef() == "kn.graph_def";
    if (ok)
      for (NamedAttribute k : kernels) {
        StringRef role = k.getName().getValue();
        ok = ok && (role == "full" || role == "partial" || role == "combine") && isa<SmemAttr>(k.getValue());
      }
    if (!ok)
      return op->emitError() << "[smem] tb.smem on a kn.graph_def is {<kernel> = #tb.smem<stages = S, "
                                "offsets = {<buffer> = <bytes> : i64, ...}>, ...} with <kernel> full, partial "
                                "or combine";
  }
  return success();
}
