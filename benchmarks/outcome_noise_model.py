"""The model half of benchmarks/outcome_noise.py (issue 37): both verdict rules on the measured-noise model."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.outcome.intervals import undecided  # noqa: E402
from orchestrator.outcome.verdict import judge_all  # noqa: E402
from orchestrator.sim import noise_model as nm  # noqa: E402

MS = (1, 8, 32, 128, 512, 2048, 8192)
NKS = ((1536, 7168), (4096, 7168), (7168, 2048), (24576, 1536))
GAINS = (("A/A", 0.0), ("-2 %", -2.0), ("+2 %", 2.0), ("+5 %", 5.0), ("+10 %", 10.0))


def shapes(count: int) -> list[tuple[str, int]]:
    out = []
    for i in range(count):
        m, (n, k) = MS[i % len(MS)], NKS[(i // len(MS)) % len(NKS)]
        out.append((f"a8w8_blockscale|gfx950|256|k={k}|m={m}|n={n}|i={i // 28}", m))
    return out


def job_samples(job: int, shp, repeats: int, gain_pct: float) -> dict:
    """{shape: (before times, after times)}: process 2r is before run r, 2r + 1 after run r (interleaved)."""
    out = {}
    for key, m in shp:
        before = [100.0 * (1 + nm.rel_error(key, m, job, 2 * r)) for r in range(repeats)]
        after = [100.0 / (1 + gain_pct / 100.0) * (1 + nm.rel_error(key, m, job, 2 * r + 1)) for r in range(repeats)]
        out[key] = (before, after)
    return out


def sequential(job: int, shp, gain_pct: float, start: int, step: int, most: int) -> tuple[dict, float]:
    """A sequential design: ``start`` runs per arm, then ``step`` more for the undecided shapes only, up to
    ``most``; the bar's union bound covers every look. Returns the verdicts and the mean runs per arm."""
    looks = 1 + (most - start + step - 1) // step
    full = job_samples(job, shp, most, gain_pct)
    runs = {k: start for k in full}
    while True:
        v, _ = judge_all({k: (b[:runs[k]], a[:runs[k]]) for k, (b, a) in full.items()}, higher_is_better=False,
                         looks=looks)
        more = [k for k in full if runs[k] < most and undecided(v[k])]
        if not more:
            return v, sum(runs.values()) / len(runs)
        for k in more:
            runs[k] = min(most, runs[k] + step)


def figures(jobs: int, count: int, repeats: int, legacy: bool, seq: tuple[int, int, int] | None = None) -> dict:
    shp = shapes(count)
    res = {}
    for name, g in GAINS:
        improved = regressed = clean = any_false = 0
        mean_runs = 0.0
        for j in range(jobs):
            if seq:
                v, used = sequential(1000 * repeats + j, shp, g, *seq)
                mean_runs += used / jobs
            else:
                v, _ = judge_all(job_samples(1000 * repeats + j, shp, repeats, g), higher_is_better=False,
                                 legacy=legacy)
            imp = sum(x["verdict"] == "improved" for x in v.values())
            reg = sum(x["verdict"] == "regressed" for x in v.values())
            improved, regressed = improved + imp, regressed + reg
            clean += imp == 0 and reg == 0
            any_false += (imp + reg) > 0
        res[name] = {"improved": improved / (jobs * count), "regressed": regressed / (jobs * count),
                     "false_per_job": (improved + regressed) / jobs, "clean": clean, "any_false": any_false,
                     "runs": mean_runs}
    return res


def print_model(jobs: int, count: int, repeats_list: list[int], seq: tuple[int, int, int] | None = None) -> None:
    t0 = time.monotonic()
    print(f"noise model: sim/noise_model.py (measured H200 noise), {jobs} jobs x {count} shapes per cell, "
          "before/after processes interleaved")
    print(f"{'rule':<6} {'R':>3} | {'A/A false/job':>13} {'A/A clean jobs':>14} | {'-2% promoted':>12} | "
          f"{'power +2%':>9} {'+5%':>6} {'+10%':>6}")
    for r in repeats_list:
        for label, legacy in (("old", True), ("new", False)):
            f = figures(jobs, count, r, legacy)
            aa = f["A/A"]
            print(f"{label:<6} {r:>3} | {aa['false_per_job']:>13.2f} {aa['clean']:>8}/{jobs:<5} | "
                  f"{100 * f['-2 %']['improved']:>11.2f}% | {100 * f['+2 %']['improved']:>8.1f}% "
                  f"{100 * f['+5 %']['improved']:>5.1f}% {100 * f['+10 %']['improved']:>5.1f}%")
    if seq:
        f = figures(jobs, count, seq[0], False, seq)
        aa = f["A/A"]
        label = f"seq {seq[0]}+{seq[1]}..{seq[2]}"
        print(f"{label:<10} | {aa['false_per_job']:>13.2f} {aa['clean']:>8}/{jobs:<5} | "
              f"{100 * f['-2 %']['improved']:>11.2f}% | {100 * f['+2 %']['improved']:>8.1f}% "
              f"{100 * f['+5 %']['improved']:>5.1f}% {100 * f['+10 %']['improved']:>5.1f}%")
        print("  mean runs per arm: " + ", ".join(f"{n} {f[n]['runs']:.1f}" for n, _ in GAINS))
    print(f"(model figures took {time.monotonic() - t0:.0f} s)")
