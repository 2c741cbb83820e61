//===- BlockAttrs.td - tb dialect attributes and enums -----*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_TD
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_TD

include "mirage/Dialect/Block/IR/BlockDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// #tb.map
//===----------------------------------------------------------------------===//

def Block_MapAttr : AttrDef<Block_Dialect, "Map"> {
  let mnemonic = "map";
  let summary = "a grid/for-loop dim to tensor dim map (imap, omap, fmap)";
  let description = [{
    A list of `dim -> tensor-dim` entries where `dim` is a grid dim `x`, `y`, `z`
    or the for-loop dim `i`. A dim that is not listed is a replica (`-1` in the
    Mirage API); `<>` replicates everything. Printed in the order x, y, z, i.
    In the Mirage API this is `input_map=(x, y, z)` (or `output_map`) plus
    `forloop_dim`.

    In an op (`tb.input`, `tb.output`) it is written after the keyword `map`:

    ```mlir
    %tw = tb.input %a1 map <x -> 1, i -> 0> : tensor<4096x4096xf16> -> tensor<64x64xf16>
    ```

    and stand-alone as `#tb.map<x -> 1, i -> 0>`. The parameters hold the tensor
    dim for each of x, y, z, i, or -1.
  }];
  let parameters = (ins "int64_t":$x, "int64_t":$y, "int64_t":$z, "int64_t":$i);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Tensor dim mapped by grid dim k (0 = x, 1 = y, 2 = z) or, for k = 3, by
    /// the for-loop dim; -1 = replica.
    int64_t getDim(unsigned k) const {
      switch (k) {
      case 0: return getX();
      case 1: return getY();
      case 2: return getZ();
      default: return getI();
      }
    }
    /// Name of map dim k: "x", "y", "z" or "i".
    static ::llvm::StringRef getDimName(unsigned k) {
      static const char *names[] = {"x", "y", "z", "i"};
      return names[k];
    }
  }];
}

//===----------------------------------------------------------------------===//
// Accumulator kinds of tb.forloop_accum
//===----------------------------------------------------------------------===//

def Block_AccumKind : I32EnumAttr<"AccumKind",
    "for-loop accumulator kind of tb.forloop_accum", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"Sum", 1, "sum">,
      I32EnumAttrCase<"Mean", 2, "mean">,
      I32EnumAttrCase<"Rms", 3, "rms">,
      I32EnumAttrCase<"Max", 4, "max">,
      I32EnumAttrCase<"SumToDimx", 5, "sum_todimx">
    ]> {
  let cppNamespace = "::mirage::tb";
}

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKATTRS_TD
