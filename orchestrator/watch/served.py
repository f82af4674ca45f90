"""Shapes a live table already serves are not tuned: a watch learns each target's live table from the jobs
it ran there (``offsets.json`` ``targets[label]["tables"][variant]``) and, only in a cycle that has shapes to
tune, asks the target for that table's keys (op ``tuned_keys``, one round trip). A row promoted by anyone
(another job, a hand edit) takes its shape out of the cycle's list."""
from __future__ import annotations

from ..outcome.keys import norm_key_value
from ..variants import get_variant


def table_of(job) -> dict | None:
    """What a finished job says of its target's live table, or None (it never got that far)."""
    live = job.remote.live_csv if job.remote else None
    if not live:
        return None
    return {"live": live, "gfx": job.facts.gfx, "cu_num": job.facts.cu_num}


def _key(variant, shape: dict) -> tuple:
    return tuple(str(norm_key_value(shape.get(c))) for c in variant.key_columns)


def served(target, variant_name: str, table: dict, shapes: list[dict]) -> list[dict]:
    """The shapes of ``shapes`` that ``table`` (on ``target``) has a row for, for its GPU."""
    variant = get_variant(variant_name)
    res = target.helper.call("tuned_keys", {"patterns": [table["live"]], "key_columns": list(variant.key_columns),
                                            "cu_num": table.get("cu_num"), "gfx": table.get("gfx")}, timeout=120)
    have = {tuple(str(norm_key_value(v)) for v in key) for keys in (res.get("files") or {}).values() for key in keys}
    return [s for s in shapes if _key(variant, s) in have]
