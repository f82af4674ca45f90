"""The simulated AITER runtime's table lookups: which M / token values a tuned-CSV lookup tries.

Stdlib only, Python 3.8+: copied into the node beside perf_model.py (``aiter/_sim/lookups.py``).
"""


def padded_m_candidates(m: int, n: int, k: int) -> list:
    """M values the GEMM runtime lookup tries in order: exact, getPaddedM(gl=0), getPaddedM(gl=1)."""
    def pad0(x):
        step = 16 if x <= 256 else 32 if x <= 1024 else 64 if x <= 4096 else 128
        return ((x + step - 1) // step) * step

    def pad1(x):
        if x > 8192 and n > 4096:
            return 8192
        p = 1
        while p < x:
            p <<= 1
        return p

    return [m, pad0(m), pad1(m)]


MOE_TIERS = {"legacy": (1024, 2048, 16384), "current": (32768, 131072)}   # the sim tree's get_padded_M per profile


def moe_padded_token(token: int, profile: str = "current") -> int:
    """fused_moe get_padded_M: nextPow2 below the first tier, above it the largest tier at or below the token:
    32768 or 131072 (current, newest, head: ROCm/aiter 446260d1, v0.1.14+), 1024 / 2048 / 16384 (legacy: the
    v0.1.11 release it says it is; v0.1.12 0d38e26f had 32768 alone)."""
    tiers = MOE_TIERS["legacy" if profile == "legacy" else "current"]
    if token < tiers[0]:
        p = 1
        while p < token:
            p <<= 1
        return p
    return max(t for t in tiers if t <= token)
