"""Tuned/untuned AITER CSV tools (aiter-formats.md §1.4, §1.5, §2, §5.1). Parse by header, never by position.

``read_tuned_csv(path_or_text)``
    Reads any AITER config CSV (tuned, untuned, profile, model_configs; every version in §2.2) like AITER's
    ``_read_csv``: header names and string cells stripped of whitespace (shipped files contain
    ``1, 16384, 16384`` and trailing tabs), ``Unnamed:`` columns dropped, all-empty rows dropped. ``Null``/
    ``None``/``nan``/empty cells become NaN. Columns whose every value is numeric become numbers (ints when
    integral); ``err1``/``err2`` (``"0.3%"``) and ``bias``-style booleans stay strings.

``key_columns(df)``
    GEMM: the present ones of ``gfx, cu_num, B, M, N, K, q_dtype_w`` (+ bf16's ``bias, dtype, outdtype,
    scaleAB, bpreshuffle``; the MXFP8 BMM table's lower-case ``gfx,b,m,n,k,w_scale_block``, no cu_num),
    as the table spells them (``shapelib/tablekey.table_key``). MoE (a ``token`` column): ``gfx, cu_num`` (when present) + the 12 untuned fmoe
    columns (14/13/12 columns) + ``_tag`` when present (AITER's merge key includes it).

``merge_tuned(frames, err_bound=None, moe_err_bound=0.5)``
    Union of the frames (missing ``gfx`` inferred from ``cu_num`` like AITER: 256 -> gfx950, 80/304 -> gfx942,
    else empty) keeping per key the best VALID row: ``us`` (``total_us`` in v0.1.5 fmoe) > 0 and finite,
    ``errRatio``/``err_ratio`` <= ``err_bound`` (default 0.05 for GEMM, AITER's tuner default) and, for MoE,
    ``err1``/``err2`` (percent strings) <= ``moe_err_bound`` (default 0.5 = the FmoeTuner default of
    v0.1.9-v0.1.16; shipped rows reach 15.7 %, the HEAD cosine bound 0.1 would drop them). A NaN error passes.
    Rows with us = -1/inf/0 are never kept (unlike the seed's dedup.py, whose idxmin kept us=-1 rows).
    Lowest us wins; on a tie the later frame/row wins (AITER keeps the newest). Output is one row per
    key, in the order the kept rows appeared. The report (also in ``df.attrs["merge_report"]``) counts
    ``input_rows, kept, invalid_us, err_too_high, duplicates`` and lists ``keys_without_valid_row``.
    Files without a ``us`` column (tuned_fhmoe) keep the last row per key.

``diff_tuned(a, b)``
    Per key (common key columns; ``gfx`` inferred when only one side has it; each side deduplicated keeping
    its last row, as AITER's sortResults does): ``kernelName_a/_b`` (MoE: ``kernelName1 + kernelName2``),
    ``us_a/_b``, ``speedup_pct = (us_a / us_b - 1) * 100`` (positive = b faster; NaN unless both us > 0),
    rows in a's order then b-only keys; ``status``: ``only_a`` / ``only_b`` / ``changed`` (kernel name, or kernelId/splitK/libtype/block_m/ksplit/
    run_1stage when present, differ) / ``same``.

The untuned side (``write_untuned_csv``, ``read_shapes_csv``) lives in ``parsing/untuned.py`` (no pandas:
the early steps use it) and is re-exported here.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..shapelib.tablekey import table_key
from ..shapelib.text import key_text
from ..variants import MOE_KEY
from .csvcolumns import NULLS as _NULLS, Unusual, parse_columns
from .untuned import refuse_conflict_markers

__all__ = [
    "read_tuned_csv", "key_columns", "merge_tuned", "merge_tuned_report", "diff_tuned", "key_statuses",
    "LEGACY_CU_NUM_TO_GFX",
]

LEGACY_CU_NUM_TO_GFX = {256: "gfx950", 80: "gfx942", 304: "gfx942"}
GEMM_ERR_BOUND = 0.05
MOE_ERR_BOUND = 0.5


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


def _read_text(path_or_text: str | os.PathLike) -> tuple[str, str]:
    """(text, label)."""
    if isinstance(path_or_text, os.PathLike):
        p = Path(path_or_text)
        return p.read_text(encoding="utf-8", errors="replace"), str(p)
    s = str(path_or_text)
    if "\n" not in s and len(s) < 4096 and os.path.isfile(s):
        return Path(s).read_text(encoding="utf-8", errors="replace"), s
    if "\n" not in s and "," not in s:
        raise FileNotFoundError(s)
    return s, "<text>"


def _to_number(series: pd.Series) -> pd.Series:
    """Numeric version of an all-numeric column (ints when integral), else the column unchanged."""
    nonnull = series.dropna()
    if nonnull.empty:
        return series
    num = pd.to_numeric(nonnull, errors="coerce")
    if num.isna().any():
        return series
    out = pd.to_numeric(series, errors="coerce")
    finite = out.dropna()
    finite = finite[finite.map(lambda x: math.isfinite(x))]
    if not out.isna().any() and (finite == finite.round()).all() and len(finite) == len(out):
        return out.astype("int64")
    return out.astype("float64")


def read_tuned_csv(path_or_text: str | os.PathLike) -> pd.DataFrame:
    """A tuned table by its header. A table holding git-conflict markers is refused (UsageError), as AITER's
    op_tests/tuning_tests/test_csv_validation (newest releases) fails it: pandas would read the marker
    lines as rows and AITER would load them."""
    text, label = _read_text(path_or_text)
    refuse_conflict_markers(text, label)
    if not text.strip():
        return pd.DataFrame()
    try:
        names, cols = parse_columns(text)           # the stdlib, as below (csvcolumns.py), ~6x faster
    except Unusual:
        df = _read_with_pandas(text)
    else:
        df = pd.DataFrame({n: _series(cols[n]) for n in names}, columns=names)
    df.attrs["source"] = label
    return df


def _series(values: list) -> pd.Series:
    if values and all(type(v) is int for v in values):
        return pd.Series(values, dtype="int64")
    if any(isinstance(v, float) for v in values):
        return pd.Series([float("nan") if v is None else v for v in values], dtype="float64")
    return pd.Series(values)


def _read_with_pandas(text: str) -> pd.DataFrame:
    """What csvcolumns leaves to pandas: a row wider than the header, ``inf``, ``1_000``, huge integers."""
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    df.columns = [str(c).strip() for c in df.columns]
    df = df.loc[:, [c for c in df.columns if not c.startswith("Unnamed:")]]
    out = {}
    for c in df.columns:
        s = df[c].astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
        s = s.map(lambda v: None if (v is None or (isinstance(v, str) and v in _NULLS)) else v)
        out[c] = s
    df = pd.DataFrame(out, columns=list(df.columns))
    df = df.dropna(how="all").reset_index(drop=True)
    for c in df.columns:
        df[c] = _to_number(df[c])
    return df


def key_columns(df: pd.DataFrame) -> list[str]:
    cols = list(df.columns)
    if "token" in cols:
        keys = [c for c in ("gfx", "cu_num") if c in cols] + [c for c in MOE_KEY if c in cols]
        if "_tag" in cols:
            keys.append("_tag")
        return keys
    return table_key(cols)        # as the table spells them, gfx/cu_num only where it has them


def _is_moe(df: pd.DataFrame) -> bool:
    return "token" in df.columns


def _key_series(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    """One hashable, type-normalised tuple per row (16 == 16.0 == '16' == '16.0'; NaN == ''): ``key_text``."""
    if not keys:
        return pd.Series([()] * len(df), index=df.index, dtype=object)
    parts = [df[k].astype(object).map(key_text) for k in keys]
    return pd.Series(list(zip(*parts)), index=df.index, dtype=object)


def _add_gfx(df: pd.DataFrame) -> pd.DataFrame:
    if "gfx" in df.columns or "cu_num" not in df.columns:
        return df
    df = df.copy()
    gfx = df["cu_num"].map(lambda c: LEGACY_CU_NUM_TO_GFX.get(int(c), "") if pd.notna(c) else "")
    df.insert(0, "gfx", gfx)
    return df


def _as_frame(x: Any) -> pd.DataFrame:
    return x if isinstance(x, pd.DataFrame) else read_tuned_csv(x)


# --------------------------------------------------------------------------------------------
# merge
# --------------------------------------------------------------------------------------------


def read_pct(v: Any) -> float:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return float("nan")
    s = str(v).strip()
    try:
        if s.endswith("%"):
            return float(s[:-1]) / 100.0
        return float(s)
    except ValueError:
        return float("nan")


def _us_column(df: pd.DataFrame) -> str | None:
    for c in ("us", "total_us"):
        if c in df.columns:
            return c
    return None


def merge_tuned_report(frames: Iterable[Any], err_bound: float | None = None,
                       moe_err_bound: float = MOE_ERR_BOUND) -> tuple[pd.DataFrame, dict]:
    frames = [_as_frame(f) for f in frames]
    frames = [f for f in frames if len(f.columns)]
    if not frames:
        return pd.DataFrame(), {"input_rows": 0, "kept": 0, "invalid_us": 0, "err_too_high": 0,
                                "duplicates": 0, "keys_without_valid_row": []}
    if any("gfx" in f.columns for f in frames):
        frames = [_add_gfx(f) for f in frames]
    columns: list[str] = []
    for f in frames:
        columns += [c for c in f.columns if c not in columns]
    df = pd.concat([f.reindex(columns=columns) for f in frames], ignore_index=True)
    for c in df.columns:
        if df[c].dtype == object:
            df[c] = _to_number(df[c])
    keys = key_columns(df)
    moe = _is_moe(df)
    k = _key_series(df, keys)
    usc = _us_column(df)
    report = {"input_rows": int(len(df)), "kept": 0, "invalid_us": 0, "err_too_high": 0, "duplicates": 0,
              "keys_without_valid_row": []}
    if usc is None:
        keep_idx = k.groupby(k, sort=False).apply(lambda s: s.index[-1]).tolist()
        out = df.loc[sorted(keep_idx)].reset_index(drop=True)
        report["duplicates"] = int(len(df) - len(out))
        report["kept"] = int(len(out))
        out.attrs["merge_report"] = report
        return out, report

    us = pd.to_numeric(df[usc], errors="coerce")
    valid_us = us.notna() & (us > 0) & us.map(lambda x: math.isfinite(x) if pd.notna(x) else False)
    err_ok = pd.Series(True, index=df.index)
    if moe:
        for c in ("err1", "err2"):
            if c in df.columns:
                e = df[c].map(read_pct)
                err_ok &= e.isna() | (e <= moe_err_bound)
    else:
        bound = GEMM_ERR_BOUND if err_bound is None else err_bound
        for c in ("errRatio", "err_ratio"):
            if c in df.columns:
                e = pd.to_numeric(df[c], errors="coerce")
                err_ok &= e.isna() | (e <= bound)
    report["invalid_us"] = int((~valid_us).sum())
    report["err_too_high"] = int((valid_us & ~err_ok).sum())
    good = valid_us & err_ok
    cand = df[good]
    if len(cand):
        ck = k[good]
        rev = cand.iloc[::-1]
        best = pd.to_numeric(rev[usc]).groupby(ck.loc[rev.index], sort=False).idxmin()
        keep_idx = sorted(best.tolist())
    else:
        keep_idx = []
    out = df.loc[keep_idx].reset_index(drop=True)
    report["kept"] = int(len(out))
    report["duplicates"] = int(good.sum() - len(out))
    good_keys = set(k[good].tolist())
    lost = [kk for kk in dict.fromkeys(k.tolist()) if kk not in good_keys]
    report["keys_without_valid_row"] = [dict(zip(keys, kk)) for kk in lost]
    out.attrs["merge_report"] = report
    return out, report


def merge_tuned(frames: Iterable[Any], err_bound: float | None = None,
                moe_err_bound: float = MOE_ERR_BOUND) -> pd.DataFrame:
    return merge_tuned_report(frames, err_bound=err_bound, moe_err_bound=moe_err_bound)[0]


# --------------------------------------------------------------------------------------------
# diff
# --------------------------------------------------------------------------------------------

_CONFIG_COLS = ("kernelId", "splitK", "libtype", "block_m", "ksplit", "run_1stage", "solidx")


def _kernel_name(df: pd.DataFrame) -> pd.Series:
    if "kernelName" in df.columns:
        return df["kernelName"].astype(object)
    if "kernelName1" in df.columns:
        k2 = df["kernelName2"] if "kernelName2" in df.columns else pd.Series("", index=df.index)
        return (df["kernelName1"].astype(object).fillna("").astype(str) + " + "
                + k2.astype(object).fillna("").astype(str)).str.strip(" +")
    return pd.Series([None] * len(df), index=df.index, dtype=object)


def _aligned(a: Any, b: Any) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    a, b = _as_frame(a), _as_frame(b)
    if ("gfx" in a.columns) != ("gfx" in b.columns):
        a, b = _add_gfx(a), _add_gfx(b)
    ka, kb = key_columns(a), key_columns(b)
    return a, b, [c for c in ka if c in kb]


def _last_rows(df: pd.DataFrame, keys: list[str]) -> dict[tuple, tuple]:
    """{key: (key values, kernel name, {config column: value})}, one per key: its last row, in the order of
    those last rows (as ``drop_duplicates(keep="last")``)."""
    cfg = [c for c in _CONFIG_COLS if c in df.columns]
    vals = [df[c].astype(object).tolist() for c in keys]
    cvals = [df[c].astype(object).tolist() for c in cfg]
    out: dict[tuple, tuple] = {}
    for i, (k, kern) in enumerate(zip(_key_series(df, keys).tolist(), _kernel_name(df).tolist())):
        out.pop(k, None)
        out[k] = (tuple(v[i] for v in vals), kern, {c: cv[i] for c, cv in zip(cfg, cvals)})
    return out


def _changed(ra: tuple, rb: tuple) -> bool:
    """A key both tables hold: another kernel, or another kernelId/splitK/... (16 == 16.0; both empty: same)."""
    if str(ra[1]) != str(rb[1]):
        return True
    for c, va in ra[2].items():
        if c not in rb[2]:
            continue
        vb = rb[2][c]
        if pd.isna(va) and pd.isna(vb):
            continue
        if str(va) != str(vb):
            try:
                if float(va) == float(vb):
                    continue
            except (TypeError, ValueError):
                pass
            return True
    return False


def key_statuses(a: Any, b: Any) -> tuple[list[str], dict[tuple, tuple[str, tuple]]]:
    """``diff_tuned``'s status per key without its frame (a job's compare wants the counts): (the common key
    columns, {key: (status, key values)}) in diff_tuned's row order."""
    a, b, keys = _aligned(a, b)
    return keys, _statuses(a, b, keys)


def _statuses(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> dict[tuple, tuple[str, tuple]]:
    ra, rb = _last_rows(a, keys), _last_rows(b, keys)
    out = {k: ("only_a" if k not in rb else "changed" if _changed(r, rb[k]) else "same", r[0])
           for k, r in ra.items()}
    out.update((k, ("only_b", r[0])) for k, r in rb.items() if k not in ra)
    return out


def diff_tuned(a: Any, b: Any) -> pd.DataFrame:
    a, b, keys = _aligned(a, b)

    def side(df: pd.DataFrame, tag: str) -> pd.DataFrame:
        kser = _key_series(df, keys)
        d = pd.DataFrame({"_k": kser})
        for c in keys:
            d[c] = df[c]
        d[f"kernelName_{tag}"] = _kernel_name(df)
        usc = _us_column(df)
        d[f"us_{tag}"] = pd.to_numeric(df[usc], errors="coerce") if usc else float("nan")
        for c in _CONFIG_COLS:
            if c in df.columns:
                d[f"{c}_{tag}"] = df[c].astype(object)
        return d.drop_duplicates("_k", keep="last")

    sa, sb = side(a, "a"), side(b, "b")
    m = sa.merge(sb.drop(columns=keys), on="_k", how="outer", indicator=True, sort=False)
    # pandas sorts outer-merge keys; keep a's order, then keys only in b (in b's order)
    in_a = set(sa["_k"])
    rank = {kk: i for i, kk in enumerate(list(sa["_k"]) + [x for x in sb["_k"] if x not in in_a])}
    m = m.iloc[m["_k"].map(rank).argsort(kind="stable")].reset_index(drop=True)
    # key values from whichever side has them
    kb_vals = sb.set_index("_k")[keys] if keys else None
    for c in keys:
        missing = m[c].isna()
        if missing.any():
            m.loc[missing, c] = m.loc[missing, "_k"].map(kb_vals[c])
    us_a, us_b = m["us_a"], m["us_b"]
    ok = (us_a > 0) & (us_b > 0)
    m["speedup_pct"] = ((us_a / us_b - 1.0) * 100.0).where(ok)

    statuses = _statuses(a, b, keys)
    m["status"] = [statuses[k][0] for k in m["_k"]] if len(m) else pd.Series(dtype=object)
    cols = keys + ["kernelName_a", "kernelName_b", "us_a", "us_b", "speedup_pct", "status"]
    out = m[cols].reset_index(drop=True)
    for c in keys:
        out[c] = _to_number(out[c].astype(object))
    return out
