//===- KernelDialect.cpp - the kn dialect ---------------------------------===//

#include "mirage/Dialect/Kernel/IR/KernelDialect.h"
#include "mirage/Dialect/Block/IR/BlockDialect.h"
#include "mirage/Dialect/Kernel/IR/KernelOps.h"

using namespace mlir;
using namespace mirage::kn;

#include "mirage/Dialect/Kernel/IR/KernelDialect.cpp.inc"

void KernelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mirage/Dialect/Kernel/IR/KernelOps.cpp.inc"
      >();
}
