"""How sure a verdict is: the Hodges-Lehmann gain with its exact distribution-free interval, the job-wide
noise factor, and the expected number of false verdicts (stdlib only).

* ``hl_gain(faster_logs, slower_logs)``: the Hodges-Lehmann shift of two samples of log times/speeds (the
  median of every pairwise difference) and the interval between the k-th smallest and k-th largest
  difference, k from the exact null distribution of the Mann-Whitney U statistic (Lehmann 1975, the
  interval that inverts the rank-sum test): the widest-k interval that covers at least ``CONF`` (95 %), or,
  when the sample sizes cannot reach it (3 + 3: at most 90 %), the full range and its exact confidence.
  In % gain: ``exp(d) - 1``.
* ``job_k(shapes)``: the factor on the standard error of the median difference. 3.75 x sqrt(1/nb + 1/na)
  x noise gave 0.04 false verdicts per 56-shape job on the real GPU's samples
  (../shared/reference/real-gpu-noise.md); a job of more shapes scales it by the ratio of the two-sided
  Bonferroni normal quantiles (``z(1 - target / 2m)`` over the same at m = 56) so the expected false
  verdicts per job stay the same whatever the job's size; never below 3.75.
* ``false_rate(threshold, noise, nb, na)``: the normal-approximation chance that a shape with no change
  clears the bar (either way): the median difference's sd is sqrt(pi/2) x noise x sqrt(1/nb + 1/na). An
  upper estimate: the rank test required beside the bar removes more.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from collections.abc import Sequence

K_SE = 3.75
K_ANCHOR_SHAPES = 56
TARGET_FALSE = 0.05
CONF = 0.95
_N = NormalDist()


@lru_cache(maxsize=None)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of arrangements giving U = 0 .. n*m under the null (n, m sample sizes)."""
    if n == 0 or m == 0:
        return (1,)
    a = _u_counts(n - 1, m)        # the largest value is from the first sample: it beats all m
    b = _u_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(a):
        out[u + m] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def u_cdf(n: int, m: int, u: int) -> float:
    """P(U <= u) under the null, exactly."""
    counts = _u_counts(n, m)
    return sum(counts[: max(0, u + 1)]) / math.comb(n + m, n)


def hl_gain(faster: Sequence[float], slower: Sequence[float]) -> tuple[float, float, float, float] | None:
    """(hl %, low %, high %, confidence %) of the gain of ``faster`` over ``slower`` (log values, bigger =
    faster); None with fewer than two samples on a side."""
    n, m = len(faster), len(slower)
    if n < 2 or m < 2:
        return None
    d = sorted(x - y for x in faster for y in slower)
    mid = len(d) // 2
    hl = d[mid] if len(d) % 2 else (d[mid - 1] + d[mid]) / 2
    k = 1
    while k + 1 <= len(d) // 2 and 1.0 - 2.0 * u_cdf(n, m, k) >= CONF:
        k += 1
    conf = 1.0 - 2.0 * u_cdf(n, m, k - 1)
    pct = lambda v: round((math.exp(v) - 1.0) * 100.0, 2)  # noqa: E731
    return pct(hl), pct(d[k - 1]), pct(d[len(d) - k]), round(conf * 100.0, 1)


def job_k(shapes: int, looks: int = 1) -> float:
    """The factor on the median difference's standard error for a job of ``shapes`` judged shapes, each
    judged up to ``looks`` times (a sequential design: the union bound runs over shapes x looks)."""
    tests = max(1, shapes) * max(1, looks)
    if tests <= K_ANCHOR_SHAPES:
        return K_SE
    z = lambda m: _N.inv_cdf(1.0 - TARGET_FALSE / (2.0 * m))  # noqa: E731
    return round(K_SE * z(tests) / z(K_ANCHOR_SHAPES), 3)


def undecided(v: dict) -> bool:
    """A sequential design's "add runs" test: within_noise, yet the median gain is at least half the bar
    (a shape that looks like it moves); a shape clearly flat, or already decided, gets no more runs."""
    return (v.get("verdict") == "within_noise" and v.get("gain_pct") is not None
            and v.get("threshold_pct") is not None and abs(v["gain_pct"]) >= 0.5 * v["threshold_pct"])


def false_rate(threshold: float, noise: float | None, nb: int, na: int) -> float:
    """Chance (normal approximation) that a shape with no true change clears ``threshold`` % either way."""
    if noise is None or noise <= 0 or nb < 1 or na < 1:
        return 0.0
    sd = math.sqrt(math.pi / 2.0) * noise * math.sqrt(1.0 / nb + 1.0 / na)
    return 2.0 * (1.0 - _N.cdf(threshold / sd))
