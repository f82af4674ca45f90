"""orchestrator.outcome.compare: signs, missing sides, repeated runs, size classes, groups, CSV contract."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from orchestrator.outcome.compare import (
    Comparison,
    compare,
    comparison_csv_columns,
    size_class,
    speedup_pct,
)
from orchestrator.variants import VARIANTS

GEMM = ("m", "n", "k")


def r(value, **key):
    return {"key": key, "value": value}


def gemm(before, after, **kw):
    kw.setdefault("key_columns", GEMM)
    kw.setdefault("metric", "ck us")
    kw.setdefault("higher_is_better", False)
    return compare(before, after, **kw)


def row(c: Comparison, **key) -> dict:
    df = c.rows
    mask = True
    for k, v in key.items():
        mask = mask & (df[k] == v)
    sub = df[mask]
    assert len(sub) == 1, sub
    return sub.iloc[0].to_dict()


# ------------------------------------------------------------------ sign conventions


def test_lower_is_better_faster_is_positive():
    c = gemm([r(10.0, m=1, n=8, k=8)], [r(8.0, m=1, n=8, k=8)])
    x = row(c, m=1)
    assert x["speedup_pct"] == 25.0          # (10/8 - 1) * 100
    assert x["ratio"] == 1.25
    assert x["status"] == "improved"


def test_lower_is_better_slower_is_negative():
    c = gemm([r(8.0, m=1, n=8, k=8)], [r(10.0, m=1, n=8, k=8)])
    assert row(c, m=1)["speedup_pct"] == -20.0   # (8/10 - 1) * 100
    assert row(c, m=1)["status"] == "regressed"


def test_higher_is_better_faster_is_positive():
    c = gemm([r(100.0, m=1, n=8, k=8), r(100.0, m=2, n=8, k=8)],
             [r(125.0, m=1, n=8, k=8), r(80.0, m=2, n=8, k=8)],
             metric="ck TFLOPS", higher_is_better=True)
    assert row(c, m=1)["speedup_pct"] == 25.0     # (125/100 - 1) * 100
    assert row(c, m=2)["speedup_pct"] == -20.0
    assert c.summary["direction"] == "higher is better"


def test_speedup_rounded_to_two_decimals():
    assert speedup_pct(3.0, 7.0, higher_is_better=False) == -57.14   # (3/7 - 1) * 100 = -57.142857
    assert speedup_pct(7.0, 3.0, higher_is_better=False) == 133.33
    assert speedup_pct(3.0, 7.0, higher_is_better=True) == 133.33
    assert speedup_pct(None, 7.0, higher_is_better=True) is None
    assert speedup_pct(0.0, 7.0, higher_is_better=True) is None


@pytest.mark.parametrize("after, status", [
    (100.0 / 1.01, "unchanged"),   # exactly +1.00 %: inside the band
    (100.0 / 0.99, "unchanged"),   # exactly -1.00 %
    (100.0 / 1.0101, "improved"),  # +1.01 %
    (100.0 / 0.9899, "regressed"),  # -1.01 %
    (100.0, "unchanged"),
])
def test_noise_band_boundaries(after, status):
    c = gemm([r(100.0, m=1, n=8, k=8)], [r(after, m=1, n=8, k=8)])
    assert row(c, m=1)["status"] == status


def test_noise_band_is_configurable():
    c = gemm([r(100.0, m=1, n=8, k=8)], [r(97.0, m=1, n=8, k=8)], noise_pct=5.0)
    assert row(c, m=1)["speedup_pct"] == 3.09
    assert row(c, m=1)["status"] == "unchanged"
    assert c.summary["noise_pct"] == 5.0
    with pytest.raises(ValueError):
        gemm([], [], noise_pct=-1)


# ------------------------------------------------------------------ missing sides, duplicates


def test_shape_on_one_side_only_keeps_row_with_empty_speedup():
    before = [r(10.0, m=1, n=8, k=8), r(10.0, m=2, n=8, k=8)]
    after = [r(8.0, m=1, n=8, k=8), r(5.0, m=4, n=8, k=8)]
    c = gemm(before, after)
    assert list(c.rows["m"]) == [1, 2, 4]
    only_before, only_after = row(c, m=2), row(c, m=4)
    assert only_before["before"] == 10.0 and math.isnan(only_before["after"])
    assert math.isnan(only_before["speedup_pct"]) and only_before["status"] == "missing"
    assert only_before["note"] == "not in after run"
    assert math.isnan(only_after["before"]) and only_after["after"] == 5.0
    assert only_after["status"] == "missing" and only_after["note"] == "not in before run"
    s = c.summary
    assert (s["shapes"], s["compared"], s["missing"], s["only_before"], s["only_after"]) == (3, 1, 2, 1, 1)


def test_none_nan_and_zero_values_are_missing_not_errors():
    before = [r(None, m=1, n=8, k=8), r(10.0, m=2, n=8, k=8), r(0.0, m=3, n=8, k=8), r(10.0, m=4, n=8, k=8)]
    after = [r(5.0, m=1, n=8, k=8), r(float("nan"), m=2, n=8, k=8), r(5.0, m=3, n=8, k=8),
             r("8", m=4, n=8, k=8)]
    c = gemm(before, after)
    assert list(c.rows["status"]) == ["missing", "missing", "missing", "improved"]
    assert row(c, m=1)["note"] == "no before value"
    assert row(c, m=2)["note"] == "no after value"
    assert row(c, m=3)["note"] == "before value not positive"
    assert row(c, m=4)["speedup_pct"] == 25.0
    assert c.summary["missing"] == 3 and c.summary["only_before"] == 0


def test_duplicate_keys_are_averaged_and_counted():
    before = [r(10.0, m=1, n=8, k=8), r(12.0, m=1, n=8, k=8), r(None, m=1, n=8, k=8)]
    after = [r(11.0, m=1, n=8, k=8)]
    c = gemm(before, after)
    assert len(c.rows) == 1
    x = row(c, m=1)
    assert x["before"] == 11.0 and x["before_n"] == 2 and x["after_n"] == 1
    assert x["speedup_pct"] == 0.0 and x["status"] == "unchanged"
    assert x["before_spread_pct"] == 18.18          # (12 - 10) / 11
    assert math.isnan(x["after_spread_pct"])
    assert x["note"] == "before: mean of 2 (spread 18.18%)"
    assert c.summary["repeated"] == 1


def test_key_values_normalised_across_sides():
    c = gemm([r(10.0, m="16", n=8.0, k=" 8")], [r(5.0, m=16, n=8, k=8)])
    assert len(c.rows) == 1 and row(c, m=16)["speedup_pct"] == 100.0


def test_dtype_key_column_keeps_shapes_apart():
    keys = ("m", "n", "k", "q_dtype_w")
    i8, f8 = "torch.int8", "torch.float8_e4m3fn"
    before = [r(10.0, m=1, n=8, k=8, q_dtype_w=i8), r(20.0, m=1, n=8, k=8, q_dtype_w=f8)]
    after = [r(5.0, m=1, n=8, k=8, q_dtype_w=i8), r(40.0, m=1, n=8, k=8, q_dtype_w=f8)]
    c = gemm(before, after, key_columns=keys)
    assert len(c.rows) == 2
    assert row(c, q_dtype_w="torch.int8")["speedup_pct"] == 100.0
    assert row(c, q_dtype_w="torch.float8_e4m3fn")["speedup_pct"] == -50.0
    assert c.group_columns == ("n", "k", "q_dtype_w")
    assert len(c.per_group) == 2


def test_extra_result_keys_are_ignored_and_key_names_lowercased():
    c = gemm([r(10.0, M=1, N=8, K=8, extra="x")], [r(5.0, m=1, n=8, k=8)])
    assert len(c.rows) == 1 and row(c, m=1)["speedup_pct"] == 100.0


# ------------------------------------------------------------------ summary


def test_summary_statistics_exact():
    before = [r(10.0, m=1, n=8, k=8), r(10.0, m=2, n=8, k=8), r(10.0, m=4, n=8, k=8), r(10.0, m=8, n=8, k=8)]
    after = [r(8.0, m=1, n=8, k=8), r(12.5, m=2, n=8, k=8), r(10.0, m=4, n=8, k=8)]
    s = gemm(before, after).summary
    # speedups: +25.0, -20.0, 0.0 ; ratios 1.25, 0.8, 1.0 -> geomean 1.0
    assert s["avg_speedup_pct"] == 1.67
    assert s["median_speedup_pct"] == 0.0
    assert (s["min_speedup_pct"], s["max_speedup_pct"]) == (-20.0, 25.0)
    assert s["geomean_ratio"] == 1.0 and s["geomean_speedup_pct"] == 0.0
    assert (s["improved"], s["regressed"], s["unchanged"], s["missing"]) == (1, 1, 1, 1)
    assert s["best"] == {"key": {"m": 1, "n": 8, "k": 8}, "speedup_pct": 25.0}
    assert s["worst"] == {"key": {"m": 2, "n": 8, "k": 8}, "speedup_pct": -20.0}
    assert s["metric"] == "ck us" and s["direction"] == "lower is better"


def test_empty_inputs():
    c = gemm([], [])
    assert len(c.rows) == 0 and len(c.by_group) == 0
    assert c.summary["compared"] == 0 and c.summary["avg_speedup_pct"] is None
    assert c.summary["geomean_ratio"] is None and c.summary["best"] is None
    assert c.csv_text() == "m,n,k,metric,before,after,speedup_pct\n"


# ------------------------------------------------------------------ size classes and groups


@pytest.mark.parametrize("m, cls", [(1, "small"), (63, "small"), (64, "medium"), (512, "medium"),
                                    (513, "large"), (32768, "large"), (0, "n/a"), (None, "n/a"),
                                    ("x", "n/a"), ("64", "medium")])
def test_size_class_boundaries(m, cls):
    assert size_class(m) == cls


def test_by_group_gemm_per_nk_and_size_class():
    ms = [1, 63, 64, 512, 513, 1024]
    before = [r(100.0, m=m, n=n, k=4096) for n in (1024, 2048) for m in ms]
    # n=1024: small +25 %, medium -20 %, large 0 %; n=2048: all +100 %
    speed = {1: 80.0, 63: 80.0, 64: 125.0, 512: 125.0, 513: 100.0, 1024: 100.0}
    after = [r(speed[m], m=m, n=1024, k=4096) for m in ms] + [r(50.0, m=m, n=2048, k=4096) for m in ms]
    c = gemm(before, after)
    assert c.size_column == "m" and c.group_columns == ("n", "k")
    g = c.by_group
    assert list(g.columns[:4]) == ["n", "k", "size_class", "range"]
    sub = g[g["n"] == 1024].set_index("size_class")
    assert list(sub.index) == ["small", "medium", "large"]
    assert sub.loc["small", "shapes"] == 2 and sub.loc["small", "mean_speedup_pct"] == 25.0
    assert sub.loc["small", "range"] == "1-63" and sub.loc["large", "range"] == ">512"
    assert sub.loc["medium", "mean_speedup_pct"] == -20.0 and sub.loc["medium", "regressed"] == 2
    assert sub.loc["large", "mean_speedup_pct"] == 0.0 and sub.loc["large", "unchanged"] == 2
    assert list(g[g["n"] == 2048]["mean_speedup_pct"]) == [100.0, 100.0, 100.0]
    totals = c.per_group.set_index("n")
    assert totals.loc[1024, "shapes"] == 6 and totals.loc[1024, "mean_speedup_pct"] == 1.67
    assert totals.loc[2048, "geomean_speedup_pct"] == 100.0
    # rows: groups in first-seen order, m ascending inside a group
    assert list(c.rows["m"]) == ms + ms and list(c.rows["n"]) == [1024] * 6 + [2048] * 6


def test_rows_sorted_by_size_within_group_first_seen_group_order():
    before = [r(1.0, m=m, n=n, k=1) for n, m in [(9, 64), (3, 2), (9, 1), (3, 1)]]
    c = gemm(before, before)
    assert list(zip(c.rows["n"], c.rows["m"])) == [(9, 1), (9, 64), (3, 1), (3, 2)]


def test_moe_groups_by_model_dims_and_token_classes():
    v = VARIANTS["moe_2stages"]
    dims = dict(model_dim=7168, inter_dim=256, expert=256, topk=8)
    before = [r(100.0, token=t, **dims) for t in (1, 63, 64, 512, 513)]
    after = [r(50.0, token=t, **dims) for t in (1, 63, 64, 512, 513)]
    c = compare(before, after, v)
    assert c.key_columns == ("token", "model_dim", "inter_dim", "expert", "topk")
    assert c.metric == "us" and c.higher_is_better is False
    assert c.size_column == "token"
    assert c.group_columns == ("model_dim", "inter_dim", "expert", "topk")
    assert list(c.by_group["size_class"]) == ["small", "medium", "large"]
    assert list(c.by_group["shapes"]) == [2, 2, 1]
    assert set(c.rows["speedup_pct"]) == {100.0}


def test_batched_groups_by_b_n_k():
    before = [r(10.0, b=b, m=m, n=128, k=64) for b in (2, 4) for m in (32, 128)]
    c = gemm(before, before, key_columns=("b", "m", "n", "k"))
    assert c.group_columns == ("b", "n", "k")
    assert list(zip(c.by_group["b"], c.by_group["size_class"])) == [(2, "small"), (2, "medium"),
                                                                     (4, "small"), (4, "medium")]


def test_variant_supplies_keys_metric_and_direction():
    c = compare([r(10.0, m=1, n=8, k=8, q_dtype_w="torch.int8")],
                [r(5.0, m=1, n=8, k=8, q_dtype_w="torch.int8")], VARIANTS["a8w8"])
    assert c.key_columns == ("m", "n", "k", "q_dtype_w")
    assert (c.metric, c.higher_is_better) == ("ck us", False)
    assert row(c, m=1)["speedup_pct"] == 100.0
    c = compare([r(10.0, m=1, n=8, k=8)], [r(5.0, m=1, n=8, k=8)], VARIANTS["a8w8_blockscale"])
    assert (c.metric, c.higher_is_better) == ("ck TFLOPS", True)
    assert row(c, m=1)["speedup_pct"] == -50.0
    # explicit arguments win over the variant's bench spec
    c = compare([r(10.0, m=1, n=8, k=8)], [r(5.0, m=1, n=8, k=8)], VARIANTS["a8w8_blockscale"],
                metric="us", higher_is_better=False)
    assert row(c, m=1)["speedup_pct"] == 100.0


def test_missing_spec_is_an_error():
    with pytest.raises(ValueError):
        compare([], [], key_columns=GEMM, metric="us")
    with pytest.raises(ValueError):
        compare([], [], metric="us", higher_is_better=False)
    with pytest.raises(ValueError):
        compare([], [], key_columns=("m", "before"), metric="us", higher_is_better=False)


# ------------------------------------------------------------------ comparison.csv contract


def test_csv_header_and_rows_exact(tmp_path):
    keys = ("m", "n", "k", "q_dtype_w")
    before = [r(10.0, m=1, n=8, k=8, q_dtype_w="torch.int8"), r(3.0, m=2, n=8, k=8, q_dtype_w="torch.int8")]
    after = [r(8.0, m=1, n=8, k=8, q_dtype_w="torch.int8"), r(2.5, m=64, n=8, k=8, q_dtype_w="torch.int8")]
    c = gemm(before, after, key_columns=keys)
    path = c.to_csv(tmp_path / "comparison.csv")
    text = path.read_text()
    assert text.splitlines()[0] == "m,n,k,q_dtype_w,metric,before,after,speedup_pct"
    assert comparison_csv_columns(keys) == text.splitlines()[0].split(",")
    assert text.splitlines()[1:] == [
        "1,8,8,torch.int8,ck us,10.0,8.0,25.0",
        "2,8,8,torch.int8,ck us,3.0,,",
        "64,8,8,torch.int8,ck us,,2.5,",
    ]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(c.rows) == 3


def test_csv_metric_with_space_and_integer_keys_stay_integers(tmp_path):
    c = gemm([r(1.0, m=1, n=8, k=8), r(1.0, m=2, n=8, k=8)], [r(1.0, m=1, n=8, k=8)],
             metric="ck TFLOPS", higher_is_better=True)
    lines = c.csv_text().splitlines()
    assert lines[1] == "1,8,8,ck TFLOPS,1.0,1.0,0.0"
    assert lines[2] == "2,8,8,ck TFLOPS,1.0,,"        # no "2.0" from a NaN-promoted column


def test_to_dict_roundtrip_is_json_safe():
    c = gemm([r(10.0, m=1, n=8, k=8), r(3.0, m=2, n=8, k=8)], [r(8.0, m=1, n=8, k=8)])
    d = json.loads(json.dumps(c.to_dict()))
    c2 = Comparison.from_dict(d)
    assert c2.csv_text() == c.csv_text()
    assert c2.summary == c.summary
    assert list(c2.by_group["mean_speedup_pct"].fillna(-1)) == list(c.by_group["mean_speedup_pct"].fillna(-1))
    assert d["rows"][1]["speedup_pct"] is None


def test_from_csv_recomputes_everything(tmp_path):
    keys = ("m", "n", "k", "q_dtype_w")
    before = [r(10.0, m=1, n=8, k=8, q_dtype_w="torch.int8"), r(3.0, m=2, n=8, k=8, q_dtype_w="torch.int8"),
              r(4.0, m=600, n=8, k=8, q_dtype_w="torch.int8")]
    after = [r(8.0, m=1, n=8, k=8, q_dtype_w="torch.int8"), r(5.0, m=600, n=8, k=8, q_dtype_w="torch.int8")]
    c = gemm(before, after, key_columns=keys)
    c2 = Comparison.from_csv(c.to_csv(tmp_path / "comparison.csv"))
    assert c2.key_columns == keys and c2.metric == "ck us" and c2.higher_is_better is False
    assert c2.csv_text() == c.csv_text()
    assert list(c2.rows["status"]) == ["improved", "missing", "regressed"]
    assert c2.summary["avg_speedup_pct"] == c.summary["avg_speedup_pct"]
    assert list(c2.by_group["size_class"]) == ["small", "large"]
    # the record form a caller may keep in its state: rows + summary
    import pandas as pd
    d = {"rows": pd.read_csv(tmp_path / "comparison.csv").to_dict("records"), "summary": c.summary}
    assert Comparison.from_dict(d).csv_text() == c.csv_text()


@pytest.mark.parametrize("metric, hib", [("ck TFLOPS", True), ("TFLOPS", True), ("asm TFLOPS", True),
                                         ("ck us", False), ("us", False), ("ck avg", False),
                                         ("ck bpreshuffle us", False)])
def test_guess_higher_is_better(metric, hib):
    from orchestrator.outcome.compare import guess_higher_is_better
    assert guess_higher_is_better(metric) is hib
