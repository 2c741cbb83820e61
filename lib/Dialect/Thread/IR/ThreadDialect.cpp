//===- ThreadDialect.cpp - the th dialect ---------------------------------===//

#include "mirage/Dialect/Thread/IR/ThreadDialect.h"
#include "mirage/Dialect/Thread/IR/ThreadOps.h"

using namespace mlir;
using namespace mirage::th;

#include "mirage/Dialect/Thread/IR/ThreadDialect.cpp.inc"

void ThreadDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mirage/Dialect/Thread/IR/ThreadOps.cpp.inc"
      >();
}
