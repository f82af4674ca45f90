"""The view model: the report context turned into ready-to-print strings and tables (shared by both templates)."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..outcome.compare import Comparison
from .chart import svg_chart
from .fmt import (DASH, Table, fmt_command, fmt_duration, elapsed_s, fmt_int, fmt_key, fmt_pct, fmt_scalar,
                  fmt_time, is_missing, is_num, key_label, kv_table)
from .jit import jit_view
from .mchart import group_charts
from .outcome import changes_view, outcome_view, sequential_line, serving_view, verdict_method
from .tables import (as_comparison, common_columns, group_table, logs_table, rows_table, shape_list,
                     shape_table)

_JOB_FIELDS = (("id", "job id"), ("variant", "variant"), ("node", "node"), ("container", "container"),
               ("state", "state"), ("started", "started"), ("finished", "finished"))
_ENV_FIELDS = (("aiter_version", "AITER version"), ("pip_name", "pip name"),
               ("install_mode", "install mode"), ("aiter_root", "AITER root"), ("gfx", "gfx"),
               ("cu_num", "cu_num"), ("gpu_count", "GPUs"), ("free_gpus", "free GPUs"),
               ("profile", "version profile"), ("probed", "probed on node"),
               ("assumed", "assumed"))
_CSV_FIELDS = (("node_path", "tuned CSV on node"), ("backup_path", "backup of the previous CSV"),
               ("rows_added", "rows added"), ("local_path", "local copy"))


def build_view(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the context into ready-to-print strings and tables (shared by both templates)."""
    ctx = _normalise_context(ctx)
    job = dict(ctx.get("job") or {})
    env = dict(ctx.get("environment") or {})
    tuning = dict(ctx.get("tuning") or {})
    bench = dict(ctx.get("bench") or {})
    tuned_csv = dict(ctx.get("tuned_csv") or {})
    cmp = as_comparison(ctx.get("comparison"))
    shapes_source, shapes = shape_list(ctx.get("shapes"))
    if not shapes_source and ctx.get("shape_sources"):
        shapes_source = "; ".join(fmt_scalar(x) for x in ctx["shape_sources"])
    no_kernel = tuning.get("no_kernel")
    no_kernel = None if no_kernel is None else [dict(s) for s in no_kernel]
    shape_notes = [dict(s) for s in (ctx.get("shape_notes") or [])]

    v: dict[str, Any] = {}
    variant = job.get("variant") or ""
    where = "/".join(str(x) for x in (job.get("node"), job.get("container")) if x)
    v["title"] = ("tune-remote report" + (f": {variant}" if variant else "")
                  + (f" on {where}" if where else ""))
    v["generated_at"] = fmt_time(ctx.get("generated_at") or _dt.datetime.now(_dt.timezone.utc))
    v["tool_version"] = str(ctx.get("tool_version") or "")

    # job + environment
    jp = []
    for k, label in _JOB_FIELDS:
        val = job.get(k)
        jp.append((label, fmt_time(val) if k in ("started", "finished") and val else fmt_scalar(val)))
    jp.append(("wall time", fmt_duration(elapsed_s(job.get("started"), job.get("finished")))))
    v["job"] = kv_table(jp)
    v["environment"] = kv_table((label, fmt_scalar(env.get(k))) for k, label in _ENV_FIELDS)

    # comparison
    v["has_comparison"] = cmp is not None
    if cmp is not None:
        sm = cmp.summary
        v["metric"] = cmp.metric
        v["direction"] = cmp.direction
        formula = "after / before - 1" if cmp.higher_is_better else "before / after - 1"
        v["metric_line"] = (f"{cmp.metric}, {cmp.direction}. speedup % = ({formula}) x 100: "
                            f"positive = faster. Noise band ±{cmp.noise_pct:g}% (inside it = unchanged).")
        if cmp.judged:
            v["metric_line"] = (f"{cmp.metric}, {cmp.direction}. speedup % = ({formula}) x 100 of the medians: "
                                "positive = faster. " + verdict_method(cmp.summary)
                                + sequential_line(ctx.get("sequential")))
        v["values_are"] = ("medians of the runs per arm" if cmp.judged
                           else "means when a shape ran more than once")
        v["headline"] = (
            f"{sm.get('shapes', 0)} shapes: {sm.get('improved', 0)} improved, "
            f"{sm.get('regressed', 0)} regressed, {sm.get('unchanged', 0)} "
            f"{'within noise' if cmp.judged else 'unchanged'}, "
            + (f"{sm.get('promoted', 0)} promoted, " if cmp.judged else "") +
            f"{sm.get('missing', 0)} missing; geomean {fmt_pct(sm.get('geomean_speedup_pct'))}, "
            f"mean {fmt_pct(sm.get('avg_speedup_pct'))} "
            f"(min {fmt_pct(sm.get('min_speedup_pct'))}, max {fmt_pct(sm.get('max_speedup_pct'))})"
        )
        v["cards"] = [
            ("geomean speedup", fmt_pct(sm.get("geomean_speedup_pct")),
             _sign_class(sm.get("geomean_speedup_pct"), cmp.noise_pct)),
            ("improved", fmt_int(sm.get("improved")), "improved"),
            ("regressed", fmt_int(sm.get("regressed")), "regressed" if sm.get("regressed") else ""),
            ("unchanged", fmt_int(sm.get("unchanged")), ""),
            ("missing", fmt_int(sm.get("missing")), "missing" if sm.get("missing") else ""),
        ]
        best, worst = sm.get("best"), sm.get("worst")
        gm_ratio = DASH if sm.get("geomean_ratio") is None else format(sm["geomean_ratio"], ".4f")
        v["summary"] = kv_table([
            ("metric", f"{cmp.metric} ({cmp.direction})"),
            ("shapes in table", fmt_int(sm.get("shapes"))),
            ("compared (both sides)", fmt_int(sm.get("compared"))),
            *_count_rows(cmp, sm),
            ("missing (no speedup)", fmt_int(sm.get("missing"))),
            ("only in before / only in after",
             f"{fmt_int(sm.get('only_before'))} / {fmt_int(sm.get('only_after'))}"),
            ("shapes averaged over repeated runs", fmt_int(sm.get("repeated"))),
            ("mean speedup", fmt_pct(sm.get("avg_speedup_pct"))),
            ("median speedup", fmt_pct(sm.get("median_speedup_pct"))),
            ("min speedup", fmt_pct(sm.get("min_speedup_pct"))),
            ("max speedup", fmt_pct(sm.get("max_speedup_pct"))),
            ("geomean speedup (ratio)", f"{fmt_pct(sm.get('geomean_speedup_pct'))} ({gm_ratio})"),
            ("best shape", f"{key_label(best['key'])}: {fmt_pct(best['speedup_pct'])}" if best else DASH),
            ("worst shape",
             f"{key_label(worst['key'])}: {fmt_pct(worst['speedup_pct'])}" if worst else DASH),
        ])
        common = common_columns(cmp)
        v["common_key"] = ", ".join(f"{c}={fmt_key(x)}" for c, x in common.items())
        v["groups"] = group_table(cmp, common)
        v["group_title"] = (
            "Per " + (f"({', '.join(cmp.group_columns)})" if cmp.group_columns else "all shapes")
            + (f" by size class of {cmp.size_column}" if cmp.size_column else "")
        )
        v["rows"] = rows_table(cmp, no_kernel or [], shape_notes, common)
        v["rows_md"] = rows_table(cmp, no_kernel or [], shape_notes, common, method_notes=False)
        v["chart"] = svg_chart(cmp)
        v["mcharts"] = group_charts(cmp, common)
        v["mchart_title"] = (f"({', '.join(c for c in cmp.group_columns if c not in common)})"
                             if cmp.group_columns else "shape")
        v["band_label"] = ("the practical bar a verdict must clear (max(1 %, K x the measured noise x sqrt(1/nb + 1/na)))"
                           if cmp.judged else "noise band")
    else:
        v["metric_line"] = ""
        v["common_key"] = ""
        v["headline"] = "no comparison: the after benchmark did not run or produced no results"
        v["cards"] = []
        v["chart"] = None
        v["mcharts"] = []

    # shapes
    v["shapes_source"] = shapes_source
    v["shapes_count"] = len(shapes)
    v["shapes"] = shape_table(shapes)

    # tuning
    v["tune_command"] = fmt_command(tuning.get("command"))
    flags = dict(tuning.get("flags") or {})
    ft = Table(["flag", "value"], [False, False])
    for k, val in flags.items():
        ft.add([k, "(set)" if val is True else fmt_scalar(val)])
    v["tune_flags"] = ft
    et = Table(["variable", "value"], [False, False])
    for k, val in dict(tuning.get("env") or {}).items():
        et.add([k, fmt_scalar(val)])
    v["tune_env"] = et
    partial = tuning.get("partial")
    tp = [("exit status", fmt_scalar(tuning.get("rc")))]
    if tuning.get("started"):
        tp.append(("started", fmt_time(tuning["started"])))
    tp += [("duration", fmt_duration(tuning.get("duration_s"))),
           ("tuned rows written", fmt_scalar(tuning.get("rows_written")))]
    if tuning.get("keys_added_changed_removed"):
        tp.append(("keys added / changed / removed (table before vs after tuning)",
                   " / ".join(fmt_scalar(x) for x in tuning["keys_added_changed_removed"])))
    if tuning.get("rows_before") is not None or tuning.get("rows_after") is not None:
        tp.append(("tuned CSV rows before / after",
                   f"{fmt_scalar(tuning.get('rows_before'))} / {fmt_scalar(tuning.get('rows_after'))}"))
    tp += [("shapes without a kernel", DASH if no_kernel is None else str(len(no_kernel))),
           ("partial", fmt_scalar(partial))]
    v["tuning"] = kv_table(tp)
    v["has_tuning"] = bool(tuning)
    v["no_kernel_known"] = no_kernel is not None
    v["no_kernel"] = shape_table(no_kernel or [])
    v["kernels"] = shape_table(tuning["kernels"]) if tuning.get("kernels") else None
    v["moe_tuners"] = moe_tuners_table(ctx.get("moe_tuners"))
    v["bench_before"] = fmt_command(bench.get("before_command"))
    v["bench_after"] = fmt_command(bench.get("after_command"))
    bt = Table(["variable", "value"], [False, False])
    for k, val in dict(bench.get("env") or {}).items():
        bt.add([k, fmt_scalar(val)])
    v["bench_env"] = bt

    v["tuned_csv"] = kv_table((label, fmt_scalar(tuned_csv.get(k))) for k, label in _CSV_FIELDS)
    v["has_tuned_csv"] = bool(tuned_csv)
    v["logs"] = logs_table(ctx.get("logs"))

    # warnings: the caller's first, then what the numbers say
    warnings = [str(w) for w in (ctx.get("warnings") or [])]
    warnings += _derived_warnings(tuning, no_kernel, cmp)
    v["warnings"] = warnings
    v["notes"] = [str(n) for n in (ctx.get("notes") or [])]
    v.update(outcome_view(ctx, Table))
    v["outcome_changes"] = changes_view(ctx)
    v.update(jit_view(ctx, Table))
    v["simulated"] = bool(ctx.get("simulated"))
    if v["simulated"] and v["jit_headline"]:
        v["jit_headline"] = "Simulated (demo node): these seconds are the simulation's, not a real build's. " + v["jit_headline"]
    v["environment_md"] = kv_table((label, fmt_scalar(env.get(k))) for k, label in _ENV_FIELDS if k != "aiter_root")
    v["aiter_root"] = str(env.get("aiter_root") or "")
    v["job_id"] = str(job.get("id") or "JOB")
    v["engaged_md"] = _not_engaged(v.get("engaged"))
    v.update(serving_view(ctx, Table))
    return v


def _not_engaged(t: Table | None) -> Table | None:
    """report.md lists only the shapes not engaged (the headline counts the rest; report.html lists all)."""
    if t is None or "engaged" not in t.headers:
        return t
    i, out = t.headers.index("engaged"), Table(t.headers, t.numeric)
    for row in t.rows:
        if row[i] != "yes":
            out.add(row)
    return out


def _normalise_context(ctx: Mapping[str, Any] | None) -> dict[str, Any]:
    """Accept the spellings callers already use besides the documented ones (documented ones win)."""
    ctx = dict(ctx or {})
    env = dict(ctx.get("environment") or {})
    if env.get("aiter_version") is None and env.get("version") is not None:
        env["aiter_version"] = env["version"]
    ctx["environment"] = env
    csvd = dict(ctx.get("tuned_csv") or {})
    for new, old in (("node_path", "node"), ("backup_path", "backup"), ("local_path", "local")):
        if csvd.get(new) is None and csvd.get(old) is not None:
            csvd[new] = csvd[old]
    ctx["tuned_csv"] = {k: v for k, v in csvd.items() if k not in ("node", "backup", "local")}
    tuning = dict(ctx.get("tuning") or {})
    if (tuning.get("rows_written") is None and is_num(tuning.get("rows_after"))
            and is_num(tuning.get("rows_before"))):
        tuning["rows_written"] = tuning["rows_after"] - tuning["rows_before"]
    if not tuning.get("flags") and isinstance(tuning.get("command"), (list, tuple, str)):
        tuning["flags"] = _flags_from_command(tuning["command"])
    ctx["tuning"] = tuning
    logs = ctx.get("logs")
    if isinstance(logs, Mapping) and set(logs) <= {"node", "local"} and isinstance(logs.get("node"), Mapping):
        local = logs.get("local")
        ctx["logs"] = {
            name: {"node": path,
                   "local": (f"{str(local).rstrip('/')}/{str(path).rsplit('/', 1)[-1]}"
                             if isinstance(local, (str, Path)) and path else None)}
            for name, path in logs["node"].items()
        }
    return ctx


def _flags_from_command(cmd: Any) -> dict[str, Any]:
    """``--mp 8 --libtype both -v`` -> {"--mp": "8", "--libtype": "both", "-v": True} (script args only)."""
    import shlex

    argv = [str(a) for a in cmd] if isinstance(cmd, (list, tuple)) else shlex.split(str(cmd))
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", a):
            if "=" in a and a.startswith("--"):
                k, _, val = a.partition("=")
                out[k] = val
            elif i + 1 < len(argv) and not (argv[i + 1].startswith("-")
                                            and not re.fullmatch(r"-\d+(\.\d+)?", argv[i + 1])):
                out[a] = argv[i + 1]
                i += 1
            else:
                out[a] = True
        i += 1
    return out


def _sign_class(x: Any, band: float) -> str:
    if is_missing(x):
        return "missing"
    return "improved" if x > band else "regressed" if x < -band else ""


def _derived_warnings(tuning: Mapping[str, Any], no_kernel: list | None, cmp: Comparison | None) -> list[str]:
    out = []
    if tuning.get("partial"):
        out.append("tuning was partial: some shapes were left untuned (see 'Shapes with no kernel')")
    rc = tuning.get("rc")
    if rc not in (None, 0):
        out.append(f"the tuner exited with status {rc}")
    if no_kernel:
        out.append(f"{len(no_kernel)} shape(s) found no kernel during tuning: AITER serves them as any shape "
                   "without a row of its own (the row of its padded M where the table has one, else its default), "
                   "so their 'after' can still change")
    if cmp is not None:
        sm = cmp.summary
        if sm.get("only_before"):
            out.append(f"{sm['only_before']} shape(s) benchmarked before but missing after tuning")
        if sm.get("only_after"):
            out.append(f"{sm['only_after']} shape(s) benchmarked after but missing before tuning")
        nov = sm.get("missing", 0) - sm.get("only_before", 0) - sm.get("only_after", 0)
        if nov > 0:
            out.append(f"{nov} shape(s) have no usable value on one side (empty, zero or failed benchmark)")
        if sm.get("regressed") and cmp.judged:
            rows = cmp.rows
            kept = int(((rows["verdict"] == "regressed") & (rows["promoted"] == "true")).sum()) \
                if {"verdict", "promoted"} <= set(rows.columns) else 0
            out.append(f"{sm['regressed']} shape(s) are proven slower with their tuned rows: " + (
                f"{kept} of them promoted anyway (promote --rows all; `tune-remote rollback` undoes it)" if kept
                else "never promoted with --promote proven"))
        elif sm.get("regressed"):
            out.append(f"{sm['regressed']} shape(s) regressed beyond -{cmp.noise_pct:g}%: "
                       "review them before keeping their tuned rows")
        rows = cmp.rows
        if len(rows) and not cmp.judged:
            spread = rows[["before_spread_pct", "after_spread_pct"]].max(axis=1, skipna=True)
            noisy = int((spread > cmp.noise_pct).sum())
            if noisy:
                out.append(f"{noisy} shape(s) vary between repeated runs by more than the "
                           f"±{cmp.noise_pct:g}% "
                           "noise band: their status is not reliable")
    return out


def _count_rows(cmp: Comparison, sm: Mapping[str, Any]) -> list[tuple[str, str]]:
    if cmp.judged:   # counts of the verdicts (see the metric line for the bar and the test)
        return [("improved (verdict)", fmt_int(sm.get("improved"))),
                ("regressed (verdict)", fmt_int(sm.get("regressed"))),
                ("within noise (verdict)", fmt_int(sm.get("unchanged"))),
                ("promoted", fmt_int(sm.get("promoted")))]
    return [(f"improved (> +{cmp.noise_pct:g}%)", fmt_int(sm.get("improved"))),
            (f"regressed (< -{cmp.noise_pct:g}%)", fmt_int(sm.get("regressed"))),
            (f"unchanged (within ±{cmp.noise_pct:g}%)", fmt_int(sm.get("unchanged")))]


def moe_tuners_table(choices) -> Table | None:
    """run --moe-tuners both: the path each shape kept and both end-to-end medians (only the key columns that
    differ between shapes, so it fits a PR comment)."""
    if not choices:
        return None
    keys = list(choices[0]["key"])
    vary = [k for k in keys if len({str(c["key"].get(k)) for c in choices}) > 1] or keys[:1]
    return shape_table([{**{k: c["key"].get(k) for k in vary}, "kept": c["tuner"],
                         "standard e2e": c.get("standard"), "flydsl e2e": c.get("flydsl")} for c in choices])
