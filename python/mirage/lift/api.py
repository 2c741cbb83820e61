"""`lift_triton`: a Triton kernel in, a verified `kn` program and its formula out."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .errors import LiftError


@dataclass
class LiftResult:
    kernel: str
    graph: object  # KNGraph: inputs = arrays read, outputs = arrays written (argument order)
    inputs: list  # names of the arrays read
    outputs: list  # names of the arrays written
    formula: str  # simplified textbook formula, one line per output
    raw_formula: str  # the synthesized program before simplification
    proofs: list  # verify.Proof
    times: dict  # phase -> seconds (symbolic, synthesis, verification, hoare, simplification)
    steps: dict = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        """The graph is proved equal to the kernel by Z3 at the launched sizes (every
        written element, for all real inputs), agrees with it in float64 and over finite
        fields, and the all-sizes proof did not find a size where they differ. `all_sizes` says whether
        it is also proved for every size."""
        bounded = [p for p in self.proofs if p.method == "z3"]
        numeric = [p for p in self.proofs if p.method == "numeric"]
        failed = [p for p in self.proofs if p.status in ("refuted", "failed")]
        return bool(bounded) and all(p.status == "proved" for p in bounded) and \
            all(p.status == "passed" for p in numeric) and not failed

    @property
    def all_sizes(self) -> bool:
        """Proved for every size (Hoare logic over the launch grid; its scope lists the
        preconditions), not only the launched ones."""
        return self.verified and any(p.method == "hoare" and p.status == "proved" for p in self.proofs)

    def equivalent_to(self, reference, delta: float = 1e-9):
        """Does the lifted graph compute the intended program `reference` (a KNGraph with
        the same inputs and outputs)? Our verifier's finite-field test (paper §5 of
        Mirage), `mirage.verify.check_equivalence`: `.equivalent`, `.reason`, `.error_bound`."""
        from ..verify import check_equivalence

        return check_equivalence(reference, self.graph, delta=delta)

    def report(self) -> str:
        lines = [f"kernel {self.kernel}: reads {', '.join(self.inputs) or '-'}; writes {', '.join(self.outputs)}",
                 f"  formula     {self.formula.replace(chr(10), chr(10) + ' ' * 14)}",
                 f"  synthesized {self.raw_formula.replace(chr(10), chr(10) + ' ' * 14)}",
                 f"  verified    {('yes, for all sizes' if self.all_sizes else 'yes, for the launched sizes') if self.verified else 'NO'}"]
        for p in self.proofs:
            lines.append(f"    [{p.method}] {p.part}: {p.status} for {p.scope} ({p.seconds:.2f} s)"
                         + (f" - {p.detail}" if p.detail else ""))
        lines.append("  times       " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LiftResult({self.kernel}: {self.formula!r}, verified={self.verified})"


def lift_triton(kernel, grid, *args, simplify: bool = True, prove: bool = True, timeout_ms: int = 60000,
                **constexprs) -> LiftResult:
    """Lift a `@triton.jit` kernel launched as `kernel[grid](*args, **constexprs)`.

    `args`: numpy arrays or torch CPU tensors for pointer arguments (their shapes are
    the tensors' shapes; their values are not used), Python ints and floats for scalars.
    `grid`: an int, a tuple, or a callable of the meta-parameters, as for Triton.
    `prove=False` skips both Z3 proofs (for sizes too large for them; the result is then
    not `verified`). Raises `LiftError` (naming the construct and its line) where the kernel
    cannot be lifted."""
    from .. import float16, float32
    from . import program as P
    from .symbolic import trace
    from .synthesize import Synthesizer
    from .verify import Proof, field_check, numeric_check, prove_bounded, scope

    times = {}
    t0 = time.perf_counter()
    tr = trace(kernel, grid, args, constexprs)
    times["symbolic"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    outputs = [n for n, b in tr.buffers.items() if b.written.any()]
    if not outputs:
        raise LiftError(f"{tr.kernel} stores nothing", f"{tr.file}:{tr.first_line}")
    for n in outputs:
        b = tr.buffers[n]
        if not b.written.all():
            miss = np.flatnonzero(~b.written)
            raise LiftError(f"{tr.kernel} writes only {int(b.written.sum())} of the {b.mem.size} elements of "
                            f"'{n}' (never: {miss[:8].tolist()}{'...' if miss.size > 8 else ''}): a mask or the "
                            "grid leaves part of the output unwritten", f"{tr.file}:{tr.first_line}")
    inputs = [n for n, b in tr.buffers.items() if b.read.any()]
    syn = Synthesizer(tr.buffers, inputs)
    terms = []
    for n in outputs:
        b = tr.buffers[n]
        try:
            terms.append(syn.output(n, b.mem.reshape(b.shape)))
        except LiftError as e:
            if e.where:
                raise
            raise LiftError(f"cannot synthesize what {tr.kernel} stores: {e.message}", b.store_at) from None

    def dt(name):
        return float16 if tr.buffers[name].dtype == "float16" else float32

    graph = P.to_graph(terms, [(n, tr.buffers[n].shape, dt(n)) for n in inputs], tr.kernel)
    times["synthesis"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    bounded = prove_bounded(tr, graph, outputs, timeout_ms) if prove else \
        Proof("kernel = graph", "z3", "skipped", scope(tr), 0.0, "prove=False")
    proofs = [bounded, numeric_check(tr, graph, outputs), field_check(tr, graph, outputs)]
    times["verification"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    from .hoare import prove_grid_loop

    proofs.append(prove_grid_loop(kernel, tr, args, constexprs, terms, outputs, timeout_ms) if prove else
                  Proof("grid loop (Hoare)", "hoare", "not attempted", "all sizes", 0.0, "prove=False"))
    times["hoare"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    from .formula import render

    raw = render(terms, outputs, tr, simplify=False)
    formula = render(terms, outputs, tr, simplify=simplify)
    times["simplification"] = time.perf_counter() - t0
    return LiftResult(tr.kernel, graph, inputs, outputs, formula, raw, proofs, times, dict(syn.steps))
