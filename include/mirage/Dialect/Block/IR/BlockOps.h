//===- BlockOps.h - tb dialect operations ------------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_H
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_H

#include "mirage/Dialect/Block/IR/BlockAttrs.h"
#include "mirage/Dialect/Block/IR/BlockDialect.h"
#include "mirage/Dialect/Common/Utils.h"
#include "mirage/Dialect/Kernel/IR/KernelOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "mirage/Dialect/Block/IR/BlockOps.h.inc"

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKOPS_H
