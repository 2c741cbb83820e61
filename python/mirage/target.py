"""The GPUs we compile for: one description that the builder's `[smem]` rule, the search's
limits and cost model, and the lowering all read.

Figures are per device: multiprocessors, shared memory a block may use and an SM holds,
device-memory and shared-memory bandwidth, dense fp16 tensor-core and SIMT FLOP/s, the
launch overhead the cost model charges per kernel, and the L2 cache's size and bandwidth
(what blocks re-read of an input that fits is served from there). `arch` is the PTX target.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    arch: str                 # PTX target (sm_90, sm_80)
    sms: int                  # multiprocessors
    smem_per_block: int       # bytes of shared memory one block may use
    smem_per_sm: int          # bytes of shared memory co-resident blocks share
    dram_bw: float            # B/s
    smem_bw: float            # B/s, all SMs
    tensor_flops: float       # fp16 dense, FLOP/s
    simt_flops: float         # FLOP/s
    launch: float = 3e-6      # s per kernel
    l2_bytes: int = 50 << 20  # L2 cache
    l2_bw: float = 7e12       # B/s, L2 reads, all SMs (approximate: microbenchmarks give 5.5-8 TB/s on H100)
    clock: float = 1.755e9    # Hz, SM clock (boost)


H100 = Target("H100-SXM", "sm_90", 132, 227 * 1024, 228 * 1024, 3.35e12, 132 * 128 * 1.755e9, 989e12, 67e12)
H200 = Target("H200-SXM", "sm_90", 132, 227 * 1024, 228 * 1024, 4.8e12, 132 * 128 * 1.755e9, 989e12, 67e12,
              l2_bytes=60 << 20)
A100 = Target("A100-SXM", "sm_80", 108, 163 * 1024, 164 * 1024, 2.04e12, 108 * 128 * 1.41e9, 312e12, 19.5e12,
              l2_bytes=40 << 20, l2_bw=4.5e12, clock=1.41e9)

TARGETS = {t.name: t for t in (H100, H200, A100)}
DEFAULT = H100
