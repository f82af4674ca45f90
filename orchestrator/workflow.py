"""The step order as data and a pure next_step(); no I/O here.

discover -> shapes -> prepare -> remote (baseline bench, tune, after bench: ONE detached job on the
node, so the node carries on by itself when the laptop goes away) -> compare -> promote (proven rows into
the live table, run --promote) -> report -> fetch.
"""

from __future__ import annotations

from .state import JobState, Status

STEPS: tuple[str, ...] = ("discover", "shapes", "prepare", "remote", "compare", "promote", "report", "fetch")
# sub-steps of the detached node pipeline, in order; names are also the `logs --step` values
REMOTE_STEPS: tuple[str, ...] = ("baseline", "tune", "after")
LOG_STEP_NAMES = {"baseline": "bench_before", "tune": "tuning", "after": "bench_after"}
DONE = (Status.DONE, Status.SKIPPED)


def next_step(job: JobState) -> str | None:
    """The next step to run, or None when the job is finished (or failed/cancelled)."""
    if job.state != Status.RUNNING:
        return None
    for name in STEPS:
        status = job.step_state(name).status
        if status == Status.FAILED:
            return None
        if status not in DONE:
            return name
    return None

