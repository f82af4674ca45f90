"""Untuned CSVs (what we hand to the tuners) and user shape CSVs (aiter-formats.md §1.5). No pandas at import:
``prepare`` and the CLI's input checks use it before a job's later steps load pandas.

``write_untuned_csv(shapes, variant) -> str``
    AITER's untuned format: header = ``KernelVariant.untuned_columns`` (a name or a resolved KernelVariant);
    MoE values rendered like the shipped ``untuned_fmoe.csv``
    (``...,ActivationType.Silu,torch.bfloat16,...,QuantType.per_1x128,1,0``); a16w16 booleans ``True/False``.
    Duplicate rows are written once. A shape lacking a column raises ValueError naming it.

``read_shapes_csv(path, variant)``
    A user CSV in AITER's untuned format (header case-insensitive; extra columns such as ``gfx``/``cu_num``
    ignored) -> shape dicts (lower-case keys, typed like shapelog's). Missing columns raise ValueError naming
    them and the expected header.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterable

from ..variants import KernelVariant, get_variant
from .csvcolumns import Unusual, parse_columns

_INT_DIMS = {"b", "m", "n", "k", "token", "model_dim", "inter_dim", "expert", "topk"}
_BOOL01 = {"use_g1u1", "doweight_stage1"}
_PYBOOL = {"bias", "scaleab", "bpreshuffle"}
_DTYPE_COLS = {"q_dtype_w", "q_dtype_a", "dtype", "outdtype"}


def _columns_for(variant: str | KernelVariant) -> tuple[str, tuple[str, ...]]:
    if isinstance(variant, KernelVariant):
        return variant.name, variant.untuned_columns
    v = get_variant(variant)
    return v.name, v.untuned_columns


def _enum(value: Any, prefix: str) -> str:
    s = str(value).strip().strip("'\"")
    m = re.match(r"^<\s*([\w.]+)\s*:", s)
    if m:
        s = m.group(1)
    return s if "." in s else f"{prefix}.{s}"


def _dtype(value: Any) -> str:
    s = str(value).strip().strip("'\"")
    return s if ("." in s or s in ("", "None")) else f"torch.{s}"


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        s = value.strip().lower()
        if s in ("true", "1", "1.0", "yes"):
            return True
        if s in ("false", "0", "0.0", "no", ""):
            return False
        raise ValueError(f"not a boolean: {value!r}")
    return bool(value)


def _typed(col: str, value: Any) -> Any:
    """Normalise one value of a shape's lower-case column."""
    if col in _INT_DIMS:
        return int(float(value))
    if col in _BOOL01:
        return 1 if _to_bool(value) else 0
    if col in _PYBOOL:
        return _to_bool(value)
    if col == "act_type":
        return _enum(value, "ActivationType")
    if col == "q_type":
        return _enum(value, "QuantType")
    if col in _DTYPE_COLS:
        return _dtype(value)
    return value


def _render(col: str, value: Any) -> str:
    v = _typed(col, value)
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def write_untuned_csv(shapes: Iterable[dict], variant: str | KernelVariant) -> str:
    name, columns = _columns_for(variant)
    lines = [",".join(columns)]
    seen = set()
    for i, shape in enumerate(shapes):
        lower = {str(k).lower(): v for k, v in shape.items() if k != "_meta"}
        missing = [c for c in columns if c.lower() not in lower]
        if missing:
            raise ValueError(
                f"shape #{i + 1} {shape!r} lacks column(s) {', '.join(missing)} needed by the {name} "
                f"untuned CSV (header {','.join(columns)})")
        row = ",".join(_render(c.lower(), lower[c.lower()]) for c in columns)
        if row not in seen:
            seen.add(row)
            lines.append(row)
    return "\n".join(lines) + "\n"


CONFLICT = re.compile(r"^(<{7}|={7}|>{7})(?:\s|$)", re.M)


def refuse_conflict_markers(text: str, label) -> None:
    """A table holding git-conflict markers is refused (UsageError), as AITER's
    op_tests/tuning_tests/test_csv_validation (newest releases) fails it: a CSV reader would take the marker
    lines as rows and AITER would load them."""
    bad = CONFLICT.search(text)
    if bad:
        from ..errors import UsageError
        line = text.count("\n", 0, bad.start()) + 1
        raise UsageError(f"{label} has a git-conflict marker at line {line} ({bad.group(1)})",
                         hint="resolve the merge conflict in the table first (AITER's tuning_tests "
                              "test_csv_validation rejects it too)")


def read_table_rows(path: Path) -> tuple[list[str], list[dict]]:
    """A small CSV read as ``csvtools.read_tuned_csv`` reads it, with the stdlib (the CLI checks a user's
    --shapes-csv before it connects): ``csvcolumns.parse_columns``, one dict per row; a git-conflict marker
    refused (UsageError), a table pandas would read otherwise (a row wider than its header, ``inf``) ValueError."""
    text = path.read_text(encoding="utf-8", errors="replace")
    refuse_conflict_markers(text, path)
    try:
        names, cols = parse_columns(text)
    except Unusual as exc:
        raise ValueError(f"{path}: {exc}") from None
    return names, [dict(zip(names, row)) for row in zip(*(cols[n] for n in names))]


def read_shapes_csv(path: str | os.PathLike, variant: str | KernelVariant) -> list[dict]:
    name, columns = _columns_for(variant)
    header, records = read_table_rows(Path(path))
    by_lower: dict[str, str] = {}
    for c in header:
        by_lower.setdefault(c.lower(), c)
    missing = [c for c in columns if c.lower() not in by_lower]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {', '.join(missing)} for variant {name} "
            f"(expected header: {','.join(columns)}; found: {','.join(header) or 'nothing'})")
    out, seen = [], set()
    for rownum, rec in enumerate(records, start=2):
        shape = {}
        for c in columns:
            v = rec[by_lower[c.lower()]]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                raise ValueError(f"{path}: line {rownum}: empty {c}")
            try:
                shape[c.lower()] = _typed(c.lower(), v)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}: line {rownum}: bad {c} value {v!r} ({e})") from None
        key = tuple(shape.items())
        if key not in seen:
            seen.add(key)
            out.append(shape)
    return out
