"""Engaged at runtime (issue 37): one fresh sample is corroboration judged against the noise, not a coin flip
between two medians."""

from orchestrator.steps.engage import time_says_stale


def test_a_hit_line_wins_over_a_sample_inside_the_noise():
    # before 100, after 97 (a 3 % gain), noise 1 %: a fresh 99 is nearer before, yet inside 3.75 sd of after
    assert not time_says_stale(99.0, 100.0, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, 100.0, 97.0, 1.0, hit=False)          # no lookup line: the old rule


def test_a_sample_far_beyond_the_noise_still_says_stale():
    # a 20 % gain: a fresh time at the before level is 25 % off the after median, far past 3.75 x 1 %
    assert time_says_stale(100.2, 100.0, 80.0, 1.0, hit=True)
    assert not time_says_stale(80.5, 100.0, 80.0, 1.0, hit=True)


def test_missing_figures_are_never_engaged_by_time():
    assert time_says_stale(None, 100.0, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, None, 97.0, 1.0, hit=True)
    assert time_says_stale(99.0, 100.0, 97.0, None, hit=True)           # no noise: the old rule (nearer before)
    assert time_says_stale(99.0, 100.0, 97.0, float("nan"), hit=True)


def test_a_hit_naming_another_kernel_is_not_the_promoted_row():
    """Issue 37: engagement is what AITER says it looked up: a hit line whose kernel is not the promoted
    row's came from another file holding the key (read before the live table), whatever the time says."""
    from orchestrator.steps.engage import not_engaged_reason
    hit = {"hit": True, "padded_m": None, "kernel": "a8w8_blockscale_1x128x128_256x16x64x256_v1"}
    args = dict(skipped=False, now=97.0, h=hit, lk=(64, 7168, 2048), own=None, loaded=set(), near_after=True)
    assert not_engaged_reason(**args, promoted_kernel="a8w8_blockscale_1x128x128_256x16x64x256_v1") == ""
    why = not_engaged_reason(**args, promoted_kernel="a8w8_blockscale_1x128x128_256x32x64x256_v3")
    assert why.startswith("the lookup found another row (kernel a8w8_blockscale_1x128x128_256x16x64x256_v1)")
    assert not_engaged_reason(**args, promoted_kernel=None) == ""          # the row's kernel unknown: no claim
    assert not_engaged_reason(**{**args, "near_after": False}, promoted_kernel=hit["kernel"]).startswith(
        "time as before promotion")
    padded = {**hit, "padded_m": 128}
    assert "padded-M bucket M=128" in not_engaged_reason(**{**args, "h": padded}, promoted_kernel="other")


def test_mx_asm_lookup_lines_are_read_as_hits_and_misses():
    """The MX asm GEMMs print their own lookup lines (A6W4/A4W6 via gemm_op_mixed_mxfp.py, A16W8 MXFP8's
    bucket form), without the commas of the CK GEMM lines: the engaged check must still see them."""
    from orchestrator.steps.engage import lookup_hits, not_engaged_reason
    text = "\n".join((
        "[aiter] A6W4 shape M:512 N:4096 K:4096 matched exact config M:512 N:4096 K:4096 in /s/t.csv: kA",
        "[aiter] A4W6 shape M:512 N:4000 K:4000 matched padded config M:512 N:4096 K:4096 in /s/t.csv: kB",
        "[aiter] A4W6 shape M:16 N:2048 K:7168 has no tuned config in /s/t.csv; using the safe default kernel",
        "[aiter] A16W8 MXFP8 shape M:3 N:32320 K:5120 uses the M:4 entry of /s/t.csv: kC splitK 4",
    ))
    hits = lookup_hits(text)
    assert hits[(512, 4096, 4096)]["hit"] and hits[(512, 4096, 4096)]["kernel"] == "kA"
    assert hits[(16, 2048, 7168)]["hit"] is False
    args = dict(skipped=False, now=97.0, lk=None, own=None, loaded=set(), near_after=True, promoted_kernel=None)
    assert not_engaged_reason(h=hits[(512, 4096, 4096)], **{**args, "lk": (512, 4096, 4096)}) == ""
    assert not_engaged_reason(h=hits[(512, 4000, 4000)], **{**args, "lk": (512, 4000, 4000)}) == (
        "served through the padded row M:512 N:4096 K:4096, not its own row")
    assert not_engaged_reason(h=hits[(16, 2048, 7168)], **{**args, "lk": (16, 2048, 7168)}).startswith(
        "no tuned row matched at runtime")
    assert "padded-M bucket M=4" in not_engaged_reason(h=hits[(3, 32320, 5120)], **{**args, "lk": (3, 32320, 5120)})
