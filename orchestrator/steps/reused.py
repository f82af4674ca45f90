"""A job's shapes whose rows came from the team's store (issue 39; store/plan.py puts them in the shapes step's
``info.reused``: key, provenance, row): not tuned, staged as candidates by prepare and measured like the tuned
ones (docs/store.md). Read here without the store (no SQLAlchemy in a job's steps)."""

from __future__ import annotations

from ..outcome.keys import norm_key_value


def reused(job) -> list[dict]:
    return list((job.step_state("shapes").info.get("reused") or []) if "shapes" in job.steps else [])


def reused_key_set(job, key_columns) -> set[tuple]:
    return {tuple(norm_key_value((r.get("key") or {}).get(c)) for c in key_columns) for r in reused(job)}
