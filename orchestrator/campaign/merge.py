"""A campaign's outputs: comparison CSV(s) with a ``node`` column, one report.md / report.html.

One variant: ``<ws>/<job>/comparison.csv``; several: ``<ws>/<job>/<variant>/comparison.csv`` each.
Every target's own report, logs and tables stay in ``<ws>/<job>/targets/<sub job>/``.
"""

from __future__ import annotations

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


def campaign_facts(job: JobState, workspace: Workspace, subs: list[JobState], comps: dict[str, Path],
                   again: list[str]) -> dict:
    """What a campaign's report says, as plain data (``report/campaign.py`` renders it)."""
    root = workspace.job_dir(job.job_id)
    subws = sub_workspace(workspace, job)
    kinds = job.request.campaign.kinds or {}
    targets = []
    for s in subs:
        rep = subws.job_dir(s.job_id) / "report.md"
        targets.append({"node": s.node, "container": s.container, "variant": s.variant, "shapes": len(s.shapes),
                        "kind": kinds.get(f"{s.node}/{s.container}"), "state": s.state, "error": s.error,
                        "report": str(rep.relative_to(root)) if rep.is_file() else None})
    lost = []
    by_id = {s.job_id: s for s in subs}
    for gone, moved in (job.request.campaign.resharded or {}).items():
        if gone in by_id:
            where = [f"{by_id[x].node}/{by_id[x].container} ({by_id[x].state})" for x in moved if x in by_id]
            lost.append(f"{by_id[gone].node}/{by_id[gone].container} {by_id[gone].variant} was lost: "
                        + (f"its untuned shapes went to {', '.join(where)}" if where else
                           "every shape of its shard had a row" if moved else
                           "its untuned shapes had no surviving target of its kind"))
    return {"job_id": job.job_id, "state": job.state, "error": job.error, "variants": job.variant,
            "target_count": len({(s.node, s.container) for s in subs}),
            "later": job.request.campaign.later or [],   # promote / rollback after the campaign
            "targets": targets, "lost": lost,
            "results": [{"variant": v, "path": str(p.relative_to(root)), **_summary(p)} for v, p in comps.items()],
            "spread": [x for x in job.request.campaign.spread or [] if not x.startswith("(")],
            "again": again, "plan": job.request.campaign.plan_lines or []}


def write_outputs(job: JobState, workspace: Workspace, subs: list[JobState]) -> None:
    """comparison.csv (one per variant when several), report.md and report.html of the campaign."""
    from ..report.campaign import campaign_report
    root = workspace.job_dir(job.job_id)
    again: list[str] = []
    comps = merged_comparisons(job, workspace, subs, again)
    md, page = campaign_report(campaign_facts(job, workspace, subs, comps, again), comps)
    atomic_write(root / "report.md", md.encode())
    atomic_write(root / "report.html", page.encode())
