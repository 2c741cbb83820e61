//===- BlockAttrs.h - tb dialect attributes and enums ------------*- C++ -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_H
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_H

#include "mirage/Dialect/Block/IR/BlockDialect.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

#include "mirage/Dialect/Block/IR/BlockEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mirage/Dialect/Block/IR/BlockAttrs.h.inc"

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_H
