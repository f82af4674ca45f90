"""Read-only ops that ride along with ``discover``: one round trip fewer each (issue 9).

The laptop sends a template per op (paths with ``{root}``, ``{meta}``, ``{gfx}``; ``{cu_num}``/``{gfx}`` as
whole values); the node resolves it from what it discovered, runs the op and returns the request it resolved
with the answer (nodeside/probe.py ``run_riders``). A step uses that answer only when the resolved request is
exactly the one it would send now; otherwise (an older AITER's paths, an inventory env the node cannot see)
it asks the op itself, so a rider can save a round trip but never change an answer.
"""

from __future__ import annotations

from ..context import Ctx


def call(ctx: Ctx, op: str, req: dict, **kw) -> dict:
    ridden = (ctx.job.facts.riders or {}).pop(op, None)
    if ridden and ridden.get("request") == req:
        return dict(ridden["answer"])
    return ctx.call(op, req, **kw)


def drop(ctx: Ctx, op: str) -> None:
    """A rider the step does not need (kept out of the job's saved facts)."""
    (ctx.job.facts.riders or {}).pop(op, None)
