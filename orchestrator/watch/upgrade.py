"""An upgrade is an event: a target whose AITER version, ROCm version or GPU kind changed since the watch's
last cycle gets an ``upgrade`` ledger entry and a ``recheck`` (the rows tune-remote promoted there, measured
again with and without each row)."""
from __future__ import annotations

FACTS = ("aiter_version", "rocm_version", "gfx")


def changed(before: dict | None, after: dict | None) -> dict:
    """fact -> [before, after] for each fact both cycles know and that differs; {} on the first cycle."""
    if not before or not after:
        return {}
    return {k: [before.get(k), after.get(k)] for k in FACTS
            if before.get(k) is not None and after.get(k) is not None and before.get(k) != after.get(k)}


def recheck_target(workspace, inventory_loader, settings, ui, *, node: str, container: str | None,
                   variant: str | None = None) -> dict:
    """The ONE place the watch runs a recheck (``orchestrator.recheck.run_recheck``, imported when an upgrade
    is seen). What it found goes into the ledger's ``upgrade`` entry: ``{"recheck": <recheck dir>, "counts":
    {verdict: n}}``; ``{"recheck": "none", "reason": ...}`` when tune-remote promoted nothing there;
    ``{"recheck": "failed", "error": ...}`` when it could not run (no free GPU, the node gone): tried again at
    the next cycle."""
    from ..errors import TuneRemoteError
    from ..recheck import NothingToRecheck, run_recheck
    try:
        res = run_recheck(workspace, inventory_loader, settings, ui, node=node, container=container,
                          variant=variant, repeats=None, demote=False)
    except NothingToRecheck as exc:
        return {"recheck": "none", "reason": exc.one_line()}
    except TuneRemoteError as exc:
        return {"recheck": "failed", "error": exc.one_line()}
    return {"recheck": str(res.path), "counts": dict(res.counts)}
