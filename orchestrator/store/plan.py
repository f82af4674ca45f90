"""The plan consults the store (`run --reuse proven`): a shape whose key the team already holds a row for on
this GPU kind (gfx and cu_num), table and AITER version is not tuned again; the plan says where the row came
from. The validator is the exact AITER version for now (a range over which the variant's kernel list is
unchanged is the issue's aim: it needs that list probed, never guessed)."""

from __future__ import annotations

import collections
from pathlib import Path

from ..errors import JobError
from .keys import row_key
from .query import proven


def reuse_proven(store, ctx, shapes: list[dict], described: list[str]) -> list[dict]:
    job, variant = ctx.job, ctx.variant
    if not shapes or job.facts.gfx is None or job.facts.cu_num is None:
        return shapes
    gfx, cu = job.facts.gfx, int(job.facts.cu_num)
    keys = variant.key_columns
    got = proven(store, gfx=gfx, cu_num=cu, table_name=Path(variant.tuned_csv).name,
                 row_keys=[row_key(s, keys) for s in shapes], aiter=job.facts.version)
    if not got:
        return shapes
    keep = [s for s in shapes if row_key(s, keys) not in got]
    whose = collections.Counter((g["job_id"], g["origin"]) for g in got.values())
    line = (f"{len(got)} shape(s) have a proven row for {gfx}/cu_num={cu} on AITER {job.facts.version} in the team's "
            "store (" + "; ".join(f"{n} from job {j} ({o})" for (j, o), n in whose.most_common()) + "): not tuned "
            f"again (--reuse proven); `tune-remote rows --variant {variant.name} --gpu {gfx} --export` gives them")
    job.note(line)
    described.append(line)
    job.step_state("shapes").info["reused"] = [{"key": {c: s.get(c) for c in keys}, **got[row_key(s, keys)]}
                                               for s in shapes if row_key(s, keys) in got]
    if not keep:
        raise JobError(f"every {variant.name} shape of the job has a proven row in the team's store",
                       hint=f"`tune-remote rows --variant {variant.name} --gpu {gfx} --export` gives them; "
                            "--reuse none tunes them again")
    return keep
