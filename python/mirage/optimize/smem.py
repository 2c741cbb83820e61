"""Shared-memory planning (paper §6): an offset for every shared-memory tile, reusing
the space of dead tiles, checked against the capacity.

Steps follow the schedule: step 0 issues the iterator copies, the op at position p of
the order runs at step p + 1, the output savers at the last step. Live ranges:

- an op's result lives from its step to its last reader (block outputs: to the savers);
- an accumulator lives across the whole loop (initialized before it, updated by every
  iteration) and on to its last reader after the loop;
- a tile read inside the loop but not rewritten by every iteration (a loop-invariant
  iterator tile, or the result of an op hoisted before the loop) lives across the
  whole loop;
- a loop-varying iterator tile, when the loop runs more than once and double
  buffering is on, takes two copies and lives across the whole loop (the next
  iteration's copy is in flight while this one computes).

Offsets are aligned to 128 bytes (a swizzle span; 16-byte vectors stay aligned).
Finding offsets that minimize the peak is dynamic storage allocation: a first-fit
pass gives an upper bound, the peak of live bytes a lower bound, and when they differ
Z3's Optimize searches the exact plan (non-overlap of interfering tiles as
disjunctions) within a time limit. Disabled, every tile gets its own range.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from ..core.graph import DEFAULT_SMEM, TBGraph
from ..core.ops import is_accumulator
from .plan import SchedulePlan, SmemBuffer, SmemCapacityError, SmemPlan, solver_budget, tile_names, tiles
from .schedule import program_order, regions

ALIGN = 128


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def live_ranges(tb: TBGraph, order: list[int], double_buffer: bool = True,
                registers: Iterable[str] = ()) -> dict[str, SmemBuffer]:
    names = tile_names(tb)
    reg = regions(tb)
    step = {j: p + 1 for p, j in enumerate(order)}
    loop_end = max([step[j] for j in order if reg[j] == "loop"], default=0)
    saver_step = len(order) + 1
    last: dict[int, int] = {}
    read_in_loop: set[int] = set()
    for j in order:
        for t in tb.ops[j].inputs:
            last[id(t)] = max(last.get(id(t), 0), step[j])
            if reg[j] == "loop":
                read_in_loop.add(id(t))
    for o in tb.outputs:
        last[id(o.stensor)] = saver_step
    skip = set(registers)
    out: dict[str, SmemBuffer] = {}
    multi = tb.forloop_range > 1
    for k, r in enumerate(tb.inputs):
        t, n = r.stensor, names[id(r.stensor)]
        if n in skip:
            continue
        varying = r.forloop_dim != -1
        copies = 2 if (varying and multi and double_buffer) else 1
        end = last.get(id(t), 0)
        if multi and id(t) in read_in_loop and (copies == 2 or not varying):
            end = max(end, loop_end)
        out[n] = SmemBuffer(n, 0, copies * _align(_nbytes(t)), 0, end, copies)
    for j in order:
        op = tb.ops[j]
        for t in op.outputs:
            n = names[id(t)]
            if n in skip:
                continue
            start, end = step[j], max(last.get(id(t), step[j]), step[j])
            if is_accumulator(op.kind):
                start, end = 0, max(end, loop_end)
            elif reg[j] == "pre" and id(t) in read_in_loop:  # computed once, read by every iteration
                end = max(end, loop_end)
            out[n] = SmemBuffer(n, 0, _align(_nbytes(t)), start, end)
    return out


def _nbytes(t) -> int:
    n = t.dtype.itemsize
    for d in t.shape:
        n *= d
    return n


def _overlap(a: SmemBuffer, b: SmemBuffer) -> bool:
    return a.start <= b.end and b.start <= a.end


def _first_fit(bufs: list[SmemBuffer]) -> dict[str, int]:
    placed: list[tuple[SmemBuffer, int]] = []
    offs = {}
    for b in sorted(bufs, key=lambda b: (-b.size, b.start, b.name)):
        off = 0
        for o, s in sorted((o, p.size) for p, o in placed if _overlap(p, b)):
            if off + b.size <= o:
                break
            off = max(off, o + s)
        placed.append((b, off))
        offs[b.name] = off
    return offs


def _peak(bufs: list[SmemBuffer]) -> tuple[int, int]:
    """(max live bytes over steps, the step where it occurs)."""
    steps = sorted({b.start for b in bufs} | {b.end for b in bufs})
    best = (0, 0)
    for s in steps:
        live = sum(b.size for b in bufs if b.start <= s <= b.end)
        best = max(best, (live, s))
    return best


def _exact(bufs: list[SmemBuffer], upper: int, lower: int, timeout_ms: int):
    import z3

    ctx = z3.Context()  # its own: a shared context's earlier terms would steer the search
    opt = z3.Optimize(ctx=ctx)
    solver_budget(opt, timeout_ms)
    k = {b.name: z3.Int(f"k[{b.name}]", ctx) for b in bufs}  # offset = 128 * k
    total = z3.Int("total", ctx)
    for b in bufs:
        opt.add(k[b.name] >= 0, ALIGN * k[b.name] + b.size <= total)
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if _overlap(a, b):
                opt.add(z3.Or(ALIGN * k[a.name] + a.size <= ALIGN * k[b.name],
                              ALIGN * k[b.name] + b.size <= ALIGN * k[a.name]))
    opt.add(total >= lower, total <= upper)
    h = opt.minimize(total)
    res = opt.check()
    if res != z3.sat:
        return None, False
    m = opt.model()
    offs = {n: ALIGN * m.eval(v, model_completion=True).as_long() for n, v in k.items()}
    proven = res == z3.sat and z3.is_int_value(opt.lower(h)) and \
        opt.lower(h).as_long() == m.eval(total).as_long()
    return offs, proven


def buffers(tb: TBGraph, order: list[int], double_buffer: bool = True, registers: Iterable[str] = (),
            sizes: Mapping[str, int] | None = None,
            extra: Mapping[str, tuple[int, int, int]] | None = None) -> dict[str, SmemBuffer]:
    """The buffers to place (offsets 0): the tiles' live ranges on `order`, with the
    `sizes` and `extra` buffers of `plan_smem`."""
    bufs = live_ranges(tb, list(order), double_buffer, registers)
    for n, size in (sizes or {}).items():
        if n in bufs:
            bufs[n].size = _align(size)
    for n, (size, start, end) in (extra or {}).items():
        bufs[n] = SmemBuffer(n, 0, _align(size), start, end)
    return bufs


def check_offsets(bufs: Mapping[str, SmemBuffer], offsets: Mapping[str, int], capacity: int) -> str | None:
    """Why `offsets` (buffer name -> bytes, e.g. recorded in the IR) cannot place `bufs`,
    or None, the offsets then set on `bufs`: every buffer needs one and no other name
    may have one; each is a multiple of 128 (the lowering's 16-byte vectors and swizzles
    rely on it) and ends within `capacity`; two buffers live at a common step do not share
    a byte (buffers never live together may: the lowering puts a barrier between them)."""
    missing = [n for n in bufs if n not in offsets]
    if missing:
        return f"no offset for buffer{'s' * (len(missing) > 1)} {', '.join(missing)}"
    unknown = [n for n in offsets if n not in bufs]
    if unknown:
        return f"{', '.join(unknown)}: no such buffer in this kernel (it has {', '.join(bufs) or 'none'})"
    for n, b in bufs.items():
        off = offsets[n]
        if off < 0 or off % ALIGN:
            return f"offset {off} of {n} is not a non-negative multiple of {ALIGN}"
        if off + b.size > capacity:
            return (f"{n} ({b.size} bytes) at offset {off} ends at {off + b.size}, past the capacity "
                    f"{capacity}")
    blist = list(bufs.values())
    for i, a in enumerate(blist):
        for b in blist[i + 1:]:
            oa, ob = offsets[a.name], offsets[b.name]
            if _overlap(a, b) and oa < ob + b.size and ob < oa + a.size:
                return (f"{a.name} [{oa}, {oa + a.size}) and {b.name} [{ob}, {ob + b.size}) overlap, and both "
                        f"are live at step {max(a.start, b.start)}")
    for n, b in bufs.items():
        b.offset = offsets[n]
    return None


def plan_smem(tb: TBGraph, schedule: SchedulePlan | list[int] | None = None, enabled: bool = True,
              capacity: int | None = None, double_buffer: bool = True,
              registers: Iterable[str] = (), timeout_ms: int = 2000,
              sizes: Mapping[str, int] | None = None,
              extra: Mapping[str, tuple[int, int, int]] | None = None) -> SmemPlan:
    """Assign shared-memory offsets to `tb`'s tiles; raises SmemCapacityError when the
    plan needs more than `capacity` bytes (default 227 KiB, sm_90).

    For the lowering, which stores some tiles differently (padded rows, deeper input
    rings): `sizes` overrides a tile's bytes (all copies included), `extra` adds
    buffers of its own, name -> (bytes, first step, last step) on the same steps
    (e.g. f32 accumulator scratch). `timeout_ms=0` skips the exact search."""
    cap = capacity or DEFAULT_SMEM
    order = schedule.order if isinstance(schedule, SchedulePlan) else (schedule or program_order(tb))
    bufs = buffers(tb, order, double_buffer, registers, sizes, extra)
    blist = list(bufs.values())
    no_reuse = sum(b.size for b in blist)
    optimal = False
    if not enabled:
        off = 0
        for b in blist:
            b.offset, off = off, off + b.size
        total = off
    else:
        offs = _first_fit(blist)
        total = max((offs[b.name] + b.size for b in blist), default=0)
        lower, _ = _peak(blist)
        optimal = total == lower
        if not optimal and timeout_ms > 0 and len(blist) <= 40:
            exact, proven = _exact(blist, total, lower, timeout_ms)
            if exact is not None:
                t2 = max(exact[b.name] + b.size for b in blist)
                if t2 <= total:
                    offs, total, optimal = exact, t2, proven
        for b in blist:
            b.offset = offs[b.name]
    if total > cap:
        peak, s = _peak(blist)
        live = sorted((b for b in blist if b.start <= s <= b.end), key=lambda b: -b.size)
        detail = ", ".join(f"{b.name} {b.size} B" + (" (double-buffered)" if b.copies == 2 else "")
                           for b in live[:6])
        raise SmemCapacityError(
            f"[smem] the block graph needs {total} bytes of shared memory, more than the capacity "
            f"{cap} (at step {s} these are live: {detail}); use smaller tiles (a larger grid or "
            f"for-loop range)" + (" or disable double buffering" if any(b.copies == 2 for b in live) else ""))
    return SmemPlan(bufs, total, no_reuse, cap, optimal, enabled)
