"""The runtime's bucket and padding rules: which key AITER really looks a shape up by (MoE tokens in
power-of-two buckets, GEMM M on the padded-M grid), so the shapes tuned are the ones it reads."""

from __future__ import annotations

from ..records import JobRequest
from ..shapelib.shapefmt import (  # noqa: F401  (the runtime's rule, one place)
    DP_SHARED_MIN, MOE_PADDED_MAX, moe_bucket, next_pow2)


def padded_m(m: int) -> int:
    """gemm_common.cu getPaddedM(M, N, K, 0): M <= 256 up to a multiple of 16, <= 1024 of 32, <= 4096 of 64,
    else of 128 (aiter-formats.md §3.1)."""
    m = int(m)
    step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
    return -(-m // step) * step


def dp_shared_contract(req) -> bool:
    """``--tune-arg --token-bucket-contract dp_shared``: the fused-MoE tuner (and tune-remote's shapes) follow the
    DP shared-expert path's buckets, not the runtime's (aiter-december-2026.md, test_fmoe_tuner_token_buckets)."""
    from ..parsing.sources import flag_values
    return "dp_shared" in flag_values(list((req.get("tune_args") if req is not None else None) or []),
                                      "--token-bucket-contract")


def runtime_lookups(shapes: list[dict], family: str, max_m: int | None = None, tuner_max_m: int | None = None,
                    padded: bool = False, dp_shared: bool = False,
                    tiers: tuple | None = None) -> tuple[list[dict], list[str]]:
    """The shapes the runtime will really look up: MoE tokens snapped to AITER's power-of-two buckets
    (a row for token 96 is never read: the runtime asks for 128; review C-09); with ``padded`` (GEMMs whose
    lookup falls back to getPaddedM) M snapped up to the padded-M grid and deduplicated: a row at M=16 is
    what every M in 1..16 without its own row reads, so 1, 2, 4, 8, 16 are one tuning, not five; M/token
    above the server's batch limit (--max-m) dropped; ``tiers``: the node's MoE token tiers (``moe_tiers``), a
    token at or above the first floored to its tier. Returns (shapes, notes). ``padded`` is the caller's
    registry fact (``padded_m_lookup``): any family keyed by M takes it (the MXFP8 BMM's b, m, n, k too)."""
    notes: list[str] = []
    out = shapes
    if padded and family != "moe":
        moved: dict[int, int] = {}
        for s in shapes:
            if padded_m(s["m"]) != int(s["m"]):
                moved[int(s["m"])] = padded_m(s["m"])
        out = dedupe([{**s, "m": padded_m(s["m"])} for s in shapes])
        if moved:
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(moved.items())[:6])
            notes.append(f"{len(moved)} M value(s) snapped to AITER's padded-M grid ({pairs}"
                         f"{', ...' if len(moved) > 6 else ''}): a shape without its own row reads the row at "
                         f"its padded M, so {len(shapes) - len(out)} tuning(s) that the runtime would not look "
                         "up distinctly are dropped")
    if family == "moe":
        snapped: dict[int, int] = {}
        out = []
        for s in shapes:
            t = int(s["token"])
            if moe_bucket(t, dp_shared, tiers) != t:
                snapped[t] = moe_bucket(t, dp_shared, tiers)
                s = {**s, "token": snapped[t]}
            out.append(s)
        out = dedupe(out)
        if snapped:
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(snapped.items())[:6])
            rule = (f"the DP shared-expert path looks up nextPow2(token) from {DP_SHARED_MIN} up (--token-bucket-"
                    "contract dp_shared), so tokens below it are one tuning" if dp_shared else
                    f"AITER looks up nextPow2(token) below {tiers[0] if tiers else MOE_PADDED_MAX}"
                    + (f", above it the tier {'/'.join(map(str, tiers))} at or below the token (fused_moe."
                       "get_padded_M: probed on the node, or the version's where it was not; the report's "
                       "probed/assumed lines say which)" if tiers else ""))
            notes.append(f"{len(snapped)} MoE token value(s) snapped to the runtime's power-of-two buckets "
                         f"({pairs}{', ...' if len(snapped) > 6 else ''}): {rule}, so rows for other tokens are "
                         "never read (ROCm/aiter#5125)")
    if max_m:
        dim = "token" if family == "moe" else "m"
        kept = [s for s in out if int(s[dim]) <= max_m]
        if len(kept) != len(out):
            notes.append(f"--max-m {max_m}: {len(out) - len(kept)} shape(s) with {dim} above the server's "
                         "batch limit dropped")
        out = kept
    if tuner_max_m:
        dim = "token" if family == "moe" else "m"
        kept = [s for s in out if int(s[dim]) <= tuner_max_m]
        if len(kept) != len(out):
            notes.append(f"{len(out) - len(kept)} shape(s) with {dim} above {tuner_max_m} dropped: this variant's "
                         f"tuner takes {dim} <= {tuner_max_m} only (a larger one fails its whole run)")
        out = kept
    return out, notes


def dedupe(shapes: list[dict]) -> list[dict]:
    seen, out = set(), []
    for s in shapes:
        key = tuple(sorted((k, str(v)) for k, v in s.items()))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def moe_tiers(session) -> tuple | None:
    """The node's fused_moe.get_padded_M tiers: probed from its fused_moe.py, else the version's (the profile
    says which, aiter_profiles ``moe_padded_tiers``); None without a session."""
    try:
        return tuple(session.profile.moe_padded_tiers)
    except Exception:   # noqa: BLE001  (no facts settled yet: the rule stays unknown)
        return None


def snap(shape: dict, variant, req: JobRequest, tiers: tuple | None = None) -> dict:
    """A logged shape as the runtime looks it up (the same snapping ``runtime_lookups`` does)."""
    s = {k: v for k, v in shape.items() if k != "_meta"}
    if variant.family == "moe" and "token" in s:
        s["token"] = moe_bucket(s["token"], dp_shared_contract(req), tiers)
    elif req.padded_m and variant.padded_m_lookup and "m" in s:
        s["m"] = padded_m(s["m"])
    return s
