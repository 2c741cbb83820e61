//===- Registration.h - C API of the mirage dialects --------------*- C -*-===//

#ifndef MIRAGE_C_REGISTRATION_H
#define MIRAGE_C_REGISTRATION_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Registers the kn, tb and th dialects in `ctx` and loads them.
MLIR_CAPI_EXPORTED void mirageRegisterDialects(MlirContext ctx);

#ifdef __cplusplus
}
#endif

#endif // MIRAGE_C_REGISTRATION_H
