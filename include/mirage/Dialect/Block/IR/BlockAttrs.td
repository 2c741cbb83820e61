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
// The optimizer's plan, recorded for the lowering: #tb.layout, #tb.smem
//===----------------------------------------------------------------------===//

def Block_LayoutAttr : AttrDef<Block_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "a shared-memory tile's layout: innermost dim and XOR swizzle";
  let description = [{
    `#tb.layout<inner = D, swizzle = S>`: the tile is stored with dim `D` innermost
    (the other dims row-major around it) and, for `S` > 0, the 16-byte chunk `c` of
    row `r` stored at chunk `c ^ ((r // max(1, 128 // R)) % (S // 16))` of the same
    row (`R`: the row's bytes; Triton's swizzled shared layout).

    `--mirage-layout` records it as the discardable attribute `tb.layout` of the op
    that defines the tile (an array of them, one per result, on an op with several
    results), and `convert-mirage-to-gpu` lowers the tile with it:

    ```mlir
    %5 = tb.exp %4 {tb.layout = #tb.layout<inner = 2, swizzle = 128>} : ...
    ```

    Verified: `S` is 0, 32, 64 or 128; on an op, `D` is a dim of the result tile
    and `S` divides its row of `R` bytes (`[layout]`).
  }];
  let parameters = (ins AttrParameter<"int64_t", "the dim stored contiguously">:$inner,
                        AttrParameter<"int64_t", "XOR swizzle in bytes (0: none)">:$swizzle);
  let assemblyFormat = "`<` `inner` `=` $inner `,` `swizzle` `=` $swizzle `>`";
  let genVerifyDecl = 1;
}

def Block_SmemAttr : AttrDef<Block_Dialect, "Smem"> {
  let mnemonic = "smem";
  let summary = "one kernel's shared-memory plan: cp.async ring depth and buffer offsets";
  let description = [{
    `#tb.smem<stages = S, offsets = {in0 = 0 : i64, op3 = 73728 : i64, ...}>`: the
    shared memory of one kernel that `convert-mirage-to-gpu` emits for a block graph:
    the depth `S` of the ring of its loop-varying inputs and the byte offset of each
    of its buffers (tiles `in<k>`, `op<j>`, `op<j>.<k>`; `scratch<j>`: op j's f32
    state; `flag`: a split loop's arrival flag; `red`: partial row sums).

    `--mirage-smem-plan` records one per emitted kernel in the discardable attribute
    `tb.smem` of the `kn.graph_def`, a dictionary keyed by the kernel (`full`; a split
    for-loop: `partial`, and `combine` unless the partial kernel folds it):

    ```mlir
    kn.graph_def ... {tb.smem = {full = #tb.smem<stages = 4, offsets = {in0 = 0 : i64}>}}
    ```

    and the lowering takes it. Verified here: `S` >= 1, every offset an integer
    >= 0 and a multiple of 128 (`[smem]`); the lowering checks the rest against the
    kernel it plans (every buffer placed, within the capacity, no two buffers that
    are live at once overlapping).
  }];
  let parameters = (ins AttrParameter<"int64_t", "cp.async ring depth of the loop-varying inputs">:$stages,
                        AttrParameter<"::mlir::DictionaryAttr", "buffer name -> byte offset">:$offsets);
  let assemblyFormat = "`<` `stages` `=` $stages `,` `offsets` `=` $offsets `>`";
  let genVerifyDecl = 1;
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
