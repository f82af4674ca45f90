"""A campaign's outputs: comparison CSV(s) with a ``node`` column, one report.md / report.html.

One variant: ``<ws>/<job>/comparison.csv``; several: ``<ws>/<job>/<variant>/comparison.csv`` each.
Every target's own report, logs and tables stay in ``<ws>/<job>/targets/<sub job>/``.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..state import JobState, Workspace, atomic_write
from ..variants import get_variant
from .remeasure import apply, received


def sub_workspace(workspace: Workspace, job: JobState) -> Workspace:
    """Where a campaign's sub-jobs live: ``<ws>/<job>/targets/``."""
    return Workspace(workspace.job_dir(job.job_id) / "targets")


def merged_comparisons(job: JobState, workspace: Workspace, subs: list[JobState],
                       remeasured_lines: list[str] | None = None) -> dict[str, Path]:
    """``remeasured_lines`` gets one line per shape whose ``after`` is the value measured again after the
    promotion across its kind (or why it was not)."""
    import pandas as pd

    from ..outcome.compare_values import GAIN_INTERVAL_COLUMNS
    subws = sub_workspace(workspace, job)
    root = workspace.job_dir(job.job_id)
    variants = sorted({s.variant for s in subs})
    written: dict[str, Path] = {}
    for variant in variants:
        frames = []
        remeasured = job.request.campaign.remeasured or {}
        for s in subs:
            path = subws.job_dir(s.job_id) / "comparison.csv"
            if s.variant != variant or not path.is_file():
                continue
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
            df["node"] = s.node
            if remeasured.get(s.job_id) and received(s):   # what the kind serves after the promotion across it
                bench = get_variant(variant).bench
                lines = apply(df, s.node, remeasured[s.job_id], bool(bench and bench.higher_is_better))
                if remeasured_lines is not None:
                    remeasured_lines.extend(f"{variant}: {x}" for x in lines)
            # issue 37's interval columns come after `node`, so every earlier column keeps its place
            df = df[[c for c in df.columns if c not in GAIN_INTERVAL_COLUMNS]
                    + [c for c in GAIN_INTERVAL_COLUMNS if c in df.columns]]
            frames.append(df)
        if not frames:
            continue
        out = root / "comparison.csv" if len(variants) == 1 else root / variant / "comparison.csv"
        atomic_write(out, pd.concat(frames, ignore_index=True).to_csv(index=False).encode())
        written[variant] = out
    return written


def _summary(path: Path) -> dict:
    import pandas as pd
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    out = {"shapes": len(df)}
    if "speedup_pct" in df:
        sp = pd.to_numeric(df["speedup_pct"], errors="coerce")
        out.update(faster=int((sp > 1).sum()), slower=int((sp < -1).sum()),
                   median=None if sp.dropna().empty else round(float(sp.median()), 2))
    if "verdict" in df:
        out["verdicts"] = df["verdict"].value_counts().to_dict()
    return out


def write_outputs(job: JobState, workspace: Workspace, subs: list[JobState]) -> None:
    root = workspace.job_dir(job.job_id)
    again: list[str] = []
    comps = merged_comparisons(job, workspace, subs, again)
    subws = sub_workspace(workspace, job)
    lines = [f"# Campaign {job.job_id}", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}. **State:** {job.state}"
             + (f" ({job.error})" if job.error else ""), "",
             f"Variants: {job.variant}. Targets: {len({(s.node, s.container) for s in subs})}.", ""]
    later = job.request.campaign.later or []
    if later:   # promote / rollback after the campaign: this report, comparison.csv and the live tables agree
        lines += ["**The outcome changed after the campaign** (this report and comparison.csv were written "
                  "again; each target's own report too):", ""]
        lines += [f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(c['at']))}: `{c['command']}`: "
                  + "; ".join(c.get("lines") or []) for c in later] + [""]
    kinds = job.request.campaign.kinds or {}
    lines += ["## Targets", "", "| node | container | variant | GPU kind | shapes | state | report |",
              "|---|---|---|---|---|---|---|"]
    for s in subs:
        rep = subws.job_dir(s.job_id) / "report.md"
        rel = rep.relative_to(root) if rep.is_file() else "-"
        lines.append(f"| {s.node} | {s.container} | {s.variant} | {kinds.get(f'{s.node}/{s.container}', '-')} "
                     f"| {len(s.shapes)} | {s.state}{' (' + s.error + ')' if s.error else ''} | {rel} |")
    resharded = job.request.campaign.resharded or {}
    by_id = {s.job_id: s for s in subs}
    for lost, moved in resharded.items():
        if lost in by_id:
            where = [f"{by_id[x].node}/{by_id[x].container} ({by_id[x].state})" for x in moved if x in by_id]
            lines.append(f"\n{by_id[lost].node}/{by_id[lost].container} {by_id[lost].variant} was lost: "
                         + (f"its untuned shapes went to {', '.join(where)}" if where else
                            "every shape of its shard had a row" if moved else
                            "its untuned shapes had no surviving target of its kind"))
    lines += ["", "## Results per variant", ""]
    for variant, path in comps.items():
        summ = _summary(path)
        lines.append(f"- **{variant}**: {summ['shapes']} shapes compared "
                     f"({path.relative_to(root)}); faster > 1 %: {summ.get('faster', '-')}, "
                     f"slower < -1 %: {summ.get('slower', '-')}, median speedup {summ.get('median', '-')} %"
                     + ("; verdicts " + ", ".join(f"{k} {n}" for k, n in summ["verdicts"].items())
                        if summ.get("verdicts") else ""))
    if not comps:
        lines.append("- no comparison (no target finished its benchmarks)")
    spread = [x for x in job.request.campaign.spread or [] if not x.startswith("(")]
    if spread:
        lines += ["", "## Promotion across each GPU kind", "", *[f"- {x}" for x in spread]]
    if again:
        lines += ["", "## After the promotion across each GPU kind", "",
                  "Shapes whose own target found no kernel, or whose row another target replaced, were measured "
                  "again on their target once the rows of the other targets of its kind were in its live table "
                  "(the row that serves each is named); `after` in comparison.csv is that value:", "",
                  *[f"- {x}" for x in again]]
    plan = job.request.campaign.plan_lines or []
    if plan:
        lines += ["", "## Plan", "", "```", *plan, "```"]
    from ..report.campaign import campaign_report
    tail = "\n".join(lines[lines.index("## Targets") if "## Targets" in lines else 0:]) + "\n"
    head = "\n".join(lines[1:lines.index("## Targets")]) if "## Targets" in lines else ""
    md, page = campaign_report(f"Campaign {job.job_id}", comps, tail,
                               {"id": job.job_id, "state": job.state}, intro_md=head)
    atomic_write(root / "report.md", md.encode())
    atomic_write(root / "report.html", page.encode())
