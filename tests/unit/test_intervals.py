"""How sure a verdict is (outcome/intervals.py) and the bar that shrinks with the runs (issue 37)."""
import math
import random

from orchestrator.outcome.intervals import false_rate, hl_gain, job_k, u_cdf, undecided
from orchestrator.outcome.verdict import judge, judge_all


def test_exact_u_distribution():
    assert u_cdf(3, 3, 0) == 1 / 20 and u_cdf(5, 5, 0) == 1 / 252 and u_cdf(5, 5, 2) == 4 / 252
    assert u_cdf(4, 6, 24) == 1.0


def test_hodges_lehmann_interval_is_exact_and_covers():
    logs = lambda xs: [math.log(x) for x in xs]  # noqa: E731
    hl, lo, hi, conf = hl_gain(logs([105, 106, 104]), logs([100, 101, 99]))
    assert conf == 90.0 and lo < hl < hi and abs(hl - 5.0) < 0.2      # 3 + 3: the full range, 1 - 2/20
    assert hl_gain(logs([1, 2, 3, 4, 5]), logs([1, 2, 3, 4, 5]))[3] >= 95.0
    assert hl_gain([0.1], [0.0, 0.2]) is None
    rng = random.Random(3)    # coverage of a true 3 % gain under 1 % noise, 5 + 5 runs: at least the stated level
    hits = 0
    for _ in range(400):
        a = [math.log(100 / 1.03 * (1 + rng.gauss(0, 0.01))) for _ in range(5)]
        b = [math.log(100 * (1 + rng.gauss(0, 0.01))) for _ in range(5)]
        _, lo, hi, conf = hl_gain([-x for x in a], [-x for x in b])
        hits += lo <= 3.0 <= hi
    assert hits / 400 >= conf / 100 - 0.03


def test_the_bar_shrinks_with_runs_and_grows_with_the_job():
    assert job_k(1) == job_k(56) == 3.75 and 3.75 < job_k(100) < job_k(500) < 5.0
    rng = random.Random(1)
    noisy = lambda base, r: [base * (1 + rng.gauss(0, 0.01)) for _ in range(r)]  # noqa: E731
    bars = {r: judge(noisy(100, r), noisy(97, r), False, pooled_noise=1.0)["threshold_pct"] for r in (3, 5, 10)}
    assert bars[3] > bars[5] > bars[10] and abs(bars[5] - 2.37) < 0.6      # noise = max(own, pooled) >= 1 %
    legacy = judge(noisy(100, 10), noisy(97, 10), False, pooled_noise=1.0, legacy=True)["threshold_pct"]
    assert legacy >= 3.0                                                    # the old bar did not shrink
    assert false_rate(2.37, 1.0, 5, 5) < false_rate(1.0, 1.0, 5, 5) and false_rate(3, None, 5, 5) == 0.0


def test_a_aa_job_of_100_shapes_promotes_nothing_and_3_percent_at_1_percent_noise_is_found():
    rng = random.Random(11)
    noisy = lambda base, r: [base * (1 + rng.gauss(0, 0.01)) for _ in range(r)]  # noqa: E731
    falses = found = 0
    for job in range(20):
        aa = {i: (noisy(100, 10), noisy(100, 10)) for i in range(100)}
        v, _ = judge_all(aa, higher_is_better=False)
        falses += sum(x["verdict"] != "within_noise" for x in v.values())
        ab = {i: (noisy(100, 10), noisy(100 / 1.03, 10)) for i in range(100)}
        found += sum(x["verdict"] == "improved" for x in judge_all(ab, higher_is_better=False)[0].values())
    assert falses <= 1 and found / 2000 > 0.8


def test_looks_widen_the_bar_and_undecided_picks_only_moving_shapes():
    assert job_k(100, 4) > job_k(100) and job_k(10, 4) == 3.75
    assert undecided({"verdict": "within_noise", "gain_pct": 2.0, "threshold_pct": 3.0})
    assert not undecided({"verdict": "within_noise", "gain_pct": 0.5, "threshold_pct": 3.0})
    assert not undecided({"verdict": "improved", "gain_pct": 4.0, "threshold_pct": 3.0})
