"""Issue 38's figure: with a budget for 30 % of the shapes' tuning time, how much of the server's GPU time do the
shapes chosen by time share cover, against the shapes chosen by miss lines?

    python benchmarks/profile_budget.py [--budget-frac 0.3] [--ranks 8]

A served DeepSeek-V3-style model (a8w8_blockscale, the seven (N,K) pairs of its attention and dense MLP, 61
layers), modelled, no node: decode steps at batch sizes 1..256 (most steps at 8..64) and prefill chunks of
512..8192 tokens, each GEMM call's GPU time from the simulator's perf model (``orchestrator/sim/perf_model.py``,
untuned) and its tuned time from the same model. Four choices through the product's own ``budget`` module:
- what ``run --profile --budget`` does: the shapes with the most GPU time per second of tuning that fit
  (``budget.within_by_share``);
- the largest time share first (``budget.rank`` with the shares, then ``budget.within``): a few large
  prefill shapes, whose tuning costs most, fill the budget;
- miss lines, AITER >= v0.1.30: a miss is logged once per shape per process, so every shape has ``--ranks``
  lines (ties, kept in the order the log names them);
- miss lines, one per lookup (the best case any line count can be): lines proportional to calls.
Printed: the shapes chosen, the share of all GPU time they hold, and the end-to-end gain their tuned rows give
(Amdahl: sum of share x time saved).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.outcome import budget  # noqa: E402
from orchestrator.sim import perf_model  # noqa: E402

VARIANT = "a8w8_blockscale"
NK = [(24576, 1536), (32768, 512), (7168, 16384), (36864, 7168), (7168, 18432), (2112, 7168), (7168, 2048)]
LAYERS = 61
DECODE = {1: 200, 2: 300, 4: 600, 8: 2000, 16: 4000, 32: 5000, 64: 4000, 128: 1500, 256: 400}   # steps per batch
PREFILL = {512: 300, 1024: 250, 2048: 200, 4096: 120, 8192: 60}                                   # chunks per size


def workload():
    """[(shape, calls, us per call)] in the order a server log names them (prefill first: it runs first)."""
    out = []
    for steps in (PREFILL, DECODE):
        for m, count in steps.items():
            for n, k in NK:
                shape = {"m": m, "n": n, "k": k}
                out.append((shape, count * LAYERS, perf_model.default_us(VARIANT, shape)))
    return out


def choose(shapes, exact, family, time, budget_s, by_share=False):
    ranked, _ = budget.rank(shapes, exact, family, time)
    if by_share:        # what `run --profile --budget` does (steps/shapes.py)
        return budget.within_by_share(ranked, budget_s, 8, budget.ASSUMED_S["gemm"], time)[0]
    return budget.within(ranked, budget_s, 8, budget.ASSUMED_S["gemm"])[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--ranks", type=int, default=8)
    args = ap.parse_args(argv)
    work = workload()
    shapes = [s for s, _, _ in work]
    gpu = {budget.exact_key(s): calls * us for s, calls, us in work}
    total = sum(gpu.values())
    share = {k: v / total for k, v in gpu.items()}
    saved = {}
    for s, _, us in work:
        tuned = perf_model.tuned_us(VARIANT, s)
        saved[budget.exact_key(s)] = max(0.0, 1.0 - tuned / us) if tuned else 0.0
    budget_s = args.budget_frac * budget.estimate(shapes, 8, budget.ASSUMED_S["gemm"])
    once = budget.miss_counts([(s, args.ranks) for s in shapes])
    per_call = budget.miss_counts([(s, calls) for s, calls, _ in work])
    rows = [("time share per tuning second (run --profile)", choose(shapes, *once, share, budget_s, True)),
            ("largest time share first", choose(shapes, *once, share, budget_s)),
            (f"miss lines, once per process x {args.ranks} ranks (v0.1.30)", choose(shapes, *once, {}, budget_s)),
            ("miss lines, one per lookup (best case)", choose(shapes, *per_call, {}, budget_s))]
    print(f"{len(shapes)} shapes, {total / 1e6:.1f} s of GPU time; budget {args.budget_frac:.0%} of the tuning time "
          f"({budget.fmt_duration(budget_s)} on 8 GPUs)\n")
    print(f"{'ranked by':<52} {'shapes':>6} {'GPU time held':>14} {'end-to-end gain':>16}")
    for name, chosen in rows:
        keys = [budget.exact_key(s) for s in chosen]
        held = sum(share[k] for k in keys)
        gain = sum(share[k] * saved[k] for k in keys)
        print(f"{name:<52} {len(chosen):>6} {100 * held:>13.1f}% {100 * gain:>15.2f}%")
    top = round(args.budget_frac * len(shapes))          # the other reading: 30 % of the shapes
    print(f"\nthe top {top} of {len(shapes)} shapes ({args.budget_frac:.0%} of the shapes), whatever they cost to tune:")
    for name, exact_family, time in (("time share (--profile)", once, share),
                                     (f"miss lines, once per process x {args.ranks} ranks", once, {}),
                                     ("miss lines, one per lookup", per_call, {})):
        chosen = budget.rank(shapes, *exact_family, time)[0][:top]
        keys = [budget.exact_key(s) for s in chosen]
        print(f"{name:<52} {len(chosen):>6} {100 * sum(share[k] for k in keys):>13.1f}% "
              f"{100 * sum(share[k] * saved[k] for k in keys):>15.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
