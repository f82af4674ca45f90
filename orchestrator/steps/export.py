"""Export a job's proven rows for upstream: ``model_configs/<NAME>_<tuned base>.csv`` + a Markdown summary.

Offline (the job's fetched files only): the staging table fetched home, comparison.csv's verdicts.
Rows: verdict ``improved`` only, this job's gfx/cu_num on every row, hipBLASLt rows dropped (solution
indices are library-version dependent), keys the shared table (the live table's backup) already owns
left out (AITER >= 0.1.12 raises on duplicate keys across merged files; model_configs/ keys were kept
out at tuning and promotion time on the node). Header order as the tuner wrote it (scale-speed-noise.md D).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

from ..errors import UsageError
from ..state import JobState, atomic_write
from ..variants import get_variant
from ..outcome.compare import Comparison, norm_key_value
from .provenance import provenance

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    return (rows[0], [r for r in rows[1:] if any(c.strip() for c in r)]) if rows else ([], [])


def _keyer(header: list[str], cols: list[str]):
    low = [h.strip().lower() for h in header]
    idx = [low.index(c) for c in cols if c in low]
    return lambda row: tuple(norm_key_value(row[i].strip()) for i in idx)


def export(job: JobState, job_dir: Path, name: str, dest: Path | None = None, guards=None) -> dict:
    if not job.remote.tuned_csv:
        raise UsageError(f"job {job.job_id} has no tuned table", hint=f"tune-remote status {job.job_id}")
    return export_many([(job, job_dir)], name, dest or job_dir / "export", guards=guards)


def export_many(jobs: list[tuple[JobState, Path]], name: str, dest: Path, by: str | None = None,
                guards=None) -> dict:
    """One file of the proven rows of one variant's jobs (a campaign's targets: each row keeps its gfx/cu_num;
    a key two targets both hold comes from the first). Their tables must share a header (one AITER version).
    ``guards(file name, CSV text)``: upstream's level-0 guards run on the node with the file added
    (provenance.run_guards); their result goes into the summary's provenance."""
    if not _NAME.match(name or ""):
        raise UsageError(f"--model-config {name!r} is not a file-name stem",
                         hint="letters, digits, '.', '_' and '-', e.g. --model-config dsv3")
    header, out, parts = None, {}, []
    for job, job_dir in jobs:
        h, rows, comp, dropped = _proven(job, job_dir)
        if header is None:
            header = h
        elif [c.strip().lower() for c in h] != [c.strip().lower() for c in header]:
            raise UsageError(f"{job.node}/{job.container}'s tuned table has other columns than "
                             f"{jobs[0][0].node}/{jobs[0][0].container}'s (another AITER version)",
                             hint="export them apart: --node NODE")
        mine = [k for k in rows if k not in out]
        dropped["elsewhere"] = len(rows) - len(mine)
        out.update({k: rows[k] for k in mine})
        parts.append((job, comp, [k[2:] for k in mine], dropped))
    job0 = jobs[0][0]
    base = Path(get_variant(job0.variant).tuned_csv).stem
    csv_path = dest / f"{name}_{base}.csv"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *out.values()])
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write(csv_path, buf.getvalue().encode())
    md_path = dest / f"{name}_{base}.md"
    ran = guards(csv_path.name, buf.getvalue()) if guards else None
    text = "\n".join(_summary(j, c, name, base, keys, d, by if len(parts) > 1 else None, i)
                     + provenance(j, ran, csv_path.name) for i, (j, c, keys, d) in enumerate(parts))
    atomic_write(md_path, text.encode())
    dropped = {k: sum(d.get(k, 0) for *_, d in parts) for k in ("hipblaslt", "owned")}
    return {"csv": str(csv_path), "summary": str(md_path), "rows": len(out), "dropped": dropped,
            **({"guards": ran} if ran else {})}


def _proven(job: JobState, job_dir: Path) -> tuple[list[str], dict, Comparison, dict]:
    """The job's header, its proven rows to export ({(gfx, cu_num, *key): row}), its comparison, what it left out."""
    staging = job_dir / Path(job.remote.tuned_csv).name
    cjson = job_dir / "comparison.json"
    if not staging.is_file() or not cjson.is_file():
        raise UsageError(f"job {job.job_id} has no fetched tuned table or comparison",
                         hint=f"tune-remote fetch {job.job_id} (a job needs before/after benchmarks to export)")
    comp = Comparison.from_dict(json.loads(cjson.read_text()))
    if not comp.judged:
        raise UsageError(f"job {job.job_id} has no verdicts (it predates repeated benchmarks)",
                         hint="rerun it with tune-remote run")
    cols = [c for c in comp.key_columns]
    proven = comp.rows[comp.rows["verdict"] == "improved"]
    wanted = {tuple(norm_key_value(r[c]) for c in cols) for _, r in proven.iterrows()}
    header, rows = _read(staging)
    low = [h.strip().lower() for h in header]
    key = _keyer(header, cols)
    gfx, cu = job.facts.gfx, norm_key_value(job.facts.cu_num)
    owned = set()
    for b in sorted((job_dir / "backup").glob("*")) if (job_dir / "backup").is_dir() else []:
        bh, br = _read(b)
        bkey, blow = _keyer(bh, cols), [h.strip().lower() for h in bh]
        for r in br:
            if "cu_num" in blow and norm_key_value(r[blow.index("cu_num")].strip()) != cu:
                continue
            if "gfx" in blow and gfx and r[blow.index("gfx")].strip() != gfx:
                continue
            owned.add(bkey(r))
    out, dropped = {}, {"hipblaslt": 0, "owned": 0}
    for r in rows:
        if "cu_num" in low and norm_key_value(r[low.index("cu_num")].strip()) != cu:
            continue
        if "gfx" in low and gfx and r[low.index("gfx")].strip() != gfx:
            continue
        k = key(r)
        if k not in wanted:
            continue
        if "libtype" in low and r[low.index("libtype")].strip().lower() == "hipblaslt":
            dropped["hipblaslt"] += 1
            continue
        if k in owned:
            dropped["owned"] += 1
            continue
        out[(gfx, cu) + k] = r   # the newest row of a key wins, as in AITER's sortResults
    return header, out, comp, dropped


def _summary(job: JobState, comp: Comparison, name: str, base: str, keys: list[tuple], dropped: dict,
             by: str | None = None, part: int = 0) -> str:
    """The PR summary of one job's rows; ``by``: one part of a file several jobs (a campaign's targets) fill."""
    f, sm = job.facts, comp.summary
    rows = comp.rows
    sel = {k for k in keys}
    title = ([f"# [Perf] Add tuned {base} configs for {name}", "",
              f"File: `aiter/configs/model_configs/{name}_{base}.csv`; tuned by tune-remote {by} on several "
              "targets, one part per target below.", ""] if by and not part else [])
    lines = title + [f"{'##' if by else '#'} [Perf] Add tuned {base} configs for {name} on {f.gfx}"
                     + (f" ({job.node}/{job.container})" if by else ""), "",
             f"File: `aiter/configs/model_configs/{name}_{base}.csv` ({len(keys)} rows, gfx={f.gfx}, "
             f"cu_num={f.cu_num}); AITER {f.version}; tuned by tune-remote job `{job.job_id}` on "
             f"{job.node}/{job.container}.", "",
             f"Evidence: every row is proven faster: {sm.get('samples', {}).get('before')} before / "
             f"{sm.get('samples', {}).get('after')} after runs per shape, interleaved on one pinned GPU, medians, "
             f"node noise {sm.get('pooled_noise_pct')}% (relative sd); one-sided exact Mann-Whitney U plus a "
             f"practical bar of {_bar(sm)}. The `observed` column says what the runs showed.", "",
             f"Left out: {dropped['hipblaslt']} hipBLASLt row(s) (library-version dependent), {dropped['owned']} "
             "row(s) whose key the shared table already owns (no duplicate keys across merged files)"
             + (f", {dropped['elsewhere']} row(s) an earlier target gave already." if dropped.get("elsewhere")
                else ".")
             , "",
             *_outcome_lines(job, comp, sel),
             f"| shape | before ({comp.metric}) | after ({comp.metric}) | speedup % | observed |",
             "|---|---:|---:|---:|---|"]
    for _, r in rows.iterrows():
        k = tuple(norm_key_value(r[c]) for c in comp.key_columns)
        if k in sel:
            shape = ", ".join(f"{c}={r[c]}" for c in comp.key_columns)
            lines.append(f"| {shape} | {r['before']:.6g} | {r['after']:.6g} | {r['speedup_pct']:+.2f} | "
                         f"{observed(r)} |")
    return "\n".join(lines) + "\n"


def _bar(summary: dict) -> str:
    """The verdict rule the job ran: issue 37's bar on the standard error of the median difference (job-wide
    K), or the rule of a job judged before it (no ``verdict_k`` in its summary)."""
    k = summary.get("verdict_k")
    if k is None:
        return "max(1 %, 3 x noise)"
    return f"max(1 %, {k:g} x noise x sqrt(1/runs before + 1/runs after))"


def observed(r) -> str:
    """What the runs of a proven row showed, in words: with n before and m after runs the exact test's smallest
    p (1 / C(n+m, n), 0.05 for 3 vs 3) means every after run beat every before run; a bigger p is printed."""
    try:
        b, a = int(r["before_n"]), int(r["after_n"])
    except (TypeError, ValueError, KeyError):
        return "-"
    if b < 2 or a < 2:
        return f"{b} before / {a} after run(s): median gain above the single-run bar"
    p = r.get("p_value")
    if p is None or p != p or float(p) <= 1.0 / math.comb(a + b, b) + 1e-9:
        return f"{a}/{a} after runs faster than every before run"
    return f"after faster in the medians, exact test p={float(p):.3g} over {b} vs {a} runs"


def _outcome_lines(job: JobState, comp: Comparison, sel: set) -> list[str]:
    """Geomean of the exported rows, the tuned rows left out as not proven (regressed, within noise), and the
    serving benchmark before/after where --serve-cmd measured it."""
    rows = comp.rows
    keyed = [(tuple(norm_key_value(r[c]) for c in comp.key_columns), r) for _, r in rows.iterrows()]
    mine = [r for k, r in keyed if k in sel]
    ratios = [float(r["ratio"]) for r in mine if r.get("ratio") is not None and float(r["ratio"]) > 0]
    gm = (math.exp(math.fsum(math.log(x) for x in ratios) / len(ratios)) - 1.0) * 100.0 if ratios else None
    verdicts = rows["verdict"].value_counts().to_dict() if "verdict" in rows else {}
    out = [f"Geomean speedup of the {len(mine)} exported row(s): "
           + ("-" if gm is None else f"{gm:+.2f}%") + f" ({comp.metric}).", "",
           f"Not exported (not proven faster): {verdicts.get('regressed', 0)} regressed row(s), "
           f"{verdicts.get('within_noise', 0)} within noise, {verdicts.get('missing', 0)} missing a benchmark "
           "(comparison.csv lists them).", ""]
    if "time_share" in rows.columns:     # run --profile (issue 38): what reviewers ask a tuning PR for
        held = math.fsum(float(r["time_share"]) for r in mine)
        saved = math.fsum(float(r["time_share"]) * (1.0 - 1.0 / float(r["ratio"])) for r in mine
                          if r.get("ratio") is not None and float(r["ratio"]) > 1.0)
        out += [f"Kernel-time share: the {len(mine)} exported row(s) are {100 * held:.1f} % of the profiled "
                f"server's GPU time (torch.profiler trace, `--profile`); their speedups should cut it by about "
                f"{100 * saved:.2f} % end to end (Amdahl: the sum of each shape's share x the fraction of its "
                "time saved).", ""]
    serving = [s for s in (job.step_state("promote").info.get("serving") or []) if s.get("after") is not None]
    if serving:
        out += ["Serving benchmark (`--serve-cmd`) before tuning / after promotion:", "",
                "| metric | before | after | change % |", "|---|---:|---:|---:|",
                *(f"| {s['metric']} | {s['before']} | {s['after']} | {s.get('change_pct')} |" for s in serving), ""]
    return out
