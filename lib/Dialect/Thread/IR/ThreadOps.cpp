//===- ThreadOps.cpp - th dialect operations ------------------------------===//
//
// The th verifiers ([dtype]) are defined inline in ThreadOps.td; the
// `[nesting]` rule is the NestedIn trait.
//
//===----------------------------------------------------------------------===//

#include "mirage/Dialect/Thread/IR/ThreadOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mirage;
using namespace mirage::th;

#define GET_OP_CLASSES
#include "mirage/Dialect/Thread/IR/ThreadOps.cpp.inc"
