"""AITER versions as data, decided by what the node shows (capabilities) with the version as fallback.

``profile_for(version)`` is the version-only answer; ``profile_from_facts(facts)`` refines it with
the probes the discover op gathered (tuned-CSV header, tuner ``--help`` flags, op_test source) and
records, per behaviour, whether it was *probed* on the node or *assumed* from the version.

Facts: ../shared/reference/aiter-formats.md (table at the top, §1.1, §1.3, §2.2, §3.2, §3.3) and
../shared/reference/aiter-after-v0.1.20.md (§1.2 releases, §2.1 #4410/#5841, §2.2 #5007/#4620, §5).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Tuple

from .errors import UsageError

Version = Tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """'0.1.20.post1+g1234' / 'v0.1.11-5-gabc' -> (0, 1, 20). None when no version is recognisable."""
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def is_dev_build(text: str | None) -> bool:
    """A setuptools-scm build from a (shallow) clone: '0.1.6.dev500+g1a2b', '0.1.dev1+gabc'.

    Its number says little: a shallow clone without tags counts from an old or absent tag, so the
    version is only a lower bound and capabilities must decide."""
    return bool(text) and re.search(r"\.dev\d+", str(text)) is not None


def format_version(v: Version | None) -> str:
    return "unknown" if v is None else ".".join(str(p) for p in v)


OLDEST_SUPPORTED: Version = (0, 1, 9)
CURRENT_FROM: Version = (0, 1, 13)  # `gfx` column in GEMM CSVs, MoE tuple starts with 'gfx…'
NEWEST_FROM: Version = (0, 1, 21)   # first release after the v0.1.20 snapshot (after-v0.1.20 §1.2)


@dataclass(frozen=True)
class AiterProfile:
    """What a given AITER version does differently, as far as the code branches on it. Built by
    ``profile_for``/``profile_from_facts``; ``probed``/``assumed`` record, for the report, which behaviours
    the node showed and which the version number stood for (the gfx column, the MoE tuple form, ... are
    read from the files themselves where they matter, not from here)."""

    name: str                      # "newest" (v0.1.21+), "current" (v0.1.13+), "legacy" (v0.1.9-v0.1.12)
    version: Version
    moe_blockscale_bypass: str     # "none" | "small" (token*topk <= 128) | "all" (v0.1.10)
    tuner_flags: frozenset         # optional common tuner flags this version accepts
    merge_rejects_duplicates: bool  # config merge raises on duplicate keys across files (v0.1.12+, §5.1)
    # the merge's duplicate-key rule (issue 36): "raise" (v0.1.12 on, every stored upstream core.py: rewrites the
    # sources and raises), "resolve" (the unmerged fix of aiter#5184, test_config_merge_fallback.py: the merged
    # copy keeps the lowest-us row, the first source on ties; sources untouched), "keep" (both rows kept);
    # probed by running the node's own merge (nodeside/mergeprobe.py), the version only when that cannot tell
    merge_rule: str = "raise"
    moe_quant_max: int = 7         # highest op_tests/test_moe_2stage.py `-q` (l_quant 8 a16wi4, 9 MXFP8 at HEAD)
    dev_build: bool = False
    # fused-MoE (issue 36, helper moe): what the tuner's `us` means (nodeside/probe.py moe_objective) and the
    # runtime's token tiers (fused_moe.get_padded_M: nextPow2 below the first, floor to a tier above)
    moe_objective: str = "stage_sum+quant"
    moe_padded_tiers: Tuple[int, ...] = (32768, 131072)
    probed: Tuple[str, ...] = ()   # behaviours read from the node
    assumed: Tuple[str, ...] = ()  # behaviours taken from the version number

    def has_flag(self, flag: str) -> bool:
        return flag in self.tuner_flags

    @property
    def merge_resolves_duplicates(self) -> bool:
        """A duplicate key across the merged tables is no fault here: the merge keeps the lowest-us row."""
        return self.merge_rule == "resolve"


_FLAG_SINCE: dict = {
    "--warmup": (0, 1, 10),
    "--iters": (0, 1, 10),
    "--timeout": (0, 1, 10),
    "--shape_grouped": (0, 1, 13),
    "--run_config": (0, 1, 13),
    "--compare": (0, 1, 13),
}


def _name(v: Version) -> str:
    if v >= NEWEST_FROM:
        return "newest"
    return "current" if v >= CURRENT_FROM else "legacy"


def profile_for(version: Version | None, *, dev_build: bool = False) -> AiterProfile:
    """Pick the behaviour profile for an installed AITER version (None = assume the newest known).

    A dev build is never refused for its number: its number is only a lower bound."""
    if version is not None and version < OLDEST_SUPPORTED and not dev_build:
        raise UsageError(
            f"AITER {format_version(version)} is older than {format_version(OLDEST_SUPPORTED)}, "
            "which tune-remote does not support",
            hint="upgrade aiter in the container (pip name amd-aiter) or tune by hand",
        )
    v = (9999, 0, 0) if version is None or dev_build else version
    if (0, 1, 9) <= v < (0, 1, 10) or (0, 1, 11) <= v < (0, 1, 13):
        bypass = "small"
    elif (0, 1, 10) <= v < (0, 1, 11):
        bypass = "all"
    else:
        bypass = "none"
    return AiterProfile(
        name=_name(v),
        version=v,
        moe_blockscale_bypass=bypass,
        tuner_flags=frozenset(f for f, since in _FLAG_SINCE.items() if v >= since),
        merge_rejects_duplicates=v >= (0, 1, 12),
        merge_rule="raise" if v >= (0, 1, 12) else "keep",
        moe_quant_max=9 if v >= NEWEST_FROM else 7,
        dev_build=dev_build,
        moe_objective=moe_objective_for(v),
        moe_padded_tiers=moe_tiers_for(v),
    )


def moe_objective_for(v: Version) -> str:
    """The version's fused-MoE tuner objective (ROCm/aiter deefb11e, v0.1.12: non-fused stage-1 kernels of
    per_1x32 rows charged the quant+sort launch; older: us1 + us2 as run). Only a fallback: the probe reads it."""
    return "stage_sum+quant" if v >= (0, 1, 12) else "stage_sum"


def moe_tiers_for(v: Version) -> Tuple[int, ...]:
    """fused_moe.get_padded_M by version (v0.1.14 446260d1: tiers 32768/131072; v0.1.12 0d38e26f: 32768;
    older: 1024/2048/16384). Only a fallback: the probe reads the node's fused_moe.py."""
    if v >= (0, 1, 14):
        return (32768, 131072)
    return (32768,) if v >= (0, 1, 12) else (1024, 2048, 16384)


# ------------------------------------------------------------------------------------ capabilities

HELP_FLAG_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def help_flags(text: str) -> frozenset:
    """Every option string in an argparse --help (or in `add_argument("-x", "--y"` source)."""
    return frozenset(HELP_FLAG_RE.findall(text or ""))


def profile_from_facts(facts: dict) -> AiterProfile:
    """The profile for a discovered node: version fallback, refined by the node's probes.

    ``facts["probes"]`` (from the discover op, all optional): ``tuned_header`` (list of column names
    of the variant's tuned CSV), ``tuner_help`` (the tune script's --help text), ``op_test_src_flags``
    (option strings in the op_test source), ``op_test_markdown`` (the op_test prints to_markdown
    tables), ``tuning_tests`` (op_tests/tuning_tests/test_csv_validation.py exists), ``moe_tuple_gfx``
    (the MoE tuple in the server log starts with 'gfx…'), ``merge_rule`` (what the node's config merge does
    with a duplicate key: ``raise``/``resolve``/``keep``)."""
    raw = facts.get("version_raw") or facts.get("version")
    dev = is_dev_build(raw)
    base = profile_for(parse_version(raw), dev_build=dev)
    probes = facts.get("probes") or {}
    changes: dict = {}
    probed: list = []
    if probes.get("tuned_header"):
        probed.append("gfx column (tuned CSV header)")
    help_text = probes.get("tuner_help")
    if help_text:
        flags = help_flags(help_text)
        changes["tuner_flags"] = frozenset(f for f in _FLAG_SINCE if f in flags)
        probed.append("tuner flags (tune script --help)")
    if "op_test_markdown" in probes and probes["op_test_markdown"] is not None:
        probed.append("benchmark output form (op_test source)")
    if probes.get("tuning_tests") is not None:
        probed.append("tuning-test CSV checks (op_tests/tuning_tests)")
    if probes.get("moe_tuple_gfx") is not None:
        probed.append("MoE tuple form (server log)")
    if probes.get("moe_gelutanh") is not None:
        probed.append("GeluTanh activation (tuned fmoe table / MoE test)")
    if probes.get("moe_quant_count"):
        changes["moe_quant_max"] = int(probes["moe_quant_count"]) - 1
        probed.append("MoE quant types (op_test l_quant)")
    # issue 36 (AITER's own shape capture, #5268): how often a miss is logged, read in the runtime's source
    if isinstance(probes.get("miss_once"), dict):     # per runtime file (nodeside/probe.miss_log_facts)
        for rel, once in sorted(probes["miss_once"].items()):
            probed.append("miss lines %s (%s)" % ("once per process" if once else "per lookup",
                                                  rel.rsplit("/", 1)[-1]))
    elif probes.get("miss_log_once") is not None:
        probed.append("miss lines once per process (gemm_op_a8w8.py)" if probes["miss_log_once"]
                      else "miss lines per lookup (gemm_op_a8w8.py)")
    # --- the duplicate-key merge rule (issue 36; nodeside/mergeprobe.py runs the node's own merge) ---
    rule = probes.get("merge_rule")
    if rule in ("raise", "resolve", "keep"):
        changes.update(merge_rule=rule, merge_rejects_duplicates=rule == "raise")
        probed.append("duplicate-key merge rule (aiter/jit/core.py's merge run on two tables: "
                      + {"raise": "a duplicate key rewrites the sources and raises",
                         "resolve": "the lowest-us row wins in the merged copy, sources untouched",
                         "keep": "both rows kept"}[rule] + ")")
    # --- end of the merge rule ---
    # ---- fused-MoE facts (issue 36, helper moe)
    if probes.get("moe_objective"):
        changes["moe_objective"] = str(probes["moe_objective"])
        probed.append("MoE tuner objective (tuner source)")
    if probes.get("moe_padded_tiers"):
        changes["moe_padded_tiers"] = tuple(int(t) for t in probes["moe_padded_tiers"])
        probed.append("MoE token lookup (fused_moe.py get_padded_M)")
    all_behaviours = ("gfx column", "tuner flags", "benchmark output form", "tuning-test CSV checks",
                      "MoE tuple form", "GeluTanh activation", "MoE quant types", "miss lines",
                      "duplicate-key merge rule", "MoE tuner objective", "MoE token lookup")
    assumed = [b for b in all_behaviours if not any(p.startswith(b) for p in probed)]
    assumed += ["--timeout default and counting", "MoE block-scale bypass rule", "partial-result exit code"]
    basis = ("dev build %s: version number is only a lower bound" % raw) if dev else \
        ("version %s" % (format_version(parse_version(raw)) if parse_version(raw) else "unknown"))
    assumed = [f"{a} (from {basis})" for a in assumed]
    return dataclasses.replace(base, probed=tuple(probed), assumed=tuple(assumed), **changes)


def settle_profile(facts: dict) -> AiterProfile:
    """The one place the profile goes into a job's facts: its name and what was probed or assumed (the
    report lists them). Called again whenever the probes change; ``Ctx.profile`` reuses the answer until then."""
    profile = profile_from_facts(facts)
    facts["profile"] = profile.name
    facts["probed"], facts["assumed"] = list(profile.probed), list(profile.assumed)
    return profile

