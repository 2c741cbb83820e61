//===- BlockOps.cpp - tb dialect operations and verifiers -----------------===//

#include "mirage/Dialect/Block/IR/BlockOps.h"
#include "mirage/Dialect/Kernel/IR/KernelOps.h"
#include "mirage/Dialect/Thread/IR/ThreadOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mirage;
using namespace mirage::tb;

/// [map]: every mapped tensor dim exists in a tensor of rank `rank`.
static LogicalResult verifyMapDims(Operation *op, MapAttr map, size_t rank,
                                   StringRef what) {
  for (unsigned k = 0; k < 4; ++k)
    if (map.getDim(k) >= (int64_t)rank)
      return op->emitError() << "[map] '" << MapAttr::getDimName(k)
                             << "' maps to tensor dim " << map.getDim(k) << " but "
                             << what << " has rank " << rank;
  return success();
}

/// Per tensor dim: the product of the grid sizes (and the forloop range, for
/// `i`) that map to it.
static SmallVector<int64_t> partsPerDim(kn::GraphDefOp g, MapAttr map, size_t rank) {
  SmallVector<int64_t> parts(rank, 1);
  ArrayRef<int64_t> grid = g.getGridDims();
  for (unsigned k = 0; k < 3; ++k)
    if (map.getDim(k) >= 0 && k < grid.size())
      parts[map.getDim(k)] *= grid[k];
  if (map.getI() >= 0)
    parts[map.getI()] *= g.getForloopRange();
  return parts;
}

//===----------------------------------------------------------------------===//
// InputOp
//===----------------------------------------------------------------------===//

LogicalResult InputOp::verify() {
  if (failed(verifyCommon(getOperation())))
    return failure();
  auto g = cast<kn::GraphDefOp>((*this)->getParentOp());
  auto arg = dyn_cast<BlockArgument>(getSource());
  if (!arg || arg.getOwner()->getParentOp() != g.getOperation())
    return emitError() << "[map] tb.input must read a region argument of the "
                          "enclosing kn.graph_def (a device tensor), not a tile";
  ArrayRef<int64_t> d = shapeOf(getSource()), t = shapeOf(getResult());
  if (failed(verifyMapDims(getOperation(), getMap(), d.size(), "the input")))
    return failure();
  SmallVector<int64_t> parts = partsPerDim(g, getMap(), d.size());
  SmallVector<int64_t> expect;
  for (size_t k = 0; k < d.size(); ++k) {
    if (d[k] % parts[k] != 0)
      return emitError() << "[divisibility] tensor dim " << k << " of size " << d[k]
                         << " is not divisible into " << parts[k]
                         << " parts by the grid/for-loop dims mapped to it";
    expect.push_back(d[k] / parts[k]);
  }
  if (t != ArrayRef<int64_t>(expect))
    return emitError() << "[divisibility] tile shape " << formatShape(t)
                       << " must be the slice " << formatShape(expect) << " of "
                       << formatShape(d) << " given by the map";
  return success();
}

//===----------------------------------------------------------------------===//
// OutputOp
//===----------------------------------------------------------------------===//

LogicalResult OutputOp::verify() {
  if (failed(verifyCommon(getOperation())))
    return failure();
  auto g = cast<kn::GraphDefOp>((*this)->getParentOp());
  ArrayRef<int64_t> t = shapeOf(getValue());
  if (failed(verifyMapDims(getOperation(), getMap(), t.size(), "the tile")))
    return failure();
  ArrayRef<int64_t> grid = g.getGridDims();
  for (unsigned k = 0; k < 3 && k < grid.size(); ++k)
    if (grid[k] > 1 && getMap().getDim(k) < 0)
      return emitError() << "[omap] grid dim '" << MapAttr::getDimName(k)
                         << "' has size " << grid[k]
                         << " but is not mapped to a tensor dim (blocks would "
                            "overwrite each other)";
  // Which result this output defines.
  SmallVector<Operation *> outs = g.getOutputOps();
  size_t index = llvm::find(outs, getOperation()) - outs.begin();
  if (index >= g.getNumResults())
    return success(); // [launch] reports the count mismatch on the kernel
  Value result = g.getResult(index);
  auto rt = dyn_cast<RankedTensorType>(result.getType());
  if (!rt)
    return success();
  SmallVector<int64_t> parts = partsPerDim(g, getMap(), t.size());
  SmallVector<int64_t> expect;
  for (size_t k = 0; k < t.size(); ++k)
    expect.push_back(t[k] * parts[k]);
  if (rt.getShape() != ArrayRef<int64_t>(expect))
    return emitError() << "[omap] kernel result #" << index << " has shape "
                       << formatShape(rt.getShape()) << " but tb.output #" << index
                       << " of tile " << formatShape(t) << " writes "
                       << formatShape(expect);
  return success();
}

//===----------------------------------------------------------------------===//
// ReductionToDimxOp, ForloopAccumOp
//===----------------------------------------------------------------------===//

/// [dimx] + [shape] for a reduction of the last dim to dimx.
static LogicalResult verifyToDimx(Operation *op, int64_t dimx) {
  ArrayRef<int64_t> a = shapeOf(op->getOperand(0)), r = shapeOf(op->getResult(0));
  if (a.empty() || a.back() % dimx != 0)
    return op->emitError() << "[dimx] the last dim of the operand shape "
                           << formatShape(a) << " must be a multiple of dimx "
                           << dimx;
  SmallVector<int64_t> expect(a);
  expect.back() = dimx;
  if (r != ArrayRef<int64_t>(expect))
    return op->emitError() << "[shape] result shape " << formatShape(r) << " must be "
                           << formatShape(expect) << " (last dim reduced to dimx "
                           << dimx << ")";
  return success();
}

LogicalResult ReductionToDimxOp::verify() {
  if (failed(verifyCommon(getOperation())))
    return failure();
  auto g = cast<kn::GraphDefOp>((*this)->getParentOp());
  return verifyToDimx(getOperation(), g.getDimx());
}

LogicalResult ForloopAccumOp::verify() {
  if (failed(verifyStaticShapes(getOperation())) ||
      failed(verifySupportedDType(getOperation(), getInput(), "operand #0")) ||
      failed(verifySupportedDType(getOperation(), getResult(), "result #0")))
    return failure();
  auto g = cast<kn::GraphDefOp>((*this)->getParentOp());
  ArrayRef<int64_t> a = shapeOf(getInput()), r = shapeOf(getResult());
  if (a.empty())
    return emitError() << "[shape] the operand of tb.forloop_accum must have rank >= 1";
  SmallVector<int64_t> expect(a);
  switch (getKind()) {
  case AccumKind::None:
  case AccumKind::Max:
    break;
  case AccumKind::Sum:
  case AccumKind::Mean:
  case AccumKind::Rms:
    expect.back() = 1;
    break;
  case AccumKind::SumToDimx:
    return verifyToDimx(getOperation(), g.getDimx());
  }
  if (r != ArrayRef<int64_t>(expect))
    return emitError() << "[shape] result shape " << formatShape(r)
                       << " of accumulator '" << stringifyAccumKind(getKind())
                       << "' must be " << formatShape(expect) << " for operand "
                       << formatShape(a);
  return success();
}

LogicalResult ForloopAccumRescaleOp::verify() {
  if (failed(verifyStaticShapes(getOperation())) ||
      failed(verifySupportedDType(getOperation(), getInput(), "operand #0")) ||
      failed(verifySupportedDType(getOperation(), getRescale(), "operand #1")) ||
      failed(verifySupportedDType(getOperation(), getResult(), "result #0")))
    return failure();
  Type et = cast<RankedTensorType>(getInput().getType()).getElementType();
  Type rt = cast<RankedTensorType>(getRescale().getType()).getElementType();
  if (et != rt)
    return emitError() << "[dtype] the rescale factor has element type " << rt
                       << " but the accumulated operand has " << et;
  if (getKind() != AccumKind::None && getKind() != AccumKind::Sum)
    return emitError() << "[accumulator] tb.forloop_accum_rescale takes the kinds "
                          "none and sum, not '"
                       << stringifyAccumKind(getKind()) << "'";
  ArrayRef<int64_t> a = shapeOf(getInput()), r = shapeOf(getResult());
  if (a.empty())
    return emitError()
           << "[shape] the operand of tb.forloop_accum_rescale must have rank >= 1";
  SmallVector<int64_t> expect(a);
  if (getKind() == AccumKind::Sum)
    expect.back() = 1;
  if (r != ArrayRef<int64_t>(expect))
    return emitError() << "[shape] result shape " << formatShape(r)
                       << " of rescale accumulator '" << stringifyAccumKind(getKind())
                       << "' must be " << formatShape(expect) << " for operand "
                       << formatShape(a);
  // the factor scales what is accumulated: it may broadcast, never widen it
  ArrayRef<int64_t> f = shapeOf(getRescale());
  auto bc = broadcastShapes(expect, f);
  if (!bc || ArrayRef<int64_t>(*bc) != ArrayRef<int64_t>(expect))
    return emitError() << "[shape] the rescale factor's shape " << formatShape(f)
                       << " must broadcast to the accumulator's shape "
                       << formatShape(expect);
  return success();
}

//===----------------------------------------------------------------------===//
// ReductionMaxOp
//===----------------------------------------------------------------------===//

LogicalResult ReductionMaxOp::verify() {
  if (failed(verifyReduction(getOperation(), getDim())))
    return failure();
  if (shapeOf(getDiff()) != shapeOf(getMax()))
    return emitError() << "[shape] the diff result's shape " << formatShape(shapeOf(getDiff()))
                       << " must equal the max result's shape "
                       << formatShape(shapeOf(getMax()));
  return success();
}

//===----------------------------------------------------------------------===//
// ThreadGraphOp
//===----------------------------------------------------------------------===//

LogicalResult ThreadGraphOp::verify() {
  // operands and results each of a supported type, not necessarily the same one
  if (failed(verifyStaticShapes(getOperation())) ||
      failed(verifySameSupportedDType(getOperation(), /*requireSame=*/false)))
    return failure();
  // [shape]: results have the broadcast shape of the operands.
  SmallVector<int64_t> bc;
  for (Value v : getInputs()) {
    auto next = broadcastShapes(bc, shapeOf(v));
    if (!next)
      return emitError() << "[shape] operand shape " << formatShape(shapeOf(v))
                         << " does not broadcast with " << formatShape(bc);
    bc = *next;
  }
  for (auto [k, v] : llvm::enumerate(getResults()))
    if (shapeOf(v) != ArrayRef<int64_t>(bc))
      return emitError() << "[shape] result #" << k << " has shape "
                         << formatShape(shapeOf(v))
                         << " but the broadcast shape of the operands is "
                         << formatShape(bc);
  // [shape]: one scalar region argument per operand, of its element type.
  Block &body = getBody().front();
  if (body.getNumArguments() != getNumOperands())
    return emitError() << "[shape] the body has " << body.getNumArguments()
                       << " arguments but the thread graph has " << getNumOperands()
                       << " operands";
  for (auto [k, arg, v] : llvm::enumerate(body.getArguments(), getInputs())) {
    Type et = cast<RankedTensorType>(v.getType()).getElementType();
    if (arg.getType() != et)
      return emitError() << "[dtype] body argument #" << k << " has type "
                         << arg.getType() << " but operand #" << k
                         << " has element type " << et;
  }
  return success();
}

LogicalResult ThreadGraphOp::verifyRegions() {
  Block &body = getBody().front();
  auto yield = body.empty() ? th::YieldOp() : dyn_cast<th::YieldOp>(body.back());
  if (!yield)
    return emitError() << "[shape] the thread graph body must end with th.yield";
  if (yield.getNumOperands() != getNumResults())
    return yield.emitError() << "[shape] th.yield yields " << yield.getNumOperands()
                             << " values but the thread graph has "
                             << getNumResults() << " results";
  for (auto [k, y, r] : llvm::enumerate(yield.getOperands(), getResults())) {
    Type et = cast<RankedTensorType>(r.getType()).getElementType();
    if (y.getType() != et)
      return yield.emitError() << "[dtype] yielded value #" << k << " has type "
                               << y.getType() << " but result #" << k
                               << " has element type " << et;
  }
  return success();
}

#define GET_OP_CLASSES
#include "mirage/Dialect/Block/IR/BlockOps.cpp.inc"
