#!/usr/bin/env python3
"""What the benchmark's timing allows a memory-bound kernel (GPU machine):

    PYTHONPATH=python python3 benchmarks/read_floor.py

A Triton kernel that only reads a W-sized buffer (RMSNorm+Linear's 4096 x 6144 and
GatedMLP's two 4096 x 4096 fp16 weights), under several launch shapes, with and without an
L2 evict_first hint, timed as gpu_bench.py times (do_bench with the L2 flushed between calls,
CUDA graphs over 8 input sets) and back to back (32 calls in one graph); a one-element
kernel in a graph under the flush timing (the fixed cost of a timed call); the copy
bandwidth that gpu_bench's memory floor uses. Results: gpu_user_h100.md.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]


def main() -> int:
    import torch
    import triton
    import triton.language as tl
    from triton.testing import do_bench

    from gpu_bench import bench_fn, copy_bandwidth, graphed

    @triton.jit
    def read_k(w_ptr, o_ptr, n, BLOCK: tl.constexpr, EV: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            if EV:
                x = tl.load(w_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
            else:
                x = tl.load(w_ptr + offs, mask=offs < n, other=0.0)
            acc += x.to(tl.float32)
        tl.store(o_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device {torch.cuda.get_device_name()}, copy bandwidth {copy_bandwidth() / 1e12:.2f} TB/s")
    for nel in (4096 * 6144, 2 * 4096 * 4096):
        nb, k = 2 * nel, 8
        ws = [torch.randn(nel, device="cuda", dtype=torch.float16) for _ in range(k)]
        for per_sm, block, warps in ((4, 2048, 8), (8, 1024, 4), (2, 4096, 8), (16, 1024, 4)):
            grid = sms * per_sm
            o = torch.empty(grid * block, device="cuda", dtype=torch.float32)
            for ev in (0, 1):
                def f(i):
                    read_k[(grid,)](ws[i], o, nel, BLOCK=block, EV=ev, num_warps=warps)
                f(0)
                torch.cuda.synchronize()
                t_flush = bench_fn(graphed(f, k), k)
                big = torch.cuda.CUDAGraph()
                with torch.cuda.graph(big):
                    for j in range(32):
                        f(j % k)
                t_b2b = 1000 * do_bench(lambda: big.replay(), warmup=20, rep=100, return_mode="median") / 32
                print(f"read {nb / 1e6:.1f} MB, grid {grid}, block {block}, warps {warps}, evict_first {ev}: "
                      f"flush {t_flush:.2f} us ({nb / t_flush / 1e6:.2f} TB/s), back to back {t_b2b:.2f} us "
                      f"({nb / t_b2b / 1e6:.2f} TB/s)", flush=True)
    tiny = torch.zeros(8, device="cuda")
    print(f"one-element kernel in a graph, flush timing: {bench_fn(graphed(lambda i: tiny.add_(1.0), 1), 1):.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
