"""The compare step: pull the bench logs and tuned CSV, note what the tuner wrote, compare before with after
(the pure core is orchestrator/outcome/compare.py) into comparison.csv / comparison.json."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path

from ..context import Ctx
from ..outcome.compare import compare, norm_key_value
from ..parsing.csvtools import key_statuses, read_tuned_csv
from ..state import atomic_write
from . import moetuners, more_runs
from .bench import measured_by_call, plan_bench
from .fhmoe_input import tuner_search
from .fetch import pull, wanted_files
from .prepare import SAMPLE_MARK


def tuned_outcome(ctx: Ctx) -> dict:
    """Which requested shapes have a row for this GPU in the tuned CSV now (and which found no kernel).

    Also notes rows tuned for another GPU (gfx/cu_num): AITER never matches them here (e.g. rows tuned
    on an MI308X, cu_num 80, are ignored on an MI300X, cu_num 304; aiter-formats.md §7).
    """
    job, variant = ctx.job, ctx.variant
    local = ctx.job_dir / Path(job.remote.tuned_csv).name
    if not local.is_file():
        return {"tuned": [], "no_kernel": list(job.shapes), "rows_before": 0, "rows_after": 0}
    full = read_tuned_csv(str(local))
    cols = {c.lower(): c for c in full.columns}
    mine = full.index == full.index
    if "gfx" in cols and job.facts.gfx:
        mine &= full[cols["gfx"]].astype(str) == str(job.facts.gfx)
    if "cu_num" in cols and job.facts.cu_num:
        mine &= full[cols["cu_num"]].astype(str).map(norm_key_value) == norm_key_value(job.facts.cu_num)
    foreign = full[~mine]
    if len(foreign):
        others = sorted({f"{r.get(cols.get('gfx', ''), '') or '?'}/cu_num={norm_key_value(r[cols['cu_num']])}"
                         for _, r in foreign.iterrows()} if "cu_num" in cols else {"?"})
        job.note(f"{len(foreign)} row(s) of {Path(job.remote.tuned_csv).name} were tuned for another GPU "
                 f"({', '.join(others[:5])}); AITER never uses them on this {job.facts.gfx} with "
                 f"cu_num={job.facts.cu_num}")
    df = full[mine]
    keys = [c for c in variant.key_columns if c in cols]
    have = {tuple(norm_key_value(r[cols[c]]) for c in keys) for _, r in df.iterrows()}
    tuned, missing = [], []
    for s in job.shapes:
        (tuned if tuple(norm_key_value(s[c]) for c in keys) in have else missing).append(s)
    out = {"tuned": tuned, "no_kernel": missing, "rows_before": 0, "rows_after": len(full),
           "kernels": _kernels(df, cols, keys, job.shapes)}
    backup = job.remote.tuned_backup
    bpath = ctx.job_dir / "backup" / Path(backup).name if backup else None
    old = None
    if bpath is not None and bpath.is_file():
        old = read_tuned_csv(str(bpath))
        out["rows_before"] = len(old)
        out.update(_key_changes(ctx, old, full))
    if variant.family == "moe":
        moe_objectives(ctx, out, old, full, keys)
    return out


def moe_objectives(ctx: Ctx, out: dict, old, new, keys: list[str]) -> None:
    """The MoE us rule (issue 36): the job records its tuner's objective (probed, else the version's); a row of
    the kernels table kept from before this job (same kernel as in the backup) whose earlier job of this
    workspace tuned it under another objective shows no us beside this job's: one note says so."""
    from ..moe_quant import comparable, objective_of, skip_line
    job = ctx.job
    now = ctx.profile.moe_objective
    out["moe_objective"] = now
    kept: set = set()
    if old is not None:
        cols, st = key_statuses(old, new)
        at = [cols.index(c) for c in keys if c in cols]
        kept = {tuple(norm_key_value(vals[i]) for i in at) for status, vals in st.values() if status == "same"}
    then: dict = {}
    for j in sorted(ctx.workspace.jobs(), key=lambda j: j.created or 0):
        if j.job_id == job.job_id or (j.node, j.container, j.variant) != (job.node, job.container, job.variant):
            continue
        obj = objective_of(j.facts)
        for s in j.shapes or []:
            then[tuple(norm_key_value(s.get(c)) for c in keys)] = obj
    skipped: dict = {}
    for k in out.get("kernels") or []:
        key = tuple(norm_key_value(k.get(c)) for c in keys)
        was_kept = key in kept
        k["objective"] = then.get(key) if was_kept else now
        if was_kept and not comparable(k["objective"], now):
            k["us_other_objective"], k["us"] = k.get("us"), None
            skipped[k["objective"]] = skipped.get(k["objective"], 0) + 1
    for obj, n in skipped.items():
        job.note(skip_line(f"{n} MoE row(s) kept from before this job", obj, now))


def _kernels(df, cols: dict, keys: list[str], shapes: list[dict]) -> list[dict]:
    """The kernel the table now holds for each of the job's shapes (P-11): kernelName (MoE: stage 1 + 2),
    splitK, the tuner's us and TFLOPS, in the order the shapes were tuned."""
    names = [cols[c] for c in sorted(cols) if c.startswith("kernelname")]
    rows = {}
    for _, r in df.iterrows():
        rows[tuple(norm_key_value(r[cols[c]]) for c in keys)] = r
    out = []
    for s in shapes:
        r = rows.get(tuple(norm_key_value(s[c]) for c in keys))
        if r is None:
            continue
        out.append({**{c: s[c] for c in keys},
                    "kernel": " + ".join(str(r[n]) for n in names if str(r[n]) not in ("", "nan", "None")) or None,
                    **{k: norm_key_value(r[cols[k.lower()]]) for k in ("splitK", "us", "tflops")
                       if k.lower() in cols}})
    return out


def _key_changes(ctx: Ctx, old, new) -> dict:
    """Keys added / changed (kernel or config) / removed between the table before tuning and after (C-11):
    a row count hides replaced rows and rows the tuner dropped (FmoeTuner drops `_tag` rows, sortResults
    dedups). A key that vanished is said in a note."""
    keys, st = key_statuses(old, new)
    counts = collections.Counter(status for status, _ in st.values())
    res = {"keys_added": counts["only_b"], "keys_changed": counts["changed"], "keys_removed": counts["only_a"]}
    if res["keys_removed"]:
        shown = [i for i, c in enumerate(keys) if c.lower() in ("gfx", "cu_num", *ctx.variant.key_columns)]
        gone = [vals for status, vals in st.values() if status == "only_a"][:3]
        sample = "; ".join(" ".join(f"{keys[i]}={norm_key_value(v[i])}" for i in shown) for v in gone)
        ctx.job.note(f"{res['keys_removed']} key(s) of {Path(ctx.job.remote.tuned_csv).name} as it was before "
                     f"tuning are gone from the tuned table (e.g. {sample}); the promoted live table keeps them "
                     "(promotion merges rows in, it never drops any)")
    return res


def split_samples(text: str, arm: str) -> list[str]:
    """The benchmark runs of one arm in a bench log, cut at prepare's sample marker lines (a log without
    markers, from an older job, is one run)."""
    mark = re.compile(rf"^{re.escape(SAMPLE_MARK)} (\w+) (\d+)\s*$", re.M)
    found = list(mark.finditer(text))
    if not found:
        return [text]
    return [text[m.end():found[i + 1].start() if i + 1 < len(found) else len(text)]
            for i, m in enumerate(found) if m.group(1) == arm]


def run(ctx: Ctx) -> None:
    job, variant = ctx.job, ctx.variant
    pull(ctx, wanted_files(ctx, ctx.job_dir))
    info = job.step_state("compare").info
    info["tuned"] = tuned_outcome(ctx)
    found = tuner_search(ctx)       # FHMoE: its tuner's own M=.. lines, in ms (steps/fhmoe_input.py)
    if found:
        info["fhmoe_search"] = found
    from .remote import settle_tuning_results
    settle_tuning_results(ctx)
    logs = job.remote.logs or {}
    before_log = ctx.job_dir / "logs" / Path(logs.get("baseline", "-")).name
    after_log = ctx.job_dir / "logs" / Path(logs.get("after", "-")).name
    if variant.bench is None or not before_log.is_file() or not after_log.is_file():
        info["skipped"] = "no benchmark logs"
        return
    results: dict[str, list[dict]] = {}
    errors: dict[str, list[dict]] = {}
    # the error column next to the metric (`ck us` -> `ck err`, `us` -> `err`; aiter-formats.md §4), P-05
    err_spec = dataclasses.replace(variant.bench, metric=" ".join([*variant.bench.metric.split()[:-1], "err"]))
    # each call's output section is matched against that call's shapes only (C-19): bench_argv[i] is call i
    by_args = {c.args: c.shapes for c in plan_bench(variant, job.shapes)}
    call_shapes = [by_args.get(tuple(a[1:]), job.shapes) for a in job.remote.bench_argv or []]
    both = bool(job.remote.get("moe_flydsl"))
    arms = (("before", before_log), ("after", after_log), *(((moetuners.ARM, after_log),) if both else ()))
    for side, path in arms:
        results[side], errors[side] = [], []
        for text in split_samples(path.read_text(encoding="utf-8", errors="replace"), side):
            results[side].extend(measured_by_call(variant.bench, job.shapes, text, call_shapes))
            errors[side].extend(measured_by_call(err_spec, job.shapes, text, call_shapes))
    if both:
        results["after"], errors["after"] = pick_tuners(ctx, results.pop(moetuners.ARM), results["after"],
                                                        errors.pop(moetuners.ARM), errors["after"])
    looks = more_runs.looks(more_runs.design(job))     # --max-repeats: the sequential design (issue 37)

    def judge():
        return compare(results["before"], results["after"], key_columns=variant.key_columns, looks=looks,
                       metric=variant.bench.metric, higher_is_better=variant.bench.higher_is_better, judge=True)
    comp = more_runs.extend(ctx, judge, results, errors, err_spec, split_samples)
    comp.set_errors(errors["before"], errors["after"])
    if comp.summary.get("err_worse"):
        job.note(f"{comp.summary['err_worse']} shape(s) have a larger benchmark error ({err_spec.metric}) after "
                 "tuning (comparison.csv err_worse): check them before keeping their rows")
    shapes_info = job.step_state("shapes").info
    if shapes_info.get("time_share") is not None:      # run --profile (issue 38): each shape's share of GPU time
        comp.set_time_share({tuple(s.get(c) for c in variant.key_columns): x
                             for s, x in zip(job.shapes, shapes_info["time_share"])})
    comp.to_csv(ctx.job_dir / "comparison.csv")
    atomic_write(ctx.job_dir / "comparison.json", json.dumps(comp.to_dict(), default=str).encode())
    info["summary"] = comp.summary
    info["measured"] = {k: len(v) for k, v in results.items()}
    if variant.bench.output == "run_config":      # a tuner without its own run_config: that arm is tune-only
        from ..parsing.runconfig import unavailable
        for side, path in arms:
            why = unavailable(path.read_text(encoding="utf-8", errors="replace"))
            if why:
                job.note(f"{variant.name} {side} arm: {why}; it measured nothing (tuning only, no comparison)")
    if not results["before"] and not results["after"]:
        job.note(f"the benchmark printed no {variant.bench.metric!r} values (see the bench logs)")


def pick_tuners(ctx: Ctx, fly: list[dict], std: list[dict], fly_err: list[dict], std_err: list[dict]):
    """run --moe-tuners both (issue 30): per shape the path whose end-to-end benchmark is faster; the staging
    table (node and local copy) gets the flydsl row of each shape it won, moe_tuners.csv and the kernels
    table say which path each shape kept. Returns the after results and errors of the chosen paths."""
    job, variant = ctx.job, ctx.variant
    keys = variant.key_columns
    after, choices = moetuners.pick(std, fly, keys, variant.bench.higher_is_better)
    won = {tuple(norm_key_value(v) for v in c["key"].values()): c["tuner"] for c in choices}
    errs = [r for path, rs in (("standard", std_err), ("flydsl", fly_err)) for r in rs
            if won.get(tuple(norm_key_value(r["key"].get(c)) for c in keys)) == path]
    local = ctx.job_dir / Path(job.remote.tuned_csv).name
    fly_local = ctx.job_dir / moetuners.local_name(job.remote.get("moe_flydsl")["staging"])
    info = job.step_state("compare").info
    if local.is_file() and fly_local.is_file():
        text, _ = moetuners.merged_table(local.read_text(), fly_local.read_text(), choices, keys, job.facts.cu_num)
        ctx.call("write_files", {"files": [{"path": job.remote.tuned_csv, "backup_dir": None, "content": text}]})
        atomic_write(local, text.encode())
        info["tuned"] = tuned_outcome(ctx)
    else:   # nothing merged: every shape keeps the standard row, and is measured as such
        job.note("--moe-tuners both: a staging table did not come back; the standard tuner's rows are kept")
        return std, std_err
    by_key = {tuple(norm_key_value(c["key"][k]) for k in keys): c for c in choices}
    for k in (info.get("tuned") or {}).get("kernels") or []:
        c = by_key.get(tuple(norm_key_value(k.get(col)) for col in keys))
        if c:
            k["tuner"] = c["tuner"]
    lines = [",".join([*keys, "tuner", "standard", "flydsl"])]
    lines += [",".join([*(str(v) for v in c["key"].values()), c["tuner"],
                        *("" if c[p] is None else f"{c[p]:g}" for p in ("standard", "flydsl"))]) for c in choices]
    atomic_write(ctx.job_dir / "moe_tuners.csv", ("\n".join(lines) + "\n").encode())
    n = sum(1 for c in choices if c["tuner"] == "flydsl")
    info["moe_tuners"] = choices
    job.note(f"--moe-tuners both: {n} of {len(choices)} shape(s) kept the --mxfp4-flydsl row, the rest the "
             f"standard tuner's, each by its end-to-end benchmark ({variant.bench.metric}, median); per shape in "
             "moe_tuners.csv and the kernels table")
    return after, errs
