"""comparison.csv's time_share column and the expected end-to-end gain (issue 38, run --profile)."""

from __future__ import annotations

import csv
import io

import pytest

from orchestrator.outcome.compare import Comparison, compare


def r(value, **key):
    return {"key": key, "value": value}


def _comp(judge=True):
    before = [r(100.0, m=1, n=8, k=8), r(50.0, m=2, n=8, k=8), r(10.0, m=4, n=8, k=8)]
    after = [r(60.0, m=1, n=8, k=8), r(50.0, m=2, n=8, k=8), r(5.0, m=4, n=8, k=8)]
    if judge:
        before, after = before * 3, [dict(x) for x in after * 3]
    return compare(before, after, key_columns=("m", "n", "k"), metric="us", higher_is_better=False, judge=judge)


def test_the_share_is_a_new_last_column_and_the_gain_is_amdahl_over_the_faster_rows():
    c = _comp()
    old = list(c.csv_columns)
    c.set_time_share({(1, 8, 8): 0.5, ("2", "8", "8"): 0.25})           # m=4 not in the profile: 0
    assert c.csv_columns == old + ["time_share"]
    rows = {row["m"]: row for row in csv.DictReader(io.StringIO(c.csv_text()))}
    assert [rows[m]["time_share"] for m in ("1", "2", "4")] == ["0.5", "0.25", "0.0"]
    # m=1 is 40 % faster on half the time; m=2 unchanged; m=4 faster but holds no profiled time
    assert c.summary["expected_e2e_gain_pct"] == pytest.approx(20.0)
    assert c.summary["profiled_time_share"] == pytest.approx(0.75)
    back = Comparison.from_dict(c.to_dict())
    assert back.csv_text() == c.csv_text()                              # promote rewrites it from the JSON


def test_without_a_profile_comparison_csv_is_as_before():
    assert "time_share" not in _comp().csv_columns and "time_share" not in _comp(judge=False).csv_columns
