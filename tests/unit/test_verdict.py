"""Noise-aware verdicts (orchestrator/outcome/verdict.py): the numbers the issue names."""
import random

from orchestrator.outcome.verdict import judge, judge_all


def test_no_noise_any_gain_of_two_percent_is_improved():
    v = judge([100.0] * 3, [98.0] * 3, higher_is_better=False)
    assert v["verdict"] == "improved" and v["gain_pct"] == 2.04 and v["threshold_pct"] == 1.0


def test_five_percent_faster_under_1_5_percent_noise_is_improved_and_flat_is_within_noise():
    rng = random.Random(7)
    noisy = lambda base: [base * (1 + rng.uniform(-0.015, 0.015)) for _ in range(3)]  # noqa: E731
    samples = {("fast", i): (noisy(100.0), noisy(100.0 / 1.05)) for i in range(20)}
    samples.update({("flat", i): (noisy(100.0), noisy(100.0)) for i in range(20)})
    samples.update({("slow", i): (noisy(100.0), noisy(101.0)) for i in range(20)})
    verdicts, pooled = judge_all(samples, higher_is_better=False)
    assert 0.5 < pooled < 1.2
    assert all(v["verdict"] == "improved" for k, v in verdicts.items() if k[0] == "fast")
    assert not any(v["verdict"] == "improved" for k, v in verdicts.items() if k[0] in ("flat", "slow"))


def test_overlapping_samples_are_never_rounded_into_a_win():
    v = judge([100, 90, 110], [95, 85, 105], higher_is_better=False)
    assert v["verdict"] == "within_noise" and v["p_value"] > 0.05


def test_higher_is_better_and_missing():
    assert judge([10, 10.1, 9.9], [12, 12.1, 11.9], higher_is_better=True)["verdict"] == "improved"
    assert judge([10, 10.1, 9.9], [8, 8.1, 7.9], higher_is_better=True)["verdict"] == "regressed"
    assert judge([], [1.0], higher_is_better=True)["verdict"] == "missing"


def test_single_sample_uses_the_stricter_bar_without_a_test():
    assert judge([100.0], [98.5], higher_is_better=False)["verdict"] == "within_noise"
    v = judge([100.0], [97.0], higher_is_better=False)
    assert v["verdict"] == "improved" and v["p_value"] is None


def test_without_scipy_the_strictest_rule_decides(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "scipy.stats", None)   # import fails as in an old environment
    assert judge([100, 100.2, 99.9], [95, 95.1, 94.9], higher_is_better=False)["verdict"] == "improved"
    assert judge([100, 96, 99.9], [95, 97, 94.9], higher_is_better=False)["verdict"] == "within_noise"


def test_error_columns_are_carried_and_a_worse_error_is_flagged():
    from orchestrator.outcome.compare import compare
    k = lambda m: {"m": m, "n": 512, "k": 7168}  # noqa: E731
    before = [{"key": k(1), "value": 10.0}, {"key": k(2), "value": 10.0}] * 3
    after = [{"key": k(1), "value": 9.0}, {"key": k(2), "value": 9.0}] * 3
    comp = compare(before, after, key_columns=("m", "n", "k"), metric="ck us", higher_is_better=False, judge=True)
    comp.set_errors([{"key": k(1), "value": 0.0}, {"key": k(2), "value": 0.01}],
                    [{"key": k(1), "value": 0.02}, {"key": k(2), "value": 0.01}])
    assert list(comp.rows["err_worse"]) == ["true", "false"]
    assert comp.summary["err_worse"] == 1
    assert "before_err,after_err,err_worse" in comp.csv_text().splitlines()[0]
