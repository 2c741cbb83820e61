//===- Registration.cpp - C API: register the mirage dialects -------------===//
//
// Built into libMirageCAPI.so, linked against the Python bindings' own MLIR
// (mlir/_mlir_libs/libMLIRPythonCAPI.so), so the dialects load into an
// `mlir.ir.Context` (see python/mirage/mlir/dialects/__init__.py).
//
//===----------------------------------------------------------------------===//

#include "mirage-c/Registration.h"

#include "mirage/Dialect/Block/IR/BlockDialect.h"
#include "mirage/Dialect/Kernel/IR/KernelDialect.h"
#include "mirage/Dialect/Thread/IR/ThreadDialect.h"

#include "mlir/CAPI/IR.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

void mirageRegisterDialects(MlirContext ctx) {
  mlir::MLIRContext *context = unwrap(ctx);
  mlir::DialectRegistry registry;
  registry.insert<mirage::kn::KernelDialect, mirage::tb::BlockDialect,
                  mirage::th::ThreadDialect>();
  context->appendDialectRegistry(registry);
  context->loadDialect<mirage::kn::KernelDialect, mirage::tb::BlockDialect,
                       mirage::th::ThreadDialect>();
}
