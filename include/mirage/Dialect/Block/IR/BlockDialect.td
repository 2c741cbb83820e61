//===- BlockDialect.td - the tb (thread-block graph) dialect -*- tablegen -*-===//

#ifndef MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_TD
#define MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_TD

include "mlir/IR/OpBase.td"

def Block_Dialect : Dialect {
  let name = "tb";
  let cppNamespace = "::mirage::tb";
  let summary = "Mirage thread-block graph: ops on shared-memory tiles";
  let description = [{
    The `tb` dialect is the middle level of a μGraph: the body of a `kn.graph_def`.
    Its values are the shared-memory tiles of one thread block (builtin static
    `tensor<...>` of the tile shape). `tb.input` iterators read tiles of the
    kernel's device tensors (imap, fmap), `tb.forloop_accum` accumulates across the
    for-loop, `tb.output` savers write tiles of the results (omap), and
    `tb.thread_graph` holds a fused element-wise chain in the `th` dialect.

    Maps are `#tb.map` attributes written `map <x -> 1, i -> 0>`.

    The optimizer's decisions travel to the lowering as discardable attributes:
    `tb.layout` (a `#tb.layout`) on a tile's defining op, `tb.order` (an integer: the
    op's place in the order the ops run) on every op, `tb.smem` (kernel ->
    `#tb.smem`) on the `kn.graph_def`; the dialect verifies `tb.layout` against the
    tile and the form of `tb.smem`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Registers the attributes (defined in BlockAttrs.cpp).
    void registerAttributes();
  }];
  let dependentDialects = ["::mirage::th::ThreadDialect"];
}

class Block_Op<string mnemonic, list<Trait> traits = []>
    : Op<Block_Dialect, mnemonic, traits>;

#endif // MIRAGE_DIALECT_BLOCK_IR_BLOCKDIALECT_TD
