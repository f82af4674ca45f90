"""Comparison building blocks: the contract's constants, key/value normalisation, one side's samples
(``Side``: mean, median, spread) and the typed pandas frames of comparison rows and groups."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .keys import norm_key_value

DEFAULT_NOISE_PCT = 1.0
SIZE_COLUMNS = ("m", "token")  # the first one present in the key is the size dimension
# (name, lowest, highest or None = unbounded), inclusive bounds
SIZE_CLASSES: tuple[tuple[str, int, int | None], ...] = (
    ("small", 1, 63),
    ("medium", 64, 512),
    ("large", 513, None),
)
SIZE_CLASS_NA = "n/a"
STATUSES = ("improved", "regressed", "unchanged", "missing")
VALUE_COLUMNS = ("metric", "before", "after", "speedup_pct")
GAIN_INTERVAL_COLUMNS = ("gain_hl_pct", "gain_lo_pct", "gain_hi_pct", "gain_conf_pct")
# comparison.csv columns after VALUE_COLUMNS when the samples were judged (run --repeats)
JUDGED_CSV_COLUMNS = ("verdict", "promoted", "before_n", "after_n", "noise_pct", "threshold_pct", "p_value",
                      "before_err", "after_err", "err_worse",
                      # issue 37: how sure -- the Hodges-Lehmann gain (%, positive = faster) and its exact
                      # distribution-free interval at gain_conf_pct % confidence
                      *GAIN_INTERVAL_COLUMNS)
VERDICT_STATUS = {"improved": "improved", "regressed": "regressed", "within_noise": "unchanged",
                   "missing": "missing"}


_ROW_EXTRA = ("ratio", "status", "size_class", "before_n", "after_n",
              "before_spread_pct", "after_spread_pct", "note",
              "verdict", "promoted", "noise_pct", "threshold_pct", "p_value",
              "before_err", "after_err", "err_worse", *GAIN_INTERVAL_COLUMNS)
_GROUP_STATS = ("shapes", "compared", "improved", "regressed", "unchanged", "missing",
                "mean_speedup_pct", "min_speedup_pct", "max_speedup_pct", "geomean_speedup_pct")


def comparison_csv_columns(key_columns: Sequence[str]) -> list[str]:
    """Header of comparison.csv: the key columns, then metric, before, after, speedup_pct."""
    return [*key_columns, *VALUE_COLUMNS]


def size_class(value: Any) -> str:
    """'small' (1-63), 'medium' (64-512), 'large' (>512); 'n/a' when not a positive integer."""
    v = norm_key_value(value)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        return SIZE_CLASS_NA
    for name, low, high in SIZE_CLASSES:
        if v >= low and (high is None or v <= high):
            return name
    return SIZE_CLASS_NA  # pragma: no cover - classes cover every v >= 1


def size_class_range(name: str) -> str:
    for cname, low, high in SIZE_CLASSES:
        if cname == name:
            return f"{low}-{high}" if high is not None else f">{low - 1}"
    return ""


def speed_ratio(before: float | None, after: float | None, higher_is_better: bool) -> float | None:
    """> 1 means faster. None when either side is missing, not finite or not positive."""
    if not _positive(before) or not _positive(after):
        return None
    return (after / before) if higher_is_better else (before / after)


def speedup_pct(before: float | None, after: float | None, higher_is_better: bool) -> float | None:
    """Positive = faster, rounded to 2 decimals; None when it cannot be computed."""
    r = speed_ratio(before, after, higher_is_better)
    return None if r is None else round((r - 1.0) * 100.0, 2)


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def norm_value(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def sort_token(v: Any) -> tuple:
    """Sort numbers numerically before text; None last."""
    if v is None:
        return (2, 0, "")
    if isinstance(v, (int, float)):
        return (0, v, "")
    return (1, 0, str(v))


def round_or_none(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def nan_to_none(x: Any) -> Any:
    if x is None:
        return None
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):
        return x
    return x.item() if hasattr(x, "item") and not isinstance(x, str) else x


def guess_higher_is_better(metric: str) -> bool:
    m = metric.lower()
    return any(t in m for t in ("tflops", "gflops", "flops", "gb/s", "tb/s", "bw", "bandwidth", "throughput"))


def is_blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == ""


@dataclass
class Side:
    values: list[float]   # the finite values seen for this key
    seen: int             # results seen with this key (including empty values)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        if not self.values:
            return None
        # 10 significant digits: keeps every digit a benchmark prints, drops float noise of the mean
        return float(f"{math.fsum(self.values) / len(self.values):.10g}")

    @property
    def median(self) -> float | None:
        if not self.values:
            return None
        return float(f"{statistics.median(self.values):.10g}")

    @property
    def spread_pct(self) -> float | None:
        m = self.mean
        if len(self.values) < 2 or not m:
            return None
        return round((max(self.values) - min(self.values)) / abs(m) * 100.0, 2)


def aggregate(results: Iterable[Mapping[str, Any]], key_columns: tuple[str, ...]) -> dict[tuple, Side]:
    out: dict[tuple, Side] = {}
    for r in results or ():
        key = r.get("key") or {}
        lk = {str(c).lower(): v for c, v in key.items()}
        k = tuple(norm_key_value(lk.get(c)) for c in key_columns)
        side = out.setdefault(k, Side([], 0))
        side.seen += 1
        v = norm_value(r.get("value"))
        if v is not None:
            side.values.append(v)
    return out


def _key_dtype_series(values: list[Any]) -> pd.Series:
    non_null = [v for v in values if v is not None]
    if non_null and all(isinstance(v, int) and not isinstance(v, bool) for v in non_null):
        return pd.Series(values, dtype="Int64")
    return pd.Series(values, dtype=object)


def rows_frame(records: list[dict[str, Any]], key_columns: tuple[str, ...]) -> pd.DataFrame:
    cols = [*key_columns, *VALUE_COLUMNS, *_ROW_EXTRA]
    data: dict[str, pd.Series] = {}
    for c in cols:
        vals = [nan_to_none(r.get(c)) for r in records]
        if c in key_columns:
            data[c] = _key_dtype_series(vals)
        elif c in ("before", "after", "speedup_pct", "ratio", "before_spread_pct", "after_spread_pct",
                   "noise_pct", "threshold_pct", "p_value", "before_err", "after_err", *GAIN_INTERVAL_COLUMNS):
            data[c] = pd.Series([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        elif c in ("before_n", "after_n"):
            data[c] = pd.Series([int(v or 0) for v in vals], dtype="int64")
        else:
            data[c] = pd.Series(["" if v is None else str(v) for v in vals], dtype=object)
    return pd.DataFrame(data, columns=cols)


def group_frame(records: list[dict[str, Any]], group_columns: tuple[str, ...]) -> pd.DataFrame:
    cols = [*group_columns, "size_class", "range", *_GROUP_STATS]
    data: dict[str, pd.Series] = {}
    for c in cols:
        vals = [nan_to_none(r.get(c)) for r in records]
        if c in group_columns:
            data[c] = _key_dtype_series(vals)
        elif c in ("size_class", "range"):
            data[c] = pd.Series(["" if v is None else str(v) for v in vals], dtype=object)
        elif c.endswith("_pct"):
            data[c] = pd.Series([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        else:
            data[c] = pd.Series([int(v or 0) for v in vals], dtype="int64")
    return pd.DataFrame(data, columns=cols)


def resolve_spec(variant, key_columns, metric, higher_is_better) -> tuple[tuple[str, ...], str, bool]:
    bench = getattr(variant, "bench", None) if variant is not None else None
    if variant is not None and bench is None and (key_columns is None or metric is None
                                                 or higher_is_better is None):
        raise ValueError(f"variant {getattr(variant, 'name', variant)!r} has no benchmark spec; "
                         "pass key_columns, metric and higher_is_better")
    if key_columns is None:
        if bench is None:
            raise ValueError("compare() needs key_columns (or a variant)")
        bench_keys = list(dict.fromkeys(bench.key_columns.values()))
        # the variant's (tuned CSV) column order first, then any bench-only key column
        ordered = [c for c in variant.key_columns if c in bench_keys]
        key_columns = ordered + [c for c in bench_keys if c not in ordered]
    if metric is None:
        if bench is None:
            raise ValueError("compare() needs metric (or a variant)")
        metric = bench.metric
    if higher_is_better is None:
        if bench is None:
            raise ValueError("compare() needs higher_is_better (or a variant)")
        higher_is_better = bench.higher_is_better
    key_columns = tuple(str(c).lower() for c in key_columns)
    if not key_columns:
        raise ValueError("key_columns is empty")
    if len(set(key_columns)) != len(key_columns):
        raise ValueError(f"duplicate key columns: {key_columns}")
    clash = set(key_columns) & (set(VALUE_COLUMNS) | set(_ROW_EXTRA))
    if clash:
        raise ValueError(f"key columns clash with comparison columns: {sorted(clash)}")
    return key_columns, str(metric), bool(higher_is_better)
