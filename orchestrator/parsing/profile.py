"""A server profile as a shape source on the laptop (issue 38): the helper's reading of the traces
(shapelib/profread.py, streamed where they live) -> per variant the keys AITER looks up (MoE tokens in
the runtime's power-of-two buckets, steps/shape_rules.py), each with ``gpu_us`` and ``time_share`` (0..1 of the
whole GPU time of the traces), the largest share first."""

from __future__ import annotations

from ..errors import UsageError
from ..shapelib import profread


def split_profile_sources(specs: list[str]) -> dict[str, list[str]]:
    """As --log takes paths: node:PATH, local:PATH, anything else in the container."""
    from .sources import split_log_sources
    return split_log_sources(specs)


def raise_profile_error(error: str, hint: str | None) -> None:
    raise UsageError(f"--profile: {error}", hint=hint or "give a torch.profiler trace recorded with record_shapes")


def read_local(paths: list[str], variant: str | None = None) -> dict:
    try:
        return profread.read_profiles(paths, variant)
    except profread.ProfileError as exc:
        raise_profile_error(exc.error, exc.hint)


def _bucket(variant: str, shape: dict) -> dict:
    from ..shapelib.shapefmt import moe_bucket
    if "token" in shape:
        return {**shape, "token": moe_bucket(shape["token"])}
    return dict(shape)


def ranked(answer: dict) -> dict[str, list[dict]]:
    """{variant: [{**key, "gpu_us", "time_share", "calls"}]}: keys as the runtime looks them up (calls that
    land on one bucket add up), the largest share first."""
    total = float(answer.get("total_gpu_us") or 0.0)
    out: dict[str, list[dict]] = {}
    for variant, rows in (answer.get("shapes") or {}).items():
        merged: dict[tuple, dict] = {}
        for r in rows:
            key = _bucket(variant, r["shape"])
            k = tuple(sorted((c, str(v)) for c, v in key.items()))
            m = merged.setdefault(k, {**key, "gpu_us": 0.0, "calls": 0})
            m["gpu_us"] += float(r["gpu_us"])
            m["calls"] += int(r["calls"])
        got = []
        for m in merged.values():
            m["gpu_us"] = round(m["gpu_us"], 3)
            m["time_share"] = round(m["gpu_us"] / total, 6) if total > 0 else 0.0
            got.append(m)
        got.sort(key=lambda s: -s["gpu_us"])
        out[variant] = got
    return out


def add_profile_shapes(profiles: list[str], variant: str | None, found: dict, counts: dict, warnings: list) -> None:
    """--profile: every shape gets its gpu_us and time_share (0 for a logged shape the profile never ran);
    the profile's shapes not logged are added, the largest share first (issue 38)."""
    where = split_profile_sources(profiles)
    if where["node"]:     # a bare path is on this machine here, as shapes' log files are
        raise UsageError(f"tune-remote shapes reads profiles on this machine, not node:{where['node'][0]}",
                         hint="copy it here, or give it to run --profile node:PATH, which reads it on the node")
    answer = read_local(where["local"] + where["container"], variant)
    warnings.extend(answer.get("warnings") or [])
    for v, rows in ranked(answer).items():
        have = found.setdefault(v, [])
        index = {tuple(sorted((c, str(x)) for c, x in s.items())): s for s in have}
        for r in rows:
            key = {c: x for c, x in r.items() if c not in ("gpu_us", "time_share", "calls")}
            s = index.get(tuple(sorted((c, str(x)) for c, x in key.items())))
            if s is None:
                s = dict(key)
                have.append(s)
                counts.setdefault(v, []).append(0)
            s["gpu_us"], s["time_share"] = r["gpu_us"], r["time_share"]
        for s in have:
            s.setdefault("gpu_us", 0.0)
            s.setdefault("time_share", 0.0)
        order = sorted(range(len(have)), key=lambda i: -have[i]["time_share"])
        found[v] = [have[i] for i in order]
        if v in counts:
            c = counts[v] + [0] * (len(have) - len(counts[v]))
            counts[v] = [c[i] for i in order]
