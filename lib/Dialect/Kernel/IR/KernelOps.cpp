//===- KernelOps.cpp - kn dialect operations and verifiers ----------------===//

#include "mirage/Dialect/Kernel/IR/KernelOps.h"
#include "mirage/Dialect/Block/IR/BlockOps.h"
#include "mirage/Dialect/Thread/IR/ThreadOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace mirage;
using namespace mirage::kn;

//===----------------------------------------------------------------------===//
// Simple ops
//===----------------------------------------------------------------------===//

LogicalResult RmsNormOp::verify() {
  if (failed(verifyElementwiseUnary(getOperation())))
    return failure();
  ArrayRef<int64_t> a = shapeOf(getInput());
  ArrayRef<int64_t> ns = getNormalizedShape();
  if (ns.empty() || ns.size() > a.size() || a.take_back(ns.size()) != ns)
    return emitError() << "[shape] normalized_shape " << formatShape(ns)
                       << " must equal the trailing dims of the operand shape "
                       << formatShape(a);
  return success();
}

//===----------------------------------------------------------------------===//
// GraphDefOp
//===----------------------------------------------------------------------===//

SmallVector<Operation *> GraphDefOp::getOutputOps() {
  SmallVector<Operation *> outs;
  for (Operation &op : getBody().front())
    if (isa<tb::OutputOp>(op))
      outs.push_back(&op);
  return outs;
}

int64_t GraphDefOp::getSmemCapacity() {
  if (auto module = (*this)->getParentOfType<ModuleOp>())
    if (auto attr = module->getAttrOfType<IntegerAttr>(kSmemCapacityAttrName))
      return attr.getInt();
  return kDefaultSmemCapacity;
}

LogicalResult GraphDefOp::verify() {
  // [launch]
  auto checkDims = [&](ArrayRef<int64_t> dims, StringRef name) -> LogicalResult {
    if (dims.size() != 3 || llvm::any_of(dims, [](int64_t d) { return d < 1; }))
      return emitError() << "[launch] " << name << " " << formatShape(dims)
                         << " must have 3 positive entries";
    return success();
  };
  if (failed(checkDims(getGridDims(), "grid")) ||
      failed(checkDims(getBlockDims(), "block")))
    return failure();
  // CUDA's launch limits, as the Python rule (graph.py MAX_GRID, MAX_BLOCK,
  // MAX_THREADS): dims near 2^63 passed here and broke the lowering
  static constexpr int64_t kMaxGrid[3] = {2147483647, 65535, 65535};
  static constexpr int64_t kMaxBlock[3] = {1024, 1024, 64};
  static constexpr int64_t kMaxThreads = 1024;
  static constexpr const char *kAxis[3] = {"x", "y", "z"};
  auto checkLimits = [&](ArrayRef<int64_t> dims, StringRef name,
                         const int64_t *top) -> LogicalResult {
    for (int k = 0; k < 3; ++k)
      if (dims[k] > top[k])
        return emitError() << "[launch] " << name << " " << formatShape(dims) << ": "
                           << kAxis[k] << " = " << dims[k] << " exceeds the CUDA limit "
                           << top[k];
    return success();
  };
  if (failed(checkLimits(getGridDims(), "grid", kMaxGrid)) ||
      failed(checkLimits(getBlockDims(), "block", kMaxBlock)))
    return failure();
  ArrayRef<int64_t> block = getBlockDims();
  int64_t threads = block[0] * block[1] * block[2]; // <= 1024 * 1024 * 64: no overflow
  if (threads > kMaxThreads)
    return emitError() << "[launch] block " << formatShape(block) << " has " << threads
                       << " threads, more than the CUDA limit of " << kMaxThreads
                       << " per block";
  // signed values: the I64Attr getters return uint64_t, so `forloop -4` read as
  // 2^64 - 4 and `dimx -64` passed
  int64_t forloop = getForloopRangeAttr().getInt(), dimx = getDimxAttr().getInt();
  if (forloop < 1)
    return emitError() << "[launch] forloop " << forloop << " must be >= 1";
  if (forloop > kMaxGrid[0])
    return emitError() << "[launch] forloop " << forloop << " must be <= " << kMaxGrid[0];
  if (dimx < 1)
    return emitError() << "[launch] dimx " << dimx << " must be >= 1";
  Block &body = getBody().front();
  if (body.getNumArguments() != getNumOperands())
    return emitError() << "[launch] the body has " << body.getNumArguments()
                       << " arguments but the kernel has " << getNumOperands()
                       << " operands";
  for (auto [k, arg, operand] : llvm::enumerate(body.getArguments(), getInputs()))
    if (arg.getType() != operand.getType())
      return emitError() << "[launch] body argument #" << k << " has type "
                         << arg.getType() << " but operand #" << k << " has type "
                         << operand.getType();
  size_t numOutputs = getOutputOps().size();
  // a kernel that writes nothing computes nothing (the Python builder's rule)
  if (numOutputs == 0 && getNumResults() == 0)
    return emitError() << "[launch] the block graph has no output (no tb.output)";
  if (numOutputs != getNumResults())
    return emitError() << "[launch] the body has " << numOutputs
                       << " tb.output ops but the kernel has " << getNumResults()
                       << " results";
  // [shape] / [dtype] on the device tensors (results may change precision).
  // operands and results each of a supported type, not necessarily the same one
  if (failed(verifyStaticShapes(getOperation())) ||
      failed(verifySameSupportedDType(getOperation(), /*requireSame=*/false)))
    return failure();
  return success();
}

LogicalResult GraphDefOp::verifyRegions() {
  Block &body = getBody().front();

  // [nesting]: a block graph holds tb ops only (the Python builder's rule)
  for (Operation &op : body)
    if (op.getName().getDialectNamespace() != "tb")
      return op.emitOpError() << "[nesting] '" << op.getName()
                              << "' does not exist at the block level: a kn.graph_def "
                                 "body holds tb operations only";

  // [stage]: a tb.input staged in chunks (k_chunk) is read by one tb.matmul alone,
  // whose other operand is a tb.input staged alike; the chunk, a multiple of 16,
  // cuts the contracted dim into two or more. [smem] counts two chunks of it.
  llvm::DenseMap<Value, int64_t> staged;
  for (Operation &op : body) {
    auto in = dyn_cast<tb::InputOp>(op);
    if (!in || !in.getKChunk())
      continue;
    int64_t kc = static_cast<int64_t>(*in.getKChunk());
    Value v = in.getResult();
    auto mm = v.hasOneUse() ? dyn_cast<tb::MatmulOp>(*v.getUsers().begin()) : tb::MatmulOp();
    if (!mm)
      return in.emitError() << "[stage] a staged tb.input (k_chunk = " << kc
                            << ") must be read by one tb.matmul alone";
    Value other = mm.getLhs() == v ? mm.getRhs() : mm.getLhs();
    auto oin = other.getDefiningOp<tb::InputOp>();
    if (!oin || !oin.getKChunk() || static_cast<int64_t>(*oin.getKChunk()) != kc)
      return in.emitError() << "[stage] the other operand of the tb.matmul reading a "
                               "staged tb.input must be a tb.input staged alike (k_chunk = "
                            << kc << ")";
    int64_t K = shapeOf(mm.getLhs()).back();
    if (kc <= 0 || kc % 16 || K % kc || K / kc < 2)
      return in.emitError() << "[stage] k_chunk = " << kc
                            << " must be a multiple of 16 that cuts the contracted dim " << K
                            << " into two or more chunks";
    staged[v] = tensorByteSize(cast<RankedTensorType>(v.getType())) / K * kc * 2;
  }

  // [smem]: all tb results (the tiles) fit in shared memory.
  int64_t bytes = 0;
  for (Operation &op : body)
    for (Value r : op.getResults())
      if (auto t = dyn_cast<RankedTensorType>(r.getType()))
        if (t.hasStaticShape())
          bytes += staged.count(r) ? staged.lookup(r) : tensorByteSize(t);
  int64_t capacity = getSmemCapacity();
  if (bytes > capacity)
    return emitError() << "[smem] the block graph's tiles need " << bytes
                       << " bytes of shared memory, more than the capacity of "
                       << capacity << " bytes";

  // [accumulator]: count the tb.forloop_accum ops on every path from a tb.input.
  // For each value: a bitmask of the possible counts {0, 1, >=2} over all paths
  // from the chosen tb.inputs (0 = not reached from one). Graph region: iterate
  // to a fixpoint (the masks only grow). Paths from every input may pass at most
  // one accumulator; paths from loop-varying inputs (map has i) must pass exactly
  // one, as loop-invariant inputs may be read after the loop directly.
  auto shift = [](unsigned m) { // one more accumulator on every path
    unsigned r = 0;
    if (m & 1) r |= 2;
    if (m & 6) r |= 4;
    return r;
  };
  auto countPaths = [&](bool varyingOnly) {
    llvm::DenseMap<Value, unsigned> mask;
    bool changed = true;
    while (changed) {
      changed = false;
      for (Operation &op : body) {
        unsigned m = 0;
        if (auto in = dyn_cast<tb::InputOp>(op)) {
          m = (!varyingOnly || in.getMap().getI() >= 0) ? 1 : 0;
        } else {
          for (Value v : op.getOperands())
            m |= mask.lookup(v);
          if (isa<tb::ForloopAccumOp, tb::ForloopAccumRescaleOp>(op))
            m = shift(m);
        }
        for (Value r : op.getResults())
          if ((mask[r] | m) != mask[r]) {
            mask[r] |= m;
            changed = true;
          }
      }
    }
    return mask;
  };
  llvm::DenseMap<Value, unsigned> all = countPaths(false);
  llvm::DenseMap<Value, unsigned> varying = countPaths(true);
  auto get = [&](Value v) { return all.lookup(v); };
  for (Operation &op : body) {
    if (isa<tb::ForloopAccumOp, tb::ForloopAccumRescaleOp>(op)) {
      if (get(op.getResult(0)) & 4)
        return op.emitError()
               << "[accumulator] a path from a tb.input passes two tb.forloop_accum "
                  "ops (for-loop accumulators, tb.forloop_accum_rescale included: "
                  "this one and another before it)";
    }
  }
  // An output that maps i is saved inside the loop, every iteration, and an
  // accumulator's result exists only after the loop: no path from any tb.input to
  // such an output passes one, whatever the for-loop range (with forloop 1 the
  // lowering would save the tile before the accumulator's finish).
  int64_t forloop = getForloopRange();
  for (auto [k, out] : llvm::enumerate(getOutputOps())) {
    auto o = cast<tb::OutputOp>(out);
    if (o.getMap().getI() >= 0 && (get(o.getValue()) & 6))
      return o.emitError() << "[accumulator] tb.output #" << k
                           << " maps the for-loop dim i (saved every iteration) "
                              "but a path from a tb.input to it passes a "
                              "tb.forloop_accum";
  }
  if (forloop > 1) {
    for (auto [k, out] : llvm::enumerate(getOutputOps())) {
      auto o = cast<tb::OutputOp>(out);
      unsigned m = varying.lookup(o.getValue());
      bool mapsI = o.getMap().getI() >= 0;
      if (!mapsI && (m & 1))
        return o.emitError() << "[accumulator] with forloop " << forloop
                             << ", a path from a loop-varying tb.input to tb.output #" << k
                             << " passes no tb.forloop_accum (expected exactly one, "
                                "or map i to save every iteration)";
    }
  }
  return success();
}

#define GET_OP_CLASSES
#include "mirage/Dialect/Kernel/IR/KernelOps.cpp.inc"
