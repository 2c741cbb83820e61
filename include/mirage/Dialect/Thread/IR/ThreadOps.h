//===- ThreadOps.h - th dialect operations -----------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_THREAD_IR_THREADOPS_H
#define MIRAGE_DIALECT_THREAD_IR_THREADOPS_H

#include "mirage/Dialect/Block/IR/BlockOps.h"
#include "mirage/Dialect/Common/Utils.h"
#include "mirage/Dialect/Thread/IR/ThreadDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "mirage/Dialect/Thread/IR/ThreadOps.h.inc"

#endif // MIRAGE_DIALECT_THREAD_IR_THREADOPS_H
