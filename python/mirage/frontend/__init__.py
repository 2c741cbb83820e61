"""Front ends: programs from elsewhere (PyTorch via torch-mlir, TOSA) into `kn` μGraphs."""
