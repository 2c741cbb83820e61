//===- KernelDialect.h - the kn dialect --------------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_H
#define MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_H

#include "mlir/IR/Dialect.h"

#include "mirage/Dialect/Kernel/IR/KernelDialect.h.inc"

#endif // MIRAGE_DIALECT_KERNEL_IR_KERNELDIALECT_H
