"""One module per `mirage-opt` pass, named after its flag (`mirage_smem_plan` is
`--mirage-smem-plan`); each registers itself with `mirage.mlir.registry`."""
