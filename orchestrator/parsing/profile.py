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
    from ..shapelib.shapefmt import MOE_PADDED_MAX, next_pow2
    if "token" in shape and int(shape["token"]) < MOE_PADDED_MAX:
        return {**shape, "token": next_pow2(int(shape["token"]))}
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
