//===- BlockDialect.h - the tb dialect ---------------------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_H
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_H

#include "mlir/IR/Dialect.h"

#include "mirage/Dialect/Block/IR/BlockDialect.h.inc"

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_H
