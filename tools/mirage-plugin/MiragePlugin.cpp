//===- MiragePlugin.cpp - mlir-opt dialect plugin for kn/tb/th ------------===//
//
// Built into libMiragePlugin.so (linked against the wheel's libMLIR.so):
//   mlir-opt --load-dialect-plugin=$(mirage-config --dialect-plugin) file.mlir
//
//===----------------------------------------------------------------------===//

#include "mirage/Dialect/Block/IR/BlockDialect.h"
#include "mirage/Dialect/Kernel/IR/KernelDialect.h"
#include "mirage/Dialect/Thread/IR/ThreadDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/Compiler.h"

extern "C" LLVM_ATTRIBUTE_WEAK ::mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "MirageDialects", LLVM_VERSION_STRING,
          [](::mlir::DialectRegistry *registry) {
            registry->insert<mirage::kn::KernelDialect, mirage::tb::BlockDialect,
                             mirage::th::ThreadDialect>();
          }};
}
