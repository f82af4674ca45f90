"""Reading the targets' logs (one ``log_tail`` round trip per target: new bytes only, mined at the node) and
choosing what to tune: the misses counted over every cycle, ranked by count; with ``watch --profile`` (the
servers' profiler traces, a directory they write into periodically: issue 38) read in the same round trip,
ranked by each shape's share of the profiled GPU time first."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..shapelib.shaperules import logs_once, miss_weights
from ..variants import ALIASES, VARIANTS
from .store import shape_key


@dataclass
class WatchTarget:
    """One container a watch reads: ``open()`` gives its ``context.Target`` (SSH + docker exec, or the demo's)."""
    node: str
    container: str
    open: Callable[[], object]
    demo_dir: str | None = None

    @property
    def label(self) -> str:
        return f"{self.node}/{self.container}"


@dataclass
class TargetRead:
    """What one target's round trip answered."""
    label: str
    logs: dict = field(default_factory=dict)        # path -> {"inode", "offset", "size"} for the next cycle
    shapes: dict = field(default_factory=dict)      # variant -> [(shape, count)]
    facts: dict = field(default_factory=dict)
    bytes: int = 0
    rotated: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    round_trips: int = 0
    error: str | None = None
    shares: dict = field(default_factory=dict)      # shape key -> share of the profiled GPU time (--profile)
    profile_error: str | None = None


def read_target(target, label: str, paths: list[str], previous: dict, variant: str | None,
                timeout: float = 600, profiles: list | None = None) -> TargetRead:
    """One ``log_tail`` call: each log from where ``previous`` (path -> inode/offset) says it was read to."""
    specs = [{"path": p, **{k: v for k, v in (previous.get(p) or {}).items() if k in ("inode", "offset")},
              **_within(p, previous)} for p in paths]
    before = target.round_trips()
    tail = {"logs": specs, "variant": variant, "facts": True}
    prof = None
    if profiles:     # the profile op rides in the same round trip; its failure is its answer, not the cycle's
        ans, prof = target.helper.call_batch([("log_tail", tail), ("profile", {"profiles": list(profiles),
                                                                               "variant": variant})],
                                             timeout=timeout, soft_last=True)
    else:
        ans = target.helper.call("log_tail", tail, timeout=timeout)
    out = TargetRead(label=label, facts=ans.get("facts") or {}, bytes=int(ans.get("bytes") or 0))
    if prof is not None:
        _shares(out, prof)
    for entry in ans.get("logs") or []:
        if entry.get("missing"):
            out.missing.append(entry["path"])
            if entry["path"] in previous:       # keep where it was: a log gone for a moment is not re-read
                out.logs[entry["path"]] = previous[entry["path"]]
            continue
        out.logs[entry["path"]] = {"inode": entry["inode"], "offset": entry["offset"], "size": entry["size"]}
        if entry.get("rotated"):
            out.rotated.append(entry["path"])
    for v, shapes in (ans.get("shapes") or {}).items():   # issue 36: processes, not lines, where AITER logs once
        once = logs_once(out.facts, getattr(VARIANTS.get(ALIASES.get(v, v)), "miss_source", None))
        out.shapes[v] = list(zip(shapes, miss_weights(ans, v, once)))
    out.round_trips = target.round_trips() - before
    return out


def _within(path: str, previous: dict) -> dict:
    """Where the files of a watched capture directory (AITER_TUNE_GEMM_DIR, issue 36) were read to: the node
    answers each file as its own log, kept by its path."""
    inside = {p: {k: v for k, v in e.items() if k in ("inode", "offset")} for p, e in previous.items()
              if p.startswith(path.rstrip("/") + "/")}
    return {"within": inside} if inside else {}


def _shares(out: TargetRead, prof: dict) -> None:
    """The profile op's answer -> each shape key's share of the whole profiled GPU time, or why not."""
    if prof.get("ok") is False or prof.get("profile_error"):
        out.profile_error = prof.get("profile_error") or prof.get("error") or "the profile op failed"
        return
    from ..parsing.profile import ranked
    for v, rows in ranked(prof).items():
        for r in rows:
            shape = {k: x for k, x in r.items() if k not in ("gpu_us", "time_share", "calls")}
            out.shares[shape_key(v, shape)] = float(r["time_share"])


def add_seen(seen: dict, read: TargetRead, cycle: int, variants: list[str] | None) -> list[dict]:
    """Adds the read's misses to ``seen`` (shape key -> {"variant", "shape", "count", "first"}); returns
    the ``seen`` ledger entries of this read (``variant``, ``shape``, ``count`` this cycle, ``total``)."""
    out = []
    for v, pairs in read.shapes.items():
        if variants is not None and v not in variants:
            continue
        for shape, n in pairs:
            key = shape_key(v, shape)
            ent = seen.setdefault(key, {"variant": v, "shape": shape, "count": 0, "first": cycle,
                                        "targets": []})
            ent["count"] += n
            ent["last"] = cycle
            if read.label not in ent["targets"]:
                ent["targets"].append(read.label)
            out.append({"variant": v, "shape": shape, "count": n, "total": ent["count"], "target": read.label})
    return out


def candidates(seen: dict, tried: set, busy: set, min_misses: int, retune_now: set | None = None,
               shares: dict | None = None) -> dict:
    """variant -> [seen entries] to tune, most-missed first (with ``shares``, shape key -> share of the profiled
    GPU time: the largest share first, then the most missed): seen at least ``min_misses`` times in all,
    not tuned by an earlier job of this watch (``tried``; with --retune, the ones seen again this cycle,
    ``retune_now``, are tuned again), not in a job still running (``busy``)."""
    order = {k: i for i, k in enumerate(seen)}
    shares = shares or {}
    picked: dict[str, list] = {}
    for key, ent in sorted(seen.items(), key=lambda kv: (-shares.get(kv[0], 0.0), -kv[1]["count"],
                                                         kv[1].get("first", 0), order[kv[0]])):
        if ent["count"] < min_misses or key in busy:
            continue
        if key in tried and not (retune_now and key in retune_now):
            continue
        picked.setdefault(ent["variant"], []).append(ent)
    return picked
