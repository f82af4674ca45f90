"""Audit tuned tables (issue 30): the defects AITER loads without a word.

* ``copied_us``: one ``us`` repeated across token/M buckets of one shape (aiter#5641: five token buckets
  all 359.4797): the tuner wrote one measurement for several buckets, or a table was filled by hand.
* ``unparsable_kernel``: a FlyDSL bpreshuffle name the runtime's regex does not parse
  (``aiter/ops/gemm_op_a8w8.py``, after-v0.1.20 §2.2): AITER logs the hit, then runs CK silently (aiter#5069);
  an a16w16 FlyDSL name its catalog does not parse: a warning, then another kernel (aiter#2817); a fused-MoE /
  FHMoE ``kernelName1``/``kernelName2`` of the FlyDSL family (``flydsl_moe1_``/``flydsl_moe2_``) its registry does
  not parse (``aiter/ops/flydsl/moe_kernels.py``): the MoE runtime raises ``Invalid FlyDSL kernel name``. Every
  ``kernelName*`` column of every table is read.
* ``duplicate_key``: a key held twice in the tables AITER merges for one variant (the main table and its
  ``model_configs`` siblings): the merge resolves them, writes the fix and raises (aiter#5184). On a node whose
  merge resolves duplicates in the merged copy (probed, issue 36) only a duplicate without a numeric us is one;
  the others are ``shadowed_rows`` (which row wins), not findings.
* ``foreign_cu_num``: a row for a cu_num the node does not have (never looked up there).
* ``err_ratio``: errRatio over the upstream bound: the CLI passes upstream's level-0 guard's
  (``op_tests/tuning_tests/test_csv_validation.py`` flags only ``errRatio > 0.2``; the node's own guard where it
  ships one), so shipped rows tuned with a looser ``--errRatio`` (0.182, gfx942 int8 asm) are not findings; called
  without one, the tuner's ``--errRatio`` default 0.05. MoE err1/err2 (which the guard does not read): over 0.5, the
  loosest bound an upstream FmoeTuner accepted (aiter-formats.md §1.2).

Pure: frames in, findings out; the CLI reads the files, locally or from the node.
"""
from __future__ import annotations

import re
from typing import Iterable

import pandas as pd

from ..shapelib.text import key_text
from ..variants import VARIANTS
from ..shapelib.tablekey import has_cu_num, no_cu_num_note
from .csvtools import GEMM_ERR_BOUND, LEGACY_CU_NUM_TO_GFX, MOE_ERR_BOUND, read_pct, key_columns

KINDS = ("copied_us", "unparsable_kernel", "duplicate_key", "foreign_cu_num", "err_ratio")
COPIED_MIN = 3                 # buckets sharing one us before it counts as copied (two can be chance)
# aiter/ops/gemm_op_a8w8.py at HEAD (note the upstream spelling `bpreshuflle`)
FLYDSL_BPRESHUFFLE = re.compile(r"flydsl_bpreshuflle_(\d+)x(\d+)x(\d+)_\w+_\w+_\w+_(\d+)x(\d+)(?:x(\d+))?(?:x(\d+))?"
                                r"(?:_([A-Za-z][A-Za-z0-9]*))?$")
# aiter/ops/flydsl/gemm_kernels.py: the FlyDSL hgemm name grammar tuned_gemm parses for an a16w16 `flydsl` row
# (stages, dtypes, tile, split-K, warps, flags, optional small-M suffix, target gfx)
FLYDSL_HGEMM = re.compile(
    r"flydsl_gemm\d+_a([a-z0-9]+)_w\1_[a-z0-9]+_t\d+x\d+x\d+_split_k\d+_block_m_warp\d+_block_n_warp\d+_"
    r"block_k_warp\d+_async_copy(True|False)_b_to_lds(True|False)_b_preshuffle(True|False)_c_to_lds(True|False)"
    r"(_small_m(_nr\d+)?(_pn\d+)?(_wpe\d+)?(_ur\d+)?)?_gfx[0-9a-z]+$")
# aiter/ops/flydsl/moe_kernels.py: flydsl_kernel_name() ``flydsl_moe{stage}_a{a}_w{b}_{out}_t{M}x{N}x{K}`` then
# flag tokens (_w4 _kb2 _bnt0 _go _gui _xcd4 _kw2 _fp8 _sbm32, stage 2: _atomic/_reduce _persist ...), and the v2
# layout GEMM2 ``flydsl_moe2_layout_...``; get_flydsl_kernel_params() returns None for anything else
FLYDSL_MOE = re.compile(r"flydsl_moe[12]_(?:layout_)?a[a-z0-9]+_w[a-z0-9]+_[a-z0-9]+_t\d+x\d+x\d+(?:_[a-z]+\d*)*$")
MOE_FAMILY = re.compile(r"flydsl_moe[12]_")
KERNEL_COLUMN = re.compile(r"kernelName\d*$")
_EXTRA_BASES = ("tuned_fhmoe", "tuned_fmoe")
UPSTREAM_GUARD_ERR_BOUND = 0.2      # op_tests/tuning_tests/test_csv_validation.py: rows with errRatio > 0.2
GUARD_FILE = "op_tests/tuning_tests/test_csv_validation.py"
_GUARD_BOUND = re.compile(r"err_col\s*>\s*(\d+(?:\.\d+)?|\.\d+)")


def guard_err_bound(text) -> float | None:
    """The errRatio bound of a level-0 guard's source (upstream: ``high = df[err_col > 0.2]``), or None: no such check."""
    m = _GUARD_BOUND.search(str(text or ""))
    return float(m.group(1)) if m else None


def unparsable_kernel(name, hgemm_row: bool = False, gfx: str | None = None) -> str | None:
    """Why AITER's runtime cannot use a row's FlyDSL kernel name, or None. ``hgemm_row``: an a16w16 row of
    libtype flydsl (whatever its name); ``gfx``: the row's (gemm_op_a8w8 sends every gfx1250 bpreshuffle row to
    its WMMA runner, and a ``flydsl_bpreshuffle_8w_`` name to the 8-wave runner, before the MFMA name parser)."""
    name = "" if name is None else str(name)
    if name.startswith("flydsl_") and "bpreshu" in name and (gfx == "gfx1250"
                                                             or name.startswith("flydsl_bpreshuffle_8w_")):
        return None
    if name.startswith("flydsl_") and "bpreshu" in name:
        if not FLYDSL_BPRESHUFFLE.match(name):
            return "the runtime's FlyDSL name parser rejects it and runs CK silently (aiter#5069)"
        return None
    if (hgemm_row or name.startswith("flydsl_gemm")) and not FLYDSL_HGEMM.match(name):
        return ("tuned_gemm's FlyDSL catalog rejects it: AITER logs a warning and falls back to the next "
                "candidate or the default kernel (aiter#2817)")
    return None


def unparsable_moe_kernel(name) -> str | None:
    """Why AITER's fused-MoE / FHMoE runtime cannot use a row's FlyDSL stage kernel name, or None."""
    name = "" if name is None else str(name)
    if MOE_FAMILY.match(name) and not FLYDSL_MOE.match(name):
        return ("the MoE runtime's FlyDSL registry does not parse it: AITER raises 'Invalid FlyDSL kernel name' "
                "(aiter/ops/flydsl/moe_kernels.py)")
    return None


def merge_group(name: str) -> str:
    """The tuned table AITER merges a file into: the longest known table name its file name contains
    (``model_configs/dsv3_a4w4_blockscale_tuned_gemm.csv`` -> ``a4w4_blockscale_tuned_gemm``), else its own."""
    base = name.rsplit("/", 1)[-1].removesuffix(".csv")
    known = {v.tuned_csv.rsplit("/", 1)[-1].removesuffix(".csv") for v in VARIANTS.values()} | set(_EXTRA_BASES)
    hits = [k for k in known if k in base]
    return max(hits, key=len) if hits else base


def _key(row: pd.Series, keys: list[str]) -> dict:
    return {k: key_text(row[k]) for k in keys}


def _finding(kind: str, label: str, row: pd.Series, keys: list[str], detail: str) -> dict:
    return {"kind": kind, "file": label, "key": _key(row, keys), "detail": detail}


def row_objective_key(row, keys: list[str]) -> frozenset:
    """A row's key as ``objectives`` holds it: {(column, key text)} of every key column but gfx and _tag."""
    return frozenset((k, key_text(row[k])) for k in keys if k not in ("gfx", "_tag"))


def _copied_us(label: str, df: pd.DataFrame, keys: list[str], objectives: dict | None = None,
               skipped: list | None = None) -> list[dict]:
    """``objectives``: {row_objective_key: the fused-MoE objective it was tuned under} (issue 36): rows of one
    shape tuned under two objectives never count as one measurement copied (their us mean different things);
    ``skipped`` gets one line per table where that happened."""
    bucket = "token" if "token" in df.columns else "M" if "M" in df.columns else None
    if bucket is None or "us" not in df.columns:
        return []
    rest = [k for k in keys if k != bucket and k != "_tag"]
    us = pd.to_numeric(df["us"], errors="coerce")
    ok = us.notna() & (us > 0)
    out = []
    frame = df[ok].assign(_us=us[ok])
    groups = frame.groupby([frame[k].astype(object).map(key_text) for k in rest] + ["_us"], sort=False) \
        if rest else frame.groupby("_us", sort=False)
    apart = 0
    for _, g in groups:
        buckets = list(dict.fromkeys(key_text(b) for b in g[bucket]))
        if len(buckets) < COPIED_MIN:
            continue
        if objectives and bucket == "token":
            seen = {objectives.get(row_objective_key(row, keys)) for _, row in g.iterrows()} - {None}
            if len(seen) > 1:
                apart += len(g)
                continue
        for _, row in g.iterrows():
            out.append(_finding("copied_us", label, row, keys,
                                f"us {row['_us']:g} in {len(buckets)} {bucket} buckets "
                                f"({', '.join(buckets)}) of one shape: one measurement copied"))
    if apart and skipped is not None:
        from ..moe_quant import OBJECTIVE_SKIP
        skipped.append(f"copied_us: {apart} row(s) of {label} share a us across token buckets tuned under "
                       f"different objectives: {OBJECTIVE_SKIP}")
    return out


def _unparsable(label: str, df: pd.DataFrame, keys: list[str]) -> list[dict]:
    out = []
    a16w16 = "solidx" in df.columns and "libtype" in df.columns
    cols = [c for c in df.columns if KERNEL_COLUMN.match(str(c))]
    for _, row in df.iterrows():
        for c in cols:
            name = "" if pd.isna(row[c]) else str(row[c] or "")
            if c == "kernelName":
                why = unparsable_kernel(name, a16w16 and str(row["libtype"]).strip() == "flydsl",
                                        key_text(row["gfx"]) if "gfx" in df.columns else None)
                text = f"{name}: "
            else:
                why, text = unparsable_moe_kernel(name), f"{c} {name}: "
            if why:
                out.append(_finding("unparsable_kernel", label, row, keys, f"{text}{why}; retune the row"))
    return out


def _err_ratio(label: str, df: pd.DataFrame, keys: list[str], err_bound: float | None = None,
               bound_from: str = "the upstream bound") -> list[dict]:
    out = []
    if "token" in df.columns:
        cols, bound, read = [c for c in ("err1", "err2") if c in df.columns], MOE_ERR_BOUND, read_pct
        bound_from = "the upstream bound"
    else:
        cols = [c for c in ("errRatio", "err_ratio") if c in df.columns]
        bound = GEMM_ERR_BOUND if err_bound is None else err_bound
        read = (lambda v: pd.to_numeric(v, errors="coerce"))
    for c in cols:
        for _, row in df.iterrows():
            e = read(row[c])
            if pd.notna(e) and e > bound:
                out.append(_finding("err_ratio", label, row, keys,
                                    f"{c} {e:g} over {bound_from} {bound:g}: a kernel with wrong results"))
    return out


def _foreign(label: str, df: pd.DataFrame, keys: list[str], cu_nums: set[int], gfx: str | None) -> list[dict]:
    """Rows of the node's gfx (or, with no gfx given, of any) for a cu_num its GPUs do not have: tuned on
    another SKU or partition mode (MI308X has 80 CUs, MI300X 304, a CPX partition 38). Rows of another gfx
    are the wheel's rows for other GPUs, not a defect."""
    if not cu_nums or "cu_num" not in df.columns:
        return []
    have = ", ".join(str(c) for c in sorted(cu_nums))
    out = []
    for _, row in df.iterrows():
        c = key_text(row["cu_num"])
        if not (c and c.isdigit()) or int(c) in cu_nums:
            continue
        row_gfx = key_text(row["gfx"]) if "gfx" in df.columns else LEGACY_CU_NUM_TO_GFX.get(int(c), "")
        if gfx and row_gfx and row_gfx != gfx:
            continue
        out.append(_finding("foreign_cu_num", label, row, keys,
                            f"cu_num {c}: the node's GPUs have {have}; AITER never looks this row up there"))
    return out


def _merge_sets(tables, merged_as):
    groups: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for label, df in tables:
        groups.setdefault((merged_as or {}).get(label) or merge_group(label), []).append((label, df))
    return groups.values()


def _duplicates(tables: list[tuple[str, pd.DataFrame]], merged_as: dict | None = None,
                merge_rule: str = "raise") -> list[dict]:
    """Duplicate keys across (and within) the tables of one merge. Where the node's merge raises on them (the
    default), each later row is a finding; where it resolves them (``merge_rule`` "resolve", probed), only a key
    whose rows lack a numeric us is (that merge raises on it): the rest is said by ``shadowed_rows``."""
    if merge_rule == "resolve":
        return [f for _, rows in _held_twice(tables, merged_as) if _winner(rows) is None
                for label, row, keys, _ in rows[1:]
                for f in [_finding("duplicate_key", label, row, keys,
                                   "key also in " + rows[0][0] + ": a duplicate whose us is missing or not a number "
                                   "makes AITER's merge raise")]]
    out = []
    for members in _merge_sets(tables, merged_as):
        seen: dict[tuple, str] = {}
        for label, df in members:
            keys = [k for k in key_columns(df) if k != "_tag"]
            for _, row in df.iterrows():
                kt = tuple((k, key_text(row[k])) for k in keys if k != "gfx")
                if kt in seen:
                    where = "earlier in this file" if seen[kt] == label else f"also in {seen[kt]}"
                    out.append(_finding("duplicate_key", label, row, keys,
                                        f"key {where}: AITER's merge resolves it, rewrites the table and raises "
                                        "(aiter#5184)"))
                else:
                    seen[kt] = label
    return out


def _held_twice(tables, merged_as):
    """(key, [(label, row, keys, us)] in merge order) of every key one merge holds more than once."""
    for members in _merge_sets(tables, merged_as):
        held: dict[tuple, list] = {}
        for label, df in members:
            keys = [k for k in key_columns(df) if k != "_tag"]
            for _, row in df.iterrows():
                kt = tuple((k, key_text(row[k])) for k in keys if k != "gfx")
                us = pd.to_numeric(row["us"], errors="coerce") if "us" in df.columns else float("nan")
                held.setdefault(kt, []).append((label, row, keys, us))
        yield from ((kt, rows) for kt, rows in held.items() if len(rows) > 1)


def _winner(rows):
    """The index of the row a resolving merge keeps (lowest us, the first on ties), None if a us is not a number."""
    if any(pd.isna(r[3]) for r in rows):
        return None
    return min(range(len(rows)), key=lambda i: (rows[i][3], i))


def shadowed_rows(tables: Iterable[tuple[str, pd.DataFrame]], merged_as: dict | None = None) -> list[str]:
    """Where the node's merge resolves duplicate keys (issue 36: the merged copy keeps the lowest-us row, the
    first source on ties, the tables untouched), a key held twice is no fault: one line per row it makes
    ineffective, naming the row that wins."""
    out = []
    for _, rows in _held_twice([(lb, df) for lb, df in tables if len(df.columns)], merged_as):
        w = _winner(rows)
        if w is None:
            continue
        label, row, keys, us = rows[w]
        key = " ".join(f"{k}={v}" for k, v in _key(row, keys).items())
        for i, (lb, _, _, u) in enumerate(rows):
            if i != w:
                out.append(f"shadowed: {lb}: {key} (us {u:g}) is ineffective: AITER's merge keeps the row of "
                           f"{label} (us {us:g}, {'the first of equal us' if u == us else 'lowest us'})")
    return out


def audit_tables(tables: Iterable[tuple[str, pd.DataFrame]], cu_nums: Iterable[int] = (),
                 gfx: str | None = None, merged_as: dict | None = None, err_bound: float | None = None,
                 bound_from: str = "the upstream bound", merge_rule: str = "raise", objectives: dict | None = None,
                 skipped: list | None = None) -> list[dict]:
    """Findings ``{"kind", "file", "key", "detail"}`` over ``(label, table)`` pairs; ``cu_nums`` and ``gfx``:
    the node's (no cu_nums: no foreign_cu_num check; no gfx: rows of every gfx are checked); ``merged_as``:
    label -> the set AITER merges it with, where the file name does not say it (an ``AITER_CONFIG_*`` list);
    ``err_bound``: a GEMM row's errRatio bound (None: the tuner's default 0.05), ``bound_from`` says whose;
    ``merge_rule``: the node's probed duplicate-key rule ("resolve": duplicates are ``shadowed_rows``, not findings);
    ``objectives``: label -> {row key: the MoE objective it was tuned under} (copied_us never compares across one),
    ``skipped`` gets the line said where it did not."""
    tables = [(label, df) for label, df in tables if len(df.columns)]
    cus = {int(c) for c in cu_nums}
    out: list[dict] = []
    for label, df in tables:
        keys = key_columns(df)
        out += _copied_us(label, df, keys, (objectives or {}).get(label), skipped)
        out += _unparsable(label, df, keys)
        out += _err_ratio(label, df, keys, err_bound, bound_from)
        out += _foreign(label, df, keys, cus, gfx)
        if cus and skipped is not None and not has_cu_num(df.columns):
            skipped.append(no_cu_num_note(label))
    out += _duplicates(tables, merged_as, merge_rule)
    return out
