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

Split: ``compare_values`` (constants, normalisation, samples, frames), ``compare_stats`` (summary and
group statistics); this module keeps the ``Comparison`` object and ``compare()`` and re-exports the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .compare_stats import expected_gain_pct, group_of, group_stats, row_note, summarize
from .compare_values import (
    DEFAULT_NOISE_PCT,
    GAIN_INTERVAL_COLUMNS,
    JUDGED_CSV_COLUMNS,
    SIZE_CLASS_NA,
    SIZE_CLASSES,
    SIZE_COLUMNS,
    STATUSES,
    VERDICT_STATUS,
    aggregate,
    comparison_csv_columns,
    group_frame,
    guess_higher_is_better,
    is_blank,
    nan_to_none,
    norm_key_value,
    norm_value,
    resolve_spec,
    rows_frame,
    size_class,
    sort_token,
    speed_ratio,
    speedup_pct,
)
from .intervals import job_k

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
    "JUDGED_CSV_COLUMNS",
    "norm_key_value",
]


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
    judged: bool = False  # repeated samples judged by orchestrator.outcome.verdict: verdict/promoted columns

    def set_errors(self, before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]) -> None:
        """The benchmarks' error column (median per side, results like compare's) and whether it got worse."""
        sides = {"before": aggregate(before, self.key_columns), "after": aggregate(after, self.key_columns)}
        keys = [tuple(norm_key_value(nan_to_none(r[c])) for c in self.key_columns) for _, r in self.rows.iterrows()]
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
            "true" if tuple(norm_key_value(nan_to_none(r[c])) for c in self.key_columns) in wanted else "false"
            for _, r in self.rows.iterrows()]
        self.summary["promoted"] = sum(1 for v in self.rows["promoted"] if v == "true")

    def set_time_share(self, shares: dict[tuple, float]) -> None:
        """The share of the profiled GPU time of each row's shape (``run --profile``, issue 38; keys normalised
        like the rows' key columns): a new last column of comparison.csv, and the summary's expected end-to-end
        gain (Amdahl: the sum over the rows proven faster of share x the fraction of the shape's time saved)."""
        wanted = {tuple(norm_key_value(v) for v in k): float(x) for k, x in shares.items()}
        keys = [tuple(norm_key_value(nan_to_none(r[c])) for c in self.key_columns) for _, r in self.rows.iterrows()]
        self.rows["time_share"] = [round(wanted.get(k, 0.0), 6) for k in keys]
        self.summary["profiled_time_share"] = round(float(sum(self.rows["time_share"])), 6)
        self.summary["expected_e2e_gain_pct"] = expected_gain_pct(self.rows, self.judged, self.higher_is_better)

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def csv_columns(self) -> list[str]:
        return (comparison_csv_columns(self.key_columns) + (list(JUDGED_CSV_COLUMNS) if self.judged else [])
                + (["time_share"] if "time_share" in self.rows.columns else []))   # issue 38, with --profile

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
            return [{k: nan_to_none(v) for k, v in rec.items()} for rec in df.to_dict("records")]

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
        records = list(d.get("rows") or [])
        rows = rows_frame(records, key_columns)
        if records and all("time_share" in rec for rec in records):    # run --profile (issue 38)
            rows["time_share"] = [rec["time_share"] for rec in records]
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
            by_group=group_frame(list(d.get("by_group") or []), group_columns),
            per_group=group_frame(list(d.get("per_group") or []), group_columns),
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
            metric = next((str(r["metric"]) for r in records if not is_blank(r.get("metric"))), "")
        if higher_is_better is None:
            higher_is_better = guess_higher_is_better(metric)
        before = [{"key": {c: r.get(c) for c in key_columns}, "value": r.get("before")}
                  for r in records if norm_value(r.get("before")) is not None]
        after = [{"key": {c: r.get(c) for c in key_columns}, "value": r.get("after")}
                 for r in records if norm_value(r.get("after")) is not None]
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


# --------------------------------------------------------------------------------------------
# compare()
# --------------------------------------------------------------------------------------------


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
    looks: int = 1,
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
    key_columns, metric, higher_is_better = resolve_spec(variant, key_columns, metric, higher_is_better)
    if noise_pct < 0:
        raise ValueError("noise_pct must be >= 0")

    b_side = aggregate(before, key_columns)
    a_side = aggregate(after, key_columns)

    size_column = next((c for c in SIZE_COLUMNS if c in key_columns), None)
    group_columns = tuple(c for c in key_columns if c != size_column) if size_column else ()

    # order: groups in first-seen order (before run first), then the size column ascending
    keys: list[tuple] = list(b_side)
    keys += [k for k in a_side if k not in b_side]
    group_index: dict[tuple, int] = {}
    for k in keys:
        group_index.setdefault(group_of(k, key_columns, group_columns), len(group_index))
    size_pos = key_columns.index(size_column) if size_column else None
    keys.sort(key=lambda k: (group_index[group_of(k, key_columns, group_columns)],
                             sort_token(k[size_pos]) if size_pos is not None else (0,)))

    verdicts: dict[tuple, dict[str, Any]] = {}
    pooled = None
    if judge:  # every value of a key is one repeated sample: medians + noise-aware verdicts
        from .verdict import judge_all
        verdicts, pooled = judge_all(
            {k: (b_side[k].values if k in b_side else [], a_side[k].values if k in a_side else [])
             for k in keys}, higher_is_better, looks=looks)
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
                       threshold_pct=v["threshold_pct"], p_value=v["p_value"],
                       **{c: v.get(c) for c in GAIN_INTERVAL_COLUMNS})
        ratio = speed_ratio(bv, av, higher_is_better)
        sp = None if ratio is None else round((ratio - 1.0) * 100.0, 2)
        if judge:
            status = VERDICT_STATUS[verdicts[k]["verdict"]] if sp is not None else "missing"
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
            note=row_note(b, a, judge),
            _in_before=b is not None,
            _in_after=a is not None,
        )
        records.append(rec)

    rows = rows_frame(records, key_columns)
    summary = summarize(records, key_columns, metric, higher_is_better, noise_pct)
    if judge:
        summary["verdicts"] = {name: sum(1 for r in records if r.get("verdict") == name)
                               for name in ("improved", "regressed", "within_noise", "missing")}
        summary["pooled_noise_pct"] = pooled
        summary["samples"] = {"before": max((r["before_n"] for r in records), default=0),
                              "after": max((r["after_n"] for r in records), default=0)}
        summary["promoted"] = 0
        # issue 37: the job's expected false verdicts (a shape with no change clearing its bar, summed)
        summary["expected_false_verdicts"] = round(math.fsum(v.get("false_rate") or 0.0 for v in verdicts.values()), 3)
        summary["verdict_k"] = job_k(sum(1 for v in verdicts.values() if v["before_n"] and v["after_n"]), looks)
    by_group, per_group = group_stats(records, group_columns, size_column)
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
