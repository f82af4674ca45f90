"""Which live rows tune-remote promoted on a container: the workspace's jobs say (their promotion records).

A job (or a campaign's sub-job) keeps the node's promotion record in ``state.json`` (``remote.promotion``,
and ``remote.peer_promotions`` for rows a campaign spread to it from a node of the same GPU kind): the live
table, the promoted keys (with the gfx/cu_num prefix the staging table had), whether it was rolled back.
The newest promotion of a key wins (it wrote the row that is live now).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import UsageError
from ..moe_quant import objective_of
from ..outcome.keys import norm_key_value
from ..shapelib.tablekey import prefix_columns
from ..state import JobState, Workspace
from ..variants import get_variant


@dataclass
class Promoted:
    """One live row a job promoted."""
    variant: str
    live: str                      # the live table on the node
    key: dict                      # {variant key column: value}
    prefix: dict                   # {"gfx"/"cu_num": text} the row carries, from the promotion record
    job_id: str
    at: float                      # when it was promoted
    facts: dict = field(default_factory=dict)   # the job's AITER version, ROCm, GPU at promotion
    shape: dict = field(default_factory=dict)   # the job's shape dict (typed values) for the benchmark
    origin: str | None = None      # the laptop and workspace it was promoted from (host:workspace)
    job_uid: str | None = None     # the job's uid in the team's store
    table: str = ""                # a store row's table file name: ``live`` is found on the node (resolve)
    created: float | None = None   # a workspace job's creation time (with job_id: its uid in the store)

    def node_key(self) -> dict:
        """The key as the node's ``recheck_tables``/``demote`` ops match it: {lower-case column: text}."""
        return {**self.prefix, **{c: str(v) for c, v in self.key.items()}}

    def ident(self) -> tuple:
        return (self.variant, self.live, tuple(norm_key_value(v) for v in self.key.values()))


def all_jobs(ws: Workspace) -> list[JobState]:
    """The workspace's jobs and every campaign's sub-jobs (``<campaign>/targets/<sub>``)."""
    out = list(ws.jobs())
    if ws.root.is_dir():
        for d in sorted(ws.root.iterdir()):
            if (Path(d) / "targets").is_dir():
                out.extend(Workspace(Path(d) / "targets").jobs())
    return out


def facts_of(job: JobState) -> dict:
    f = job.facts
    return {"version": f.version, "version_raw": f.get("version_raw"), "rocm": f.get("rocm_version"),
            "gfx": f.gfx, "gpu": f.get("gpu_name"), "cu_num": f.cu_num, "moe_objective": objective_of(f)}


def _records(job: JobState) -> list[dict]:
    recs = [job.remote.promotion] if job.remote.promotion else []
    return recs + list(job.remote.peer_promotions or [])


def promoted_rows(jobs: list[JobState], node: str, container: str | None,
                  variant: str | None = None) -> list[Promoted]:
    """The promoted rows of ``jobs`` on ``node``/``container`` (None: any), of ``variant`` (None: every),
    newest promotion of a key first-come; rolled-back promotions count for nothing."""
    found: dict[tuple, Promoted] = {}
    for job in jobs:
        if job.node != node or (container is not None and job.container != container):
            continue
        if variant is not None and job.variant != variant:
            continue
        try:
            cols = list(get_variant(job.variant).key_columns)
        except UsageError:       # a variant this version does not know: not ours to recheck
            continue
        n = len(cols)
        by_key = {tuple(norm_key_value(s.get(c)) for c in cols): s for s in job.shapes or []}
        for rec in _records(job):
            if rec.get("rolled_back") or not rec.get("live"):
                continue
            at = float(rec.get("time") or job.created or 0)
            for k in rec.get("promoted") or []:
                k = [str(v) for v in k]
                head = k[:len(k) - n]
                gpu = prefix_columns(head) if len(k) >= n else None   # shapelib/tablekey: the GPU columns
                if gpu is None:
                    continue
                values = k[-n:]
                norm = tuple(norm_key_value(v) for v in values)
                row = Promoted(variant=job.variant, live=rec["live"], key=dict(zip(cols, values)),
                               prefix=dict(zip(gpu, head)), job_id=job.job_id, at=at,
                               facts=facts_of(job), shape=dict(by_key.get(norm) or dict(zip(cols, values))),
                               created=job.created)
                old = found.get(row.ident())
                if old is None or row.at >= old.at:
                    found[row.ident()] = row
    return sorted(found.values(), key=lambda r: (r.variant, r.live, r.ident()[2]))


def containers_of(jobs: list[JobState], node: str) -> list[str]:
    """The containers of ``node`` where the workspace's jobs promoted something."""
    return sorted({j.container for j in jobs if j.node == node and any(
        not r.get("rolled_back") and r.get("promoted") for r in _records(j))})


def from_store(entries: list[dict], node: str, container: str | None, variant: str | None = None) -> list[Promoted]:
    """The rows the team's store says are live on ``node``/``container`` (``store.query.promoted_on``), promoted
    by any laptop; their live table is the variant's on the node (``live`` empty until the recheck resolves it)."""
    out = []
    for e in entries:
        if e["node"] != node or (container is not None and e["container"] != container):
            continue
        if variant is not None and e["variant"] != variant:
            continue
        try:
            cols = list(get_variant(e["variant"]).key_columns)
        except UsageError:       # a variant this version does not know: not ours to recheck
            continue
        text = dict(kv.split("=", 1) for kv in str(e["row_key"]).split(",") if "=" in kv)
        if set(text) != set(cols):
            continue
        key = {c: text[c] for c in cols}
        prefix = {p: str(e[p]) for p in ("gfx", "cu_num") if e.get(p) is not None}
        out.append(Promoted(variant=e["variant"], live="", key=key, prefix=prefix, job_id=e["job_id"] or "?",
                            at=float(e["promoted_at"] or 0), table=e["table_name"] or "",
                            facts={"version": e["aiter_version"], "version_raw": None, "rocm": e["rocm_version"],
                                   "gfx": e["gfx"], "gpu": e["gpu_model"], "cu_num": e["cu_num"]},
                            shape={c: norm_key_value(v) for c, v in key.items()}, origin=e["origin"],
                            job_uid=e["job_uid"]))
    return out


def merged(mine: list[Promoted], team: list[Promoted]) -> list[Promoted]:
    """The workspace's rows and the store's of one node: one per (variant, table, key), the newest promotion
    (the row live now); a store row of a job the workspace holds is that job's own (the workspace's kept),
    a store row newer than the workspace's of its key takes the workspace's live table."""
    from types import SimpleNamespace

    from ..store.keys import job_uid
    mine = [replace(r, job_uid=job_uid(SimpleNamespace(job_id=r.job_id, created=r.created))) for r in mine]

    def k(r: Promoted) -> tuple:
        return (r.variant, r.table or Path(r.live).name, tuple(norm_key_value(v) for v in r.key.values()))
    out = {k(r): r for r in mine}
    for r in team:
        old = out.get(k(r))
        if old is None:
            out[k(r)] = r
        elif old.job_uid != r.job_uid and r.at > old.at:
            out[k(r)] = replace(r, live=old.live)
    return sorted(out.values(), key=lambda r: (r.variant, r.live or r.table, r.ident()[2]))


def containers_in_store(entries: list[dict], node: str) -> list[str]:
    return sorted({e["container"] for e in entries if e["node"] == node and e.get("container")})
