"""Before/after benchmark comparison: a pure pandas core that yields comparison.csv and the report's numbers.

Input is what ``orchestrator.parsing.bench.bench_results`` returns for each run:
``[{"key": {lower-case key column: value}, "value": float | None}, ...]``.

Conventions (the user contract):

* ``speedup_pct`` is POSITIVE when the kernel got FASTER, whatever the metric's direction:
  lower-is-better (us):      ``(before / after - 1) * 100``
  higher-is-better (TFLOPS): ``(after / before - 1) * 100``
  rounded to 2 decimals. The underlying ``ratio`` (before/after or after/before; > 1 = faster)
  feeds the geometric mean.
* One row per distinct shape key. A key benchmarked several times on one side (repeated runs)
  is averaged; ``before_n`` / ``after_n`` give the number of values averaged and
  ``before_spread_pct`` / ``after_spread_pct`` the (max - min) / mean spread, a noise indicator.
* A shape present on one side only, or whose value is missing / not positive, keeps its row
  with an empty speedup and status ``missing`` (``note`` says why).
* ``status`` (report only): ``improved`` / ``regressed`` when the rounded speedup is outside the
  noise band ``±noise_pct`` (default 1 %), ``unchanged`` inside it (boundary included),
  ``missing`` when there is nothing to compare.
* ``comparison.csv`` has EXACTLY the key columns (in ``key_columns`` order) then
  ``metric,before,after,speedup_pct``.
* Size classes of the size column (``m`` for GEMM and batched GEMM, ``token`` for MoE):
  small 1-63 (decode), medium 64-512, large > 512 (prefill). Groups are all the other key
  columns: (n, k[, q_dtype_w]) for GEMM, (b, n, k) for batched, (model_dim, inter_dim, expert,
  topk[, ...]) for MoE, so rows of different dtypes are never mixed.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "Comparison",
    "DEFAULT_NOISE_PCT",
    "SIZE_CLASSES",
    "SIZE_COLUMNS",
    "STATUSES",
    "compare",
    "compare_for_variant",
    "comparison_csv_columns",
    "guess_higher_is_better",
    "size_class",
    "speedup_pct",
]

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
# comparison.csv columns after VALUE_COLUMNS when the samples were judged (run --repeats)
JUDGED_CSV_COLUMNS = ("verdict", "promoted", "before_n", "after_n", "noise_pct", "threshold_pct", "p_value",
                      "before_err", "after_err", "err_worse")
_VERDICT_STATUS = {"improved": "improved", "regressed": "regressed", "within_noise": "unchanged",
                   "missing": "missing"}

_INT_RE = re.compile(r"[+-]?\d+")


# --------------------------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------------------------


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


def norm_key_value(v: Any) -> Any:
    """Make '16', 16, 16.0 and numpy ints one key value; None/NaN -> None; other text stripped."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return None
        return int(v) if v.is_integer() else v
    if hasattr(v, "item") and not isinstance(v, str):  # numpy scalars
        try:
            return norm_key_value(v.item())
        except (TypeError, ValueError):
            pass
    s = str(v).strip()
    if _INT_RE.fullmatch(s):
        return int(s)
    try:  # "16.0" as read back from a float CSV column
        f = float(s)
        if f.is_integer() and not s.lower().startswith(("inf", "nan", "-inf")):
            return int(f)
    except ValueError:
        pass
    return s


def _norm_value(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _sort_token(v: Any) -> tuple:
    """Sort numbers numerically before text; None last."""
    if v is None:
        return (2, 0, "")
    if isinstance(v, (int, float)):
        return (0, v, "")
    return (1, 0, str(v))


def _round_or_none(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def _nan_to_none(x: Any) -> Any:
    if x is None:
        return None
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):
        return x
    return x.item() if hasattr(x, "item") and not isinstance(x, str) else x


# --------------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """The comparison of one variant's before/after benchmarks.

    ``rows``: one row per shape, columns = key columns, ``metric, before, after, speedup_pct``
    (the CSV contract) then ``ratio, status, size_class, before_n, after_n, before_spread_pct,
    after_spread_pct, note``.
    ``summary``: dict, see ``compare``.
    ``by_group``: one row per (group, size class present), columns = group columns then
    ``size_class, range, shapes, compared, improved, regressed, unchanged, missing,
    mean_speedup_pct, min_speedup_pct, max_speedup_pct, geomean_speedup_pct``.
    ``per_group``: the same per group over all sizes (``size_class`` = ``"all"``).
    """

    key_columns: tuple[str, ...]
    metric: str
    higher_is_better: bool
    noise_pct: float
    size_column: str | None
    group_columns: tuple[str, ...]
    rows: pd.DataFrame
    summary: dict[str, Any]
    by_group: pd.DataFrame
    per_group: pd.DataFrame = field(default_factory=pd.DataFrame)
    judged: bool = False  # repeated samples judged by orchestrator.verdict: verdict/promoted columns

    def set_errors(self, before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]) -> None:
        """The benchmarks' error column (median per side, results like compare's) and whether it got worse."""
        sides = {"before": _aggregate(before, self.key_columns), "after": _aggregate(after, self.key_columns)}
        keys = [tuple(norm_key_value(_nan_to_none(r[c])) for c in self.key_columns) for _, r in self.rows.iterrows()]
        for side, agg in sides.items():
            self.rows[f"{side}_err"] = [float("nan") if k not in agg or agg[k].median is None else agg[k].median
                                        for k in keys]
        b, a = self.rows["before_err"], self.rows["after_err"]
        self.rows["err_worse"] = ["" if bv != bv or av != av else ("true" if av > bv else "false")
                                  for bv, av in zip(b, a)]
        self.summary["err_worse"] = sum(1 for v in self.rows["err_worse"] if v == "true")

    def set_promoted(self, keys: Iterable[tuple]) -> None:
        """Mark rows promoted (keys normalised like the rows' key columns)."""
        wanted = {tuple(norm_key_value(v) for v in k) for k in keys}
        self.rows["promoted"] = [
            "true" if tuple(norm_key_value(_nan_to_none(r[c])) for c in self.key_columns) in wanted else "false"
            for _, r in self.rows.iterrows()]
        self.summary["promoted"] = sum(1 for v in self.rows["promoted"] if v == "true")

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def csv_columns(self) -> list[str]:
        return comparison_csv_columns(self.key_columns) + (list(JUDGED_CSV_COLUMNS) if self.judged else [])

    def csv_frame(self) -> pd.DataFrame:
        return self.rows.loc[:, self.csv_columns]

    def csv_text(self) -> str:
        """comparison.csv content: exactly key columns + metric,before,after,speedup_pct."""
        return self.csv_frame().to_csv(index=False, na_rep="", lineterminator="\n")

    def to_csv(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(self.csv_text(), encoding="utf-8")
        return p

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (NaN -> None), accepted back by ``Comparison.from_dict`` and the report."""

        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _nan_to_none(v) for k, v in rec.items()} for rec in df.to_dict("records")]

        return {
            "key_columns": list(self.key_columns),
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "direction": self.direction,
            "noise_pct": self.noise_pct,
            "size_column": self.size_column,
            "group_columns": list(self.group_columns),
            "rows": records(self.rows),
            "summary": dict(self.summary),
            "by_group": records(self.by_group),
            "per_group": records(self.per_group),
            "judged": self.judged,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        """Inverse of ``to_dict``. A dict without ``key_columns`` is read as comparison.csv records
        (``{"rows": [csv row dicts], "summary": {...}}``) and recomputed, see ``from_records``."""
        if "key_columns" not in d:
            summary = d.get("summary") or {}
            hib = d.get("higher_is_better", summary.get("higher_is_better"))
            if hib is None and summary.get("direction"):
                hib = str(summary["direction"]).startswith("higher")
            noise = d.get("noise_pct", summary.get("noise_pct", DEFAULT_NOISE_PCT))
            return cls.from_records(list(d.get("rows") or []),
                                    metric=d.get("metric") or summary.get("metric"),
                                    higher_is_better=hib, noise_pct=float(noise))
        key_columns = tuple(d["key_columns"])
        rows = _rows_frame(list(d.get("rows") or []), key_columns)
        group_columns = tuple(d.get("group_columns") or ())
        return cls(
            key_columns=key_columns,
            metric=d["metric"],
            higher_is_better=bool(d["higher_is_better"]),
            noise_pct=float(d.get("noise_pct", DEFAULT_NOISE_PCT)),
            size_column=d.get("size_column"),
            group_columns=group_columns,
            rows=rows,
            summary=dict(d.get("summary") or {}),
            by_group=_group_frame(list(d.get("by_group") or []), group_columns),
            per_group=_group_frame(list(d.get("per_group") or []), group_columns),
            judged=bool(d.get("judged")),
        )


    @classmethod
    def from_records(
        cls,
        records: Sequence[Mapping[str, Any]],
        *,
        metric: str | None = None,
        higher_is_better: bool | None = None,
        noise_pct: float = DEFAULT_NOISE_PCT,
    ) -> Comparison:
        """Rebuild from comparison.csv rows (key columns, metric, before, after, speedup_pct).

        Key columns are the columns before ``metric``. ``higher_is_better`` None = guessed from the
        metric name (TFLOPS / GB/s / bandwidth = higher, anything else = a time, lower). A side
        that is empty in the CSV counts as absent; repeated-run counts are not in the CSV (n = 1).
        """
        records = [dict(r) for r in records]
        cols = list(records[0]) if records else []
        if records and "metric" not in cols:
            raise ValueError("comparison records need a 'metric' column (comparison.csv layout)")
        key_columns = tuple(cols[: cols.index("metric")]) if cols else ()
        if metric is None:
            metric = next((str(r["metric"]) for r in records if not _is_blank(r.get("metric"))), "")
        if higher_is_better is None:
            higher_is_better = guess_higher_is_better(metric)
        before = [{"key": {c: r.get(c) for c in key_columns}, "value": r.get("before")}
                  for r in records if _norm_value(r.get("before")) is not None]
        after = [{"key": {c: r.get(c) for c in key_columns}, "value": r.get("after")}
                 for r in records if _norm_value(r.get("after")) is not None]
        if not key_columns:
            return compare([], [], key_columns=("m",), metric=metric, higher_is_better=higher_is_better,
                           noise_pct=noise_pct)
        return compare(before, after, key_columns=key_columns, metric=metric,
                       higher_is_better=higher_is_better, noise_pct=noise_pct)

    @classmethod
    def from_csv(cls, path: str | Path, *, higher_is_better: bool | None = None,
                 noise_pct: float = DEFAULT_NOISE_PCT) -> Comparison:
        """Read a comparison.csv written by ``to_csv`` (see ``from_records``)."""
        df = pd.read_csv(path, keep_default_na=True)
        return cls.from_records(df.to_dict("records"), higher_is_better=higher_is_better, noise_pct=noise_pct)


def guess_higher_is_better(metric: str) -> bool:
    m = metric.lower()
    return any(t in m for t in ("tflops", "gflops", "flops", "gb/s", "tb/s", "bw", "bandwidth", "throughput"))


def _is_blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == ""


# --------------------------------------------------------------------------------------------
# compare()
# --------------------------------------------------------------------------------------------

_ROW_EXTRA = ("ratio", "status", "size_class", "before_n", "after_n",
              "before_spread_pct", "after_spread_pct", "note",
              "verdict", "promoted", "noise_pct", "threshold_pct", "p_value",
              "before_err", "after_err", "err_worse")
_GROUP_STATS = ("shapes", "compared", "improved", "regressed", "unchanged", "missing",
                "mean_speedup_pct", "min_speedup_pct", "max_speedup_pct", "geomean_speedup_pct")


def compare(
    before: Iterable[Mapping[str, Any]],
    after: Iterable[Mapping[str, Any]],
    variant: Any = None,
    *,
    key_columns: Sequence[str] | None = None,
    metric: str | None = None,
    higher_is_better: bool | None = None,
    noise_pct: float = DEFAULT_NOISE_PCT,
    judge: bool = False,
) -> Comparison:
    """Join two benchmark runs on the shape key and compute per-shape, summary and group numbers.

    Either pass ``key_columns``, ``metric`` and ``higher_is_better`` explicitly, or a
    ``KernelVariant`` (already ``resolve``d for the node's AITER version) whose ``bench`` spec
    supplies whatever is not given. Keys of the results that are not key columns are ignored;
    a key column absent from a result counts as an empty value.

    ``summary`` keys: metric, direction, higher_is_better, noise_pct, shapes, compared, improved,
    regressed, unchanged, missing, only_before, only_after, repeated (shapes averaged over > 1
    value), avg/median/min/max_speedup_pct, geomean_ratio, geomean_speedup_pct, best, worst
    (``{"key": {...}, "speedup_pct": x}`` or None). Statistics are None when nothing compared.
    """
    key_columns, metric, higher_is_better = _resolve_spec(variant, key_columns, metric, higher_is_better)
    if noise_pct < 0:
        raise ValueError("noise_pct must be >= 0")

    b_side = _aggregate(before, key_columns)
    a_side = _aggregate(after, key_columns)

    size_column = next((c for c in SIZE_COLUMNS if c in key_columns), None)
    group_columns = tuple(c for c in key_columns if c != size_column) if size_column else ()

    # order: groups in first-seen order (before run first), then the size column ascending
    keys: list[tuple] = list(b_side)
    keys += [k for k in a_side if k not in b_side]
    group_index: dict[tuple, int] = {}
    for k in keys:
        group_index.setdefault(_group_of(k, key_columns, group_columns), len(group_index))
    size_pos = key_columns.index(size_column) if size_column else None
    keys.sort(key=lambda k: (group_index[_group_of(k, key_columns, group_columns)],
                             _sort_token(k[size_pos]) if size_pos is not None else (0,)))

    verdicts: dict[tuple, dict[str, Any]] = {}
    pooled = None
    if judge:  # every value of a key is one repeated sample: medians + noise-aware verdicts
        from ..verdict import judge_all
        verdicts, pooled = judge_all(
            {k: (b_side[k].values if k in b_side else [], a_side[k].values if k in a_side else [])
             for k in keys}, higher_is_better)
    records = []
    for k in keys:
        rec: dict[str, Any] = dict(zip(key_columns, k))
        b = b_side.get(k)
        a = a_side.get(k)
        bv = b.mean if b else None
        av = a.mean if a else None
        if judge:
            v = verdicts[k]
            bv = b.median if b else None
            av = a.median if a else None
            rec.update(verdict=v["verdict"], promoted="false", noise_pct=v["noise_pct"],
                       threshold_pct=v["threshold_pct"], p_value=v["p_value"])
        ratio = speed_ratio(bv, av, higher_is_better)
        sp = None if ratio is None else round((ratio - 1.0) * 100.0, 2)
        if judge:
            status = _VERDICT_STATUS[verdicts[k]["verdict"]] if sp is not None else "missing"
            if sp is None:
                rec["verdict"] = "missing"
        elif sp is None:
            status = "missing"
        elif sp > noise_pct:
            status = "improved"
        elif sp < -noise_pct:
            status = "regressed"
        else:
            status = "unchanged"
        rec.update(
            metric=metric,
            before=bv,
            after=av,
            speedup_pct=sp,
            ratio=None if ratio is None else round(ratio, 6),
            status=status,
            size_class=size_class(rec[size_column]) if size_column else SIZE_CLASS_NA,
            before_n=b.n if b else 0,
            after_n=a.n if a else 0,
            before_spread_pct=b.spread_pct if b else None,
            after_spread_pct=a.spread_pct if a else None,
            note=_note(b, a),
            _in_before=b is not None,
            _in_after=a is not None,
        )
        records.append(rec)

    rows = _rows_frame(records, key_columns)
    summary = _summary(records, key_columns, metric, higher_is_better, noise_pct)
    if judge:
        summary["verdicts"] = {name: sum(1 for r in records if r.get("verdict") == name)
                               for name in ("improved", "regressed", "within_noise", "missing")}
        summary["pooled_noise_pct"] = pooled
        summary["samples"] = {"before": max((r["before_n"] for r in records), default=0),
                              "after": max((r["after_n"] for r in records), default=0)}
        summary["promoted"] = 0
    by_group, per_group = _groups(records, group_columns, size_column)
    return Comparison(
        key_columns=key_columns,
        metric=metric,
        higher_is_better=higher_is_better,
        noise_pct=float(noise_pct),
        size_column=size_column,
        group_columns=group_columns,
        rows=rows,
        summary=summary,
        by_group=by_group,
        per_group=per_group,
        judged=judge,
    )


def compare_for_variant(before, after, variant, *, noise_pct: float = DEFAULT_NOISE_PCT) -> Comparison:
    """``compare`` with everything taken from ``variant.bench`` (docs/internals.md signature)."""
    return compare(before, after, variant, noise_pct=noise_pct)


def _resolve_spec(variant, key_columns, metric, higher_is_better) -> tuple[tuple[str, ...], str, bool]:
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


@dataclass
class _Side:
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


def _aggregate(results: Iterable[Mapping[str, Any]], key_columns: tuple[str, ...]) -> dict[tuple, _Side]:
    out: dict[tuple, _Side] = {}
    for r in results or ():
        key = r.get("key") or {}
        lk = {str(c).lower(): v for c, v in key.items()}
        k = tuple(norm_key_value(lk.get(c)) for c in key_columns)
        side = out.setdefault(k, _Side([], 0))
        side.seen += 1
        v = _norm_value(r.get("value"))
        if v is not None:
            side.values.append(v)
    return out


def _note(b: _Side | None, a: _Side | None) -> str:
    parts = []
    if b is None:
        parts.append("not in before run")
    elif b.mean is None:
        parts.append("no before value")
    elif not b.mean > 0:
        parts.append("before value not positive")
    if a is None:
        parts.append("not in after run")
    elif a.mean is None:
        parts.append("no after value")
    elif not a.mean > 0:
        parts.append("after value not positive")
    for name, s in (("before", b), ("after", a)):
        if s is not None and s.n > 1:
            txt = f"{name}: mean of {s.n}"
            if s.spread_pct is not None:
                txt += f" (spread {s.spread_pct:.2f}%)"
            parts.append(txt)
    return "; ".join(parts)


def _group_of(k: tuple, key_columns: tuple[str, ...], group_columns: tuple[str, ...]) -> tuple:
    return tuple(k[key_columns.index(c)] for c in group_columns)


def _key_dtype_series(values: list[Any]) -> pd.Series:
    non_null = [v for v in values if v is not None]
    if non_null and all(isinstance(v, int) and not isinstance(v, bool) for v in non_null):
        return pd.Series(values, dtype="Int64")
    return pd.Series(values, dtype=object)


def _rows_frame(records: list[dict[str, Any]], key_columns: tuple[str, ...]) -> pd.DataFrame:
    cols = [*key_columns, *VALUE_COLUMNS, *_ROW_EXTRA]
    data: dict[str, pd.Series] = {}
    for c in cols:
        vals = [_nan_to_none(r.get(c)) for r in records]
        if c in key_columns:
            data[c] = _key_dtype_series(vals)
        elif c in ("before", "after", "speedup_pct", "ratio", "before_spread_pct", "after_spread_pct",
                   "noise_pct", "threshold_pct", "p_value", "before_err", "after_err"):
            data[c] = pd.Series([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        elif c in ("before_n", "after_n"):
            data[c] = pd.Series([int(v or 0) for v in vals], dtype="int64")
        else:
            data[c] = pd.Series(["" if v is None else str(v) for v in vals], dtype=object)
    return pd.DataFrame(data, columns=cols)


def _group_frame(records: list[dict[str, Any]], group_columns: tuple[str, ...]) -> pd.DataFrame:
    cols = [*group_columns, "size_class", "range", *_GROUP_STATS]
    data: dict[str, pd.Series] = {}
    for c in cols:
        vals = [_nan_to_none(r.get(c)) for r in records]
        if c in group_columns:
            data[c] = _key_dtype_series(vals)
        elif c in ("size_class", "range"):
            data[c] = pd.Series(["" if v is None else str(v) for v in vals], dtype=object)
        elif c.endswith("_pct"):
            data[c] = pd.Series([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        else:
            data[c] = pd.Series([int(v or 0) for v in vals], dtype="int64")
    return pd.DataFrame(data, columns=cols)


def _stats(recs: list[dict[str, Any]]) -> dict[str, Any]:
    sps = [r["speedup_pct"] for r in recs if r["speedup_pct"] is not None]
    ratios = [r["ratio"] for r in recs if r["ratio"] is not None]
    counts = {s: sum(1 for r in recs if r["status"] == s) for s in STATUSES}
    gm = math.exp(math.fsum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    return {
        "shapes": len(recs),
        "compared": len(sps),
        **counts,
        "mean_speedup_pct": round(math.fsum(sps) / len(sps), 2) if sps else None,
        "min_speedup_pct": min(sps) if sps else None,
        "max_speedup_pct": max(sps) if sps else None,
        "geomean_speedup_pct": None if gm is None else round((gm - 1.0) * 100.0, 2),
        "_geomean_ratio": gm,
    }


def _summary(records, key_columns, metric, higher_is_better, noise_pct) -> dict[str, Any]:
    st = _stats(records)
    compared = [r for r in records if r["speedup_pct"] is not None]
    sps = sorted(r["speedup_pct"] for r in compared)
    median = None
    if sps:
        mid = len(sps) // 2
        median = sps[mid] if len(sps) % 2 else round((sps[mid - 1] + sps[mid]) / 2, 2)

    def pick(rec):
        if rec is None:
            return None
        return {"key": {c: rec[c] for c in key_columns}, "speedup_pct": rec["speedup_pct"]}

    best = max(compared, key=lambda r: r["speedup_pct"], default=None)
    worst = min(compared, key=lambda r: r["speedup_pct"], default=None)
    gm = st["_geomean_ratio"]
    return {
        "metric": metric,
        "direction": "higher is better" if higher_is_better else "lower is better",
        "higher_is_better": higher_is_better,
        "noise_pct": float(noise_pct),
        "shapes": st["shapes"],
        "compared": st["compared"],
        "improved": st["improved"],
        "regressed": st["regressed"],
        "unchanged": st["unchanged"],
        "missing": st["missing"],
        "only_before": sum(1 for r in records if r["_in_before"] and not r["_in_after"]),
        "only_after": sum(1 for r in records if r["_in_after"] and not r["_in_before"]),
        "repeated": sum(1 for r in records if r["before_n"] > 1 or r["after_n"] > 1),
        "avg_speedup_pct": st["mean_speedup_pct"],
        "median_speedup_pct": median,
        "min_speedup_pct": st["min_speedup_pct"],
        "max_speedup_pct": st["max_speedup_pct"],
        "geomean_ratio": _round_or_none(gm, 6),
        "geomean_speedup_pct": st["geomean_speedup_pct"],
        "best": pick(best),
        "worst": pick(worst),
    }


def _groups(records, group_columns, size_column) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = [name for name, _, _ in SIZE_CLASSES] + [SIZE_CLASS_NA]
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:  # records are already in group order
        grouped.setdefault(tuple(r[c] for c in group_columns), []).append(r)
    by_rows, per_rows = [], []
    for g, recs in grouped.items():
        base = dict(zip(group_columns, g))
        for cls in order:
            sub = [r for r in recs if r["size_class"] == cls]
            if not sub:
                continue
            st = _stats(sub)
            st.pop("_geomean_ratio")
            by_rows.append({**base, "size_class": cls, "range": size_class_range(cls), **st})
        st = _stats(recs)
        st.pop("_geomean_ratio")
        per_rows.append({**base, "size_class": "all", "range": "", **st})
    return _group_frame(by_rows, group_columns), _group_frame(per_rows, group_columns)
