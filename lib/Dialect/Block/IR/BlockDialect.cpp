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
