"""The μGraph model, op semantics, reference interpreter and MLIR conversion."""
