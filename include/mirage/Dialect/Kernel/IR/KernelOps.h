//===- KernelOps.h - kn dialect operations -----------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_H
#define MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_H

#include "mirage/Dialect/Common/Utils.h"
#include "mirage/Dialect/Kernel/IR/KernelDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "mirage/Dialect/Kernel/IR/KernelOps.h.inc"

#endif // MIRAGE_DIALECT_KERNEL_IR_KERNELOPS_H
