"""Warm-up, then capture: the one way the benchmark scripts put work into CUDA graphs
(gpu_bench.graphed, models.py --run, arch_kernels.graph_of). Imports torch on use, so
the scripts that import it still load where torch has no GPU."""
from __future__ import annotations

WARMUPS = 3  # calls of each function before any capture


def capture_graphs(fns, calls: int = 1) -> list:
    """Each of `fns` is called WARMUPS times on a side stream, all before the first
    capture (module loads, compilation and allocations happen outside capture, and the
    side stream keeps them off the default stream, as torch.cuda.graphs' docs ask); then
    each is captured in a CUDA graph of its own, `calls` calls back to back.
    Returns [(graph, what the graph's last captured call returned)], in the order of `fns`."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fns:
            for _ in range(WARMUPS):
                fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graphs = []
    for fn in fns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                out = fn()
        graphs.append((g, out))
    torch.cuda.synchronize()
    return graphs
