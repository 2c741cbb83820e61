//===- BlockAttrs.cpp - #tb.map, #tb.layout, #tb.smem, accumulator kinds -===//

#include "mirage/Dialect/Block/IR/BlockAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mirage::tb;

#include "mirage/Dialect/Block/IR/BlockEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "mirage/Dialect/Block/IR/BlockAttrs.cpp.inc"

void BlockDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mirage/Dialect/Block/IR/BlockAttrs.cpp.inc"
      >();
}

/// `<>` or `<dim -> tensor-dim, ...>` with dim in x, y, z, i (each at most once).
Attribute MapAttr::parse(AsmParser &parser, Type) {
  int64_t dims[4] = {-1, -1, -1, -1};
  if (parser.parseLess())
    return {};
  if (succeeded(parser.parseOptionalGreater()))
    return MapAttr::get(parser.getContext(), -1, -1, -1, -1);
  do {
    SMLoc loc = parser.getCurrentLocation();
    StringRef kw;
    if (parser.parseKeyword(&kw))
      return {};
    int k = llvm::StringSwitch<int>(kw).Case("x", 0).Case("y", 1).Case("z", 2)
                .Case("i", 3).Default(-1);
    if (k < 0) {
      parser.emitError(loc) << "[map] expected a grid dim 'x', 'y', 'z' or the "
                               "for-loop dim 'i', got '" << kw << "'";
      return {};
    }
    if (dims[k] != -1) {
      parser.emitError(loc) << "[map] dim '" << kw << "' is mapped twice";
      return {};
    }
    SMLoc vloc;
    int64_t d;
    if (parser.parseArrow())
      return {};
    vloc = parser.getCurrentLocation();
    if (parser.parseInteger(d))
      return {};
    if (d < 0) {
      parser.emitError(vloc) << "[map] tensor dim for '" << kw
                             << "' must be >= 0 (leave a dim out to replicate)";
      return {};
    }
    dims[k] = d;
  } while (succeeded(parser.parseOptionalComma()));
  if (parser.parseGreater())
    return {};
  return MapAttr::get(parser.getContext(), dims[0], dims[1], dims[2], dims[3]);
}

void MapAttr::print(AsmPrinter &printer) const {
  printer << "<";
  bool first = true;
  for (unsigned k = 0; k < 4; ++k) {
    if (getDim(k) < 0)
      continue;
    if (!first)
      printer << ", ";
    first = false;
    printer << getDimName(k) << " -> " << getDim(k);
  }
  printer << ">";
}

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t inner,
                                 int64_t swizzle) {
  if (inner < 0)
    return emitError() << "[layout] #tb.layout inner = " << inner << ": a dim of the tile, >= 0";
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
    return emitError() << "[layout] #tb.layout swizzle = " << swizzle
                       << ": 0, 32, 64 or 128 bytes";
  return success();
}

LogicalResult SmemAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t stages,
                               DictionaryAttr offsets) {
  if (stages < 1)
    return emitError() << "[smem] #tb.smem stages = " << stages << ": a ring of >= 1 stages";
  for (NamedAttribute b : offsets) {
    auto off = dyn_cast<IntegerAttr>(b.getValue());
    if (!off)
      return emitError() << "[smem] #tb.smem offset of " << b.getName().getValue() << " is not an integer";
    int64_t v = off.getValue().getSExtValue();
    if (v < 0 || v % 128)
      return emitError() << "[smem] #tb.smem offset " << v << " of " << b.getName().getValue()
                         << " is not a non-negative multiple of 128";
  }
  return success();
}
