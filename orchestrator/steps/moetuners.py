"""Two fused-MoE tuner paths, chosen per point (issue 30, aiter#5625): the standard FmoeTuner times the kernel
with the quantization done outside it, ``--mxfp4-flydsl`` times FlyDSL kernels with the quant inline, so their
``us`` cannot be compared. ``run --moe-tuners both`` tunes an FP4 MoE job with each into its own staging table
(both always with explicit ``-i``/``-o``: the flydsl path's defaults rewrite the Kimi model table), benchmarks
both tables end to end (the op_test, every sample), and keeps per shape the row whose benchmark is faster.

Pure helpers here; prepare builds the commands, compare picks and merges (``pick``, ``merged_table``).
"""
from __future__ import annotations

import csv
import io
import statistics

from ..aiter_profiles import help_flags
from ..errors import UsageError
from ..outcome.keys import norm_key_value
from ..moe_quant import dtype_family
from ..variants import VARIANTS

MODES = ("standard", "flydsl", "both")
FLAG = "--mxfp4-flydsl"
ARM = "flydsl"           # the sample marker of the flydsl table's after benchmark
VARIANT = next(v.name for v in VARIANTS.values() if v.family == "moe")   # the fused-MoE tuner's variant


def mode_of(request) -> str:
    return (request.get("moe_tuners") if request is not None else None) or "standard"


def check_request(mode: str, variants) -> None:
    """run's own check (before anything remote): the flydsl path is the fused-MoE tuner's."""
    if mode == "standard":
        return
    other = [v for v in variants if v != VARIANT]
    if other:
        raise UsageError(f"--moe-tuners {mode} applies to {VARIANT}, not {', '.join(other)}",
                         hint=f"tune the MoE shapes in their own job with --variant {VARIANT}, or drop --moe-tuners")


def check_help(mode: str, help_text: str | None, script: str) -> None:
    """Refuse the flydsl path where the node's fused-MoE tuner has no ``--mxfp4-flydsl``."""
    if mode == "standard":
        return
    if not help_text:
        raise UsageError(f"cannot check {FLAG}: {script} --help did not answer on the node",
                         hint="run with --moe-tuners standard, or fix the tuner's import errors")
    if FLAG not in help_flags(help_text):
        raise UsageError(f"the fused-MoE tuner on this node ({script}) has no {FLAG}",
                         hint="run with --moe-tuners standard, or on an AITER whose tuner has the FlyDSL MXFP4 path")


def is_fp4(shape: dict) -> bool:
    """An MXFP4 MoE shape (per_1x32 scales, FP4 weights): what ``--mxfp4-flydsl`` tunes."""
    return (str(shape.get("q_type", "")).endswith("per_1x32")
            and dtype_family(str(shape.get("q_dtype_w", ""))) == "fp4x2")


def check_shapes(mode: str, shapes: list[dict]) -> None:
    if mode == "standard":
        return
    bad = [s for s in shapes if not is_fp4(s)]
    if bad:
        s = bad[0]
        raise UsageError(f"--moe-tuners {mode} tunes FP4 MoE shapes only; {len(bad)} shape(s) are not "
                         f"(e.g. token={s.get('token')} {s.get('q_type')} {s.get('q_dtype_a')}/{s.get('q_dtype_w')})",
                         hint="tune them in a job with --moe-tuners standard, or choose FP4 shapes only")


def flydsl_staging(staging: str) -> str:
    """The flydsl path's staging table: the same file name in its own directory (fetched as flydsl_<name>)."""
    head, _, name = staging.rpartition("/")
    return f"{head}/flydsl/{name}"


def local_name(staging: str) -> str:
    return "flydsl_" + staging.rpartition("/")[2]


def _medians(results: list[dict], key_columns) -> dict:
    vals: dict = {}
    for r in results:
        if r.get("value") is None:
            continue
        k = tuple(norm_key_value(r["key"].get(c)) for c in key_columns)
        vals.setdefault(k, []).append(float(r["value"]))
    return {k: statistics.median(v) for k, v in vals.items()}


def pick(standard: list[dict], flydsl: list[dict], key_columns, higher_is_better: bool) -> tuple[list[dict], list[dict]]:
    """Per shape, the path whose end-to-end benchmark (median over the samples) is better. Returns the
    after results of the chosen paths and one choice per key:
    ``{"key": {...}, "tuner": "standard"|"flydsl", "standard": median, "flydsl": median}``."""
    med = {"standard": _medians(standard, key_columns), "flydsl": _medians(flydsl, key_columns)}
    keys = list(dict.fromkeys([*med["standard"], *med["flydsl"]]))
    choices, chosen = [], {}
    for k in keys:
        s, f = med["standard"].get(k), med["flydsl"].get(k)
        if s is None or f is None:
            tuner = "flydsl" if s is None else "standard"
        else:
            tuner = "flydsl" if (f > s if higher_is_better else f < s) else "standard"
        chosen[k] = tuner
        choices.append({"key": dict(zip(key_columns, k)), "tuner": tuner, "standard": s, "flydsl": f})
    after = [r for path, results in (("standard", standard), ("flydsl", flydsl)) for r in results
             if chosen.get(tuple(norm_key_value(r["key"].get(c)) for c in key_columns)) == path]
    return after, choices


def merged_table(standard_text: str, flydsl_text: str, choices: list[dict], key_columns,
                 cu_num=None) -> tuple[str, int]:
    """The standard staging table with the flydsl table's row for every shape whose choice is flydsl (the
    columns of the standard table; a key it lacks is appended); ``cu_num``: only the node's rows are keys.
    Returns the text and the rows taken."""
    cols = next(csv.reader(io.StringIO(standard_text)), [])
    std = list(csv.DictReader(io.StringIO(standard_text)))
    fly = list(csv.DictReader(io.StringIO(flydsl_text)))
    cu = norm_key_value(cu_num) if cu_num is not None else None
    want = {(cu, *(norm_key_value(c["key"][k]) for k in key_columns)) for c in choices if c["tuner"] == "flydsl"}

    def key(row):
        return (norm_key_value(row.get("cu_num")) if cu is not None else None,
                *(norm_key_value(row.get(k)) for k in key_columns))

    fly_rows = {key(r): r for r in fly if key(r) in want}
    out, taken = [], set()
    for r in std:
        k = key(r)
        if k in fly_rows and k not in taken:
            r = fly_rows[k]
            taken.add(k)
        out.append(r)
    out += [r for k, r in fly_rows.items() if k not in taken]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(out)
    return buf.getvalue(), len(fly_rows)
