"""The report's tables built from the context: shapes, logs, per-group statistics, per-shape rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..outcome.compare import Comparison, norm_key_value
from .fmt import (DASH, Table, column_decimals, fmt_int, fmt_key, fmt_pct, fmt_scalar, fmt_value, is_missing,
                  is_num)


def as_comparison(c: Any) -> Comparison | None:
    if c is None:
        return None
    if isinstance(c, Comparison):
        return c
    if isinstance(c, Mapping):
        return Comparison.from_dict(c)
    if isinstance(c, (str, Path)):
        return Comparison.from_csv(c)
    raise TypeError(f"comparison must be a Comparison, its to_dict() or None, not {type(c).__name__}")


def shape_list(shapes: Any) -> tuple[str, list[dict[str, Any]]]:
    if shapes is None:
        return "", []
    if isinstance(shapes, Mapping):
        items = shapes.get("list")
        if items is None:
            items = shapes.get("shapes", shapes.get("items"))
        return str(shapes.get("source") or ""), [dict(s) for s in (items or [])]
    return "", [dict(s) for s in shapes]


def shape_table(shapes: Sequence[Mapping[str, Any]]) -> Table:
    cols: list[str] = []
    for s in shapes:
        for k in s:
            if not str(k).startswith("_") and k not in cols:
                cols.append(k)
    numeric = [all(is_num(norm_key_value(s.get(c))) for s in shapes if s.get(c) is not None) for c in cols]
    t = Table(["#", *cols], [True, *numeric])
    for i, s in enumerate(shapes, 1):
        t.add([str(i), *(fmt_key(s.get(c)) for c in cols)])
    return t


def logs_table(logs: Any) -> Table:
    t = Table(["log", "on node", "local"], [False, False, False])
    if not logs:
        return t
    items: list[tuple[str, Any]]
    if isinstance(logs, Mapping):
        items = list(logs.items())
    else:
        items = [(str(e.get("name", "")), e) for e in logs]
    for name, v in items:
        if isinstance(v, Mapping):
            t.add([name, fmt_scalar(v.get("node")), fmt_scalar(v.get("local"))])
        else:
            t.add([name, fmt_scalar(v), DASH])
    return t


def _matches(key: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """A shape dict matches a comparison row when they agree on every column they share (>= 1)."""
    k = {str(c).lower(): x for c, x in key.items()}
    shared = [c for c in k if c in row]
    if not shared:
        return False
    return all(norm_key_value(k[c]) == norm_key_value(row[c]) for c in shared)


def common_columns(cmp: Comparison) -> dict[str, Any]:
    """Key columns with one value across all rows, factored out of wide (MoE-like) keys only."""
    rows = cmp.rows
    if len(cmp.key_columns) <= 6 or len(rows) < 2:
        return {}
    out = {}
    for c in cmp.key_columns:
        if c == cmp.size_column:
            continue
        vals = {norm_key_value(x) for x in rows[c]}
        if len(vals) == 1 and None not in vals:
            out[c] = vals.pop()
    return out


def group_table(cmp: Comparison, common: Mapping[str, Any]) -> Table:
    gcols = [c for c in cmp.group_columns if c not in common]
    size_name = cmp.size_column or "size"
    t = Table(
        [*gcols, "class", f"{size_name} range", "shapes", "compared", "improved", "regressed",
         "unchanged", "missing", "mean %", "geomean %", "min %", "max %"],
        [True] * len(gcols) + [False, False] + [True] * 10,
    )
    per_group = cmp.per_group
    by_group = cmp.by_group

    def gkey(r) -> tuple:
        return tuple(norm_key_value(r[c]) for c in gcols)

    totals = {gkey(r): r for _, r in per_group.iterrows()} if len(per_group) else {}
    emitted: set[tuple] = set()
    recs = list(by_group.iterrows())
    for i, (_, r) in enumerate(recs):
        g = gkey(r)
        t.add([*(fmt_key(r[c]) for c in gcols), r["size_class"], r["range"] or DASH, *_stat_cells(r)],
              row_class="cls")
        last_of_group = i + 1 == len(recs) or gkey(recs[i + 1][1]) != g
        if last_of_group and g in totals and g not in emitted:
            tr = totals[g]
            t.add([*(fmt_key(tr[c]) for c in gcols), "all", DASH, *_stat_cells(tr)], row_class="total")
            emitted.add(g)
    return t


def _stat_cells(r) -> list[str]:
    return [fmt_int(r["shapes"]), fmt_int(r["compared"]), fmt_int(r["improved"]), fmt_int(r["regressed"]),
            fmt_int(r["unchanged"]), fmt_int(r["missing"]), fmt_pct(r["mean_speedup_pct"]),
            fmt_pct(r["geomean_speedup_pct"]), fmt_pct(r["min_speedup_pct"]), fmt_pct(r["max_speedup_pct"])]


def rows_table(cmp: Comparison, no_kernel: list[dict], shape_notes: list[dict],
                common: Mapping[str, Any], method_notes: bool = True) -> Table:
    """``method_notes=False`` (report.md): the per-row "before: median of 3 (spread ..)" notes are left out
    (the method is stated once above the table; spreads are in comparison.csv)."""
    rows = cmp.rows
    kcols = [c for c in cmp.key_columns if c not in common]
    key_numeric = [all(is_num(norm_key_value(x)) for x in rows[c] if not is_missing(x)) for c in kcols]
    repeated = bool(len(rows)) and bool(((rows["before_n"] > 1) | (rows["after_n"] > 1)).any())
    headers = [*kcols, f"before ({cmp.metric})", f"after ({cmp.metric})", "speedup %",
               "verdict" if cmp.judged else "status"]
    numeric = [*key_numeric, True, True, True, False]
    if repeated:
        headers.append("runs b/a")
        numeric.append(True)
    # issue 37: how sure (Hodges-Lehmann interval, comparison.csv gain_lo_pct..gain_hi_pct); report.html only:
    # report.md must fit a pull-request comment (issue 27) and links comparison.csv, which has the columns
    interval = (method_notes and cmp.judged and "gain_lo_pct" in rows.columns
                and bool(rows["gain_lo_pct"].notna().any()))
    if interval:
        headers.append("gain interval %")
        numeric.append(False)
    headers.append("note")
    numeric.append(False)
    t = Table(headers, numeric)
    dec = column_decimals([*rows["before"], *rows["after"]])
    for _, r in rows.iterrows():
        key = {c: r[c] for c in cmp.key_columns}
        notes = []
        if any(_matches(s, key) for s in no_kernel):
            notes.append("no kernel found by the tuner")
        for sn in shape_notes:
            if _matches(dict(sn.get("key") or {}), key) and sn.get("note"):
                notes.append(str(sn["note"]))
        if r["note"]:
            notes += [n for n in str(r["note"]).split("; ")
                      if method_notes or not n.startswith(("before: ", "after: "))]
        status = str(r["status"])
        label = str(r["verdict"]) + (" (promoted)" if r["promoted"] == "true" else "") if cmp.judged else status
        cells = [*(fmt_key(r[c]) for c in kcols), fmt_value(r["before"], dec), fmt_value(r["after"], dec),
                 fmt_pct(r["speedup_pct"]), label]
        ccls = [""] * len(kcols) + ["", "", status, status]
        if repeated:
            cells.append(f"{int(r['before_n'])}/{int(r['after_n'])}")
            ccls.append("")
        if interval:
            cells.append("" if is_missing(r["gain_lo_pct"]) else
                         f"{fmt_pct(r['gain_lo_pct'])} .. {fmt_pct(r['gain_hi_pct'])} ({r['gain_conf_pct']:g} %)")
            ccls.append("")
        cells.append("; ".join(notes))
        ccls.append("note")
        t.add(cells, row_class=status, cell_classes=ccls)
    return t
