"""`--mirage-verify`: check candidate μGraphs against their reference in the same module.

Convention: a function carrying the attribute `mirage.candidate_of = @ref` is a candidate
for the function `@ref` of the same module:

    func.func @ref(%x: tensor<...>) -> tensor<...> { ... }
    func.func @cand(%x: tensor<...>) -> tensor<...> attributes {mirage.candidate_of = @ref} { ... }

For each candidate the pass runs `mirage.verify.check_equivalence` and emits, at the
candidate function,
- a remark `mirage-verify: @cand is equivalent to @ref (N trials, error bound B, p=..., q=...)`
  (when Theorem 2 gives no bound for these sizes the remark says so), or
- an error `mirage-verify: @cand is not equivalent to @ref: output O element [i, j] differs ...`
  (or the floating-point filter's reason), and the pass fails.
Functions without the attribute are left alone; a candidate naming a missing function is
an error.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import diagnostics as D
from ..bridge import functions, import_graphs
from ..registry import Option, Pass, PassFailure, parse_bool, register


@dataclass
class Outcome:
    candidate: str
    reference: str
    ok: bool
    message: str


def verify_pairs(graphs: dict, pairs: list, delta: float = 1e-9, seed: int = 0, fp_check: bool = True,
                 max_trials: int = 64) -> list[Outcome]:
    """The pass logic on the Python model: `graphs` name -> KNGraph, `pairs` [(cand, ref)]."""
    from ...verify.equivalence import check_equivalence

    out = []
    for cand, ref in pairs:
        if ref not in graphs:
            out.append(Outcome(cand, ref, False, f"mirage-verify: @{cand} is a candidate of @{ref}, "
                                                 f"which is not a function of this module"))
            continue
        try:
            res = check_equivalence(graphs[ref], graphs[cand], delta=delta, seed=seed, fp_check=fp_check,
                                    max_trials=max_trials)
        except ValueError as e:  # the pair cannot be compared (e.g. different signatures): the user's
            out.append(Outcome(cand, ref, False, f"mirage-verify: @{cand} cannot be checked against @{ref}: {e}"))
            continue
        if res.equivalent:
            model = " (random-function model for exp/sqrt)" if res.model == "random" else ""
            bound = (f"error bound {res.error_bound:.3g}{model}" if res.bound_met else
                     f"no error bound <= {delta:g}: {res.bound_details.get('note', '')}")
            msg = (f"mirage-verify: @{cand} is equivalent to @{ref} ({res.trials} trials, {bound}, "
                   f"p={res.primes[0]}, q={res.primes[1]}")
            if res.max_fp_error is not None:
                msg += f", fp error {res.max_fp_error:.3g}"
            out.append(Outcome(cand, ref, True, msg + ")"))
        else:
            why = str(res.first_difference) if res.first_difference else res.reason
            out.append(Outcome(cand, ref, False, f"mirage-verify: @{cand} is not equivalent to @{ref}: {why}"))
    return out


def _probability(text: str) -> float:
    """`delta` option: a failure probability in (0, 1), checked when the options are parsed
    so that a bad value is a usage error, not an error inside the pass."""
    v = float(text)
    if not 0.0 < v < 1.0:
        raise ValueError(f"expected a probability in (0, 1), got {text}")
    return v


def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise ValueError(f"expected an integer >= 1, got {text}")
    return v


def _seed(text: str) -> int:
    v = int(text)
    if v < 0:
        raise ValueError(f"expected a non-negative integer, got {text}")
    return v


def _attr_symbol(attr) -> str:
    text = str(attr)
    return text[1:] if text.startswith("@") else text.strip('"')


@register
class VerifyPass(Pass):
    argument = "mirage-verify"
    summary = ("Check every function marked `mirage.candidate_of = @ref` against @ref by finite-field "
               "random testing (remark when equivalent, error with the first differing element otherwise)")
    options = (
        Option("delta", _probability, 1e-9, "failure probability bound to reach (Theorem 3)"),
        Option("seed", _seed, 0, "seed of the random trials"),
        Option("fp-check", parse_bool, True, "also run the floating-point stability filter"),
        Option("max-trials", _positive_int, 64, "cap on the number of finite-field trials"),
    )

    def run(self, module, **options) -> None:
        pairs, where = [], {}
        for f in functions(module):
            if "mirage.candidate_of" in f.attributes:
                name = _attr_symbol(f.attributes["sym_name"])
                pairs.append((name, _attr_symbol(f.attributes["mirage.candidate_of"])))
                where[name] = f
        if not pairs:
            return
        graphs = {g.name: g for g in import_graphs(module, "mirage-verify")}
        failed = False
        for o in verify_pairs(graphs, pairs, options.get("delta", 1e-9), options.get("seed", 0),
                              options.get("fp-check", True), options.get("max-trials", 64)):
            if o.ok:
                D.remark(where[o.candidate], o.message)
            else:
                D.error(where[o.candidate], o.message)
                failed = True
        if failed:
            raise PassFailure("mirage-verify found a non-equivalent candidate")
