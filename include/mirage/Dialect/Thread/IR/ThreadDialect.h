//===- ThreadDialect.h - the th dialect --------------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_H
#define MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_H

#include "mlir/IR/Dialect.h"

#include "mirage/Dialect/Thread/IR/ThreadDialect.h.inc"

#endif // MIRAGE_DIALECT_THREAD_IR_THREADDIALECT_H
