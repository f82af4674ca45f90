"""Noise-aware verdicts on repeated before/after benchmark samples (../shared/reference/scale-speed-noise.md C).

Per shape: the medians of both arms, the gain of the after median over the before median (positive =
faster, whatever the metric's direction), and a verdict:

* ``improved``  the gain is at least the practical threshold AND the samples are significantly apart
  (one-sided exact Mann-Whitney U, scipy; alpha 0.01, or the smallest p the sample sizes allow when
  that is larger: 3 + 3 samples can only reach 0.05, i.e. every after sample beats every before sample);
* ``regressed`` the same the other way round;
* ``within_noise`` everything in between (never rounded into a win);
* ``missing`` an arm has no sample.

The practical threshold follows the measured noise and shrinks with the repeats (issue 37): ``max(MIN_GAIN_PCT,
K x noise x sqrt(1/nb + 1/na))``, the standard error of the median difference, where noise is the relative
standard deviation of the runs (pooled over every shape and arm of the job, or the shape's own when that is
larger) and K (outcome/intervals.py ``job_k``) is 3.75 for a job of up to 56 shapes -- 3.06 x noise at 3
repeats, 2.37 at 5, 1.68 at 10 -- and grows with the job's shape count so the expected false verdicts per
job stay bounded (~0.05 at the real GPU's noise). With no noise, any gain of 1 % or more is real. With a
single sample per arm there is no noise estimate: the bar is ``SINGLE_SAMPLE_PCT`` and no test.
``legacy=True`` is the rule before issue 37 (``max(MIN_GAIN_PCT, NOISE_K x noise)``, fixed in the repeats),
kept for benchmarks/outcome_noise.py's side-by-side figures.

Each judged shape also carries how sure it is (intervals.py): the Hodges-Lehmann gain and its exact
distribution-free interval (``gain_hl_pct``, ``gain_lo_pct``, ``gain_hi_pct``, ``gain_conf_pct``) and the
chance that a shape with no change would clear its bar (``false_rate``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .intervals import false_rate, hl_gain, job_k

VERDICTS = ("improved", "regressed", "within_noise", "missing")
MIN_GAIN_PCT = 1.0
NOISE_K = 3.0
SINGLE_SAMPLE_PCT = 2.0
ALPHA = 0.01


def rel_sd_pct(values: Sequence[float]) -> float | None:
    """Relative standard deviation in % (None below 2 samples)."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return statistics.stdev(values) / abs(med) * 100.0 if med else None


def pooled_noise_pct(samples: Mapping[Any, tuple[Sequence[float], Sequence[float]]]) -> float | None:
    """Median relative sd over every arm of every shape with >= 2 samples (the node's noise)."""
    sds = [s for b, a in samples.values() for s in (rel_sd_pct(b), rel_sd_pct(a)) if s is not None]
    return round(statistics.median(sds), 3) if sds else None


def _p_min(n: int, m: int) -> float:
    return 1.0 / math.comb(n + m, n)


def _mwu_p(faster: Sequence[float], slower: Sequence[float]) -> float:
    """One-sided exact Mann-Whitney U p-value that `faster` is stochastically greater than `slower`."""
    try:
        from scipy.stats import mannwhitneyu  # noqa: PLC0415 - heavy import, only when judging
    except ImportError:  # an environment installed before scipy became a dependency: the strictest rule
        # (every `faster` sample beats every `slower` one) is the exact test at its smallest p
        return _p_min(len(faster), len(slower)) if min(faster) > max(slower) else 1.0
    return float(mannwhitneyu(faster, slower, alternative="greater", method="exact").pvalue)


def judge(before: Sequence[float], after: Sequence[float], higher_is_better: bool,
          pooled_noise: float | None = None, k_se: float | None = None, legacy: bool = False) -> dict[str, Any]:
    """The verdict of one shape; keys: verdict, before, after (medians), gain_pct, threshold_pct,
    noise_pct, p_value (None without a test), before_n, after_n, gain_hl_pct, gain_lo_pct, gain_hi_pct,
    gain_conf_pct (None below 2 samples a side), false_rate. ``k_se``: the job's factor (default: one
    shape's, 3.75)."""
    b = [float(x) for x in before if x is not None and x > 0 and math.isfinite(x)]
    a = [float(x) for x in after if x is not None and x > 0 and math.isfinite(x)]
    out: dict[str, Any] = {"before_n": len(b), "after_n": len(a), "before": None, "after": None,
                           "gain_pct": None, "threshold_pct": None, "noise_pct": None, "p_value": None,
                           "gain_hl_pct": None, "gain_lo_pct": None, "gain_hi_pct": None, "gain_conf_pct": None,
                           "false_rate": 0.0}
    if not b or not a:
        return {**out, "verdict": "missing"}
    bm, am = statistics.median(b), statistics.median(a)
    ratio = am / bm if higher_is_better else bm / am
    gain = (ratio - 1.0) * 100.0
    own = [s for s in (rel_sd_pct(b), rel_sd_pct(a)) if s is not None]
    noise = max([*own, *([pooled_noise] if pooled_noise is not None else [])], default=None)
    if noise is None:
        threshold = SINGLE_SAMPLE_PCT
    elif legacy:
        threshold = max(MIN_GAIN_PCT, NOISE_K * noise)
    else:
        k = job_k(1) if k_se is None else k_se
        threshold = max(MIN_GAIN_PCT, k * noise * math.sqrt(1.0 / len(b) + 1.0 / len(a)))
    # speed: bigger = faster, so "after faster" is a one-sided test on the same scale for both directions
    sb = b if higher_is_better else [-x for x in b]
    sa = a if higher_is_better else [-x for x in a]
    p_faster = p_slower = None
    if len(b) >= 2 and len(a) >= 2:
        alpha = max(ALPHA, _p_min(len(b), len(a)))
        p_faster, p_slower = _mwu_p(sa, sb), _mwu_p(sb, sa)
        faster_ok = p_faster <= alpha + 1e-12
        slower_ok = p_slower <= alpha + 1e-12
    else:
        faster_ok = slower_ok = True  # no test possible: the (stricter) single-sample bar decides
    if gain >= threshold and faster_ok:
        verdict = "improved"
    elif gain <= -threshold and slower_ok:
        verdict = "regressed"
    else:
        verdict = "within_noise"
    p = p_faster if gain >= 0 else p_slower
    hl = hl_gain([math.log(x) for x in sa if x > 0] if higher_is_better else [-math.log(-x) for x in sa],
                 [math.log(x) for x in sb if x > 0] if higher_is_better else [-math.log(-x) for x in sb])
    if hl is not None:
        out.update(gain_hl_pct=hl[0], gain_lo_pct=hl[1], gain_hi_pct=hl[2], gain_conf_pct=hl[3])
    out["false_rate"] = false_rate(threshold, noise, len(b), len(a)) if len(b) >= 2 and len(a) >= 2 else 0.0
    return {**out, "verdict": verdict, "before": bm, "after": am, "gain_pct": round(gain, 2),
            "threshold_pct": round(threshold, 2), "noise_pct": None if noise is None else round(noise, 3),
            "p_value": None if p is None else round(p, 4)}


def judge_all(samples: Mapping[Any, tuple[Sequence[float], Sequence[float]]],
              higher_is_better: bool, legacy: bool = False,
              looks: int = 1) -> tuple[dict[Any, dict[str, Any]], float | None]:
    """Verdicts for every key of ``{key: (before samples, after samples)}`` and the pooled noise; the bar's
    factor is the job's (its count of shapes with samples in both arms, times ``looks`` when the samples
    come from a sequential design that judges each shape up to that many times)."""
    pooled = pooled_noise_pct(samples)
    k = job_k(sum(1 for b, a in samples.values() if b and a), looks)
    return {key: judge(b, a, higher_is_better, pooled, k, legacy) for key, (b, a) in samples.items()}, pooled
