"""What upstream reviewers ask of a tuned-config PR (aiter#5155, #5500): the exact tuner command, the AITER
commit and version, ROCm version, GPU model and PCI device id (gfx and cu_num cannot tell MI300X from MI325X
or MI350X from MI355X), and upstream's level-0 CSV guards. Its own section of the export summary."""
from __future__ import annotations

import re

from ..remote.shell import quote
from ..state import JobState

GUARDS = ("op_tests/tuning_tests/test_csv_validation.py", "op_tests/tuning_tests/test_config_shape_collision.py")


def aiter_commit(facts: dict) -> str | None:
    """The commit in a git describe or a local version (``v0.1.29-5-g1a2b3c4``, ``0.1.6.dev500+g1a2b3c4``)."""
    for text in (facts.get("git_describe"), facts.get("version_raw")):
        m = re.search(r"(?:^|[-+.])g([0-9a-f]{7,40})\b", str(text or ""))
        if m:
            return m.group(1)
    return None


def tuner_command(job: JobState) -> str | None:
    """The tuner command line(s): with --moe-tuners both, the --mxfp4-flydsl one on a second line."""
    env = job.remote.get("tune_env") or {}
    lines = [" ".join([*(["env", *(f"{k}={quote(v)}" for k, v in env.items())] if env else []), *map(quote, argv)])
             for argv in (job.remote.get("tune_argv"), (job.remote.get("moe_flydsl") or {}).get("tune_argv")) if argv]
    return "\n  ".join(lines) or None


def provenance(job: JobState) -> str:
    """The summary's provenance section (Markdown)."""
    f = job.facts
    unknown = "unknown (not reported by the node)"
    cmd = tuner_command(job)
    guards = f.get("probes", {}).get("tuning_tests")
    if guards:
        guard_line = ("present on the node's AITER, not run by tune-remote: run `python -m pytest "
                      + " ".join(GUARDS) + "` in the AITER checkout with this file added before opening the PR")
    else:
        guard_line = "not in the node's AITER (they ship after v0.1.20): nothing to run there"
    lines = ["", "### Provenance", "",
             f"- Tuner command (as run on {job.node}/{job.container}):" + (f"\n\n  ```\n  {cmd}\n  ```\n" if cmd
                                                                          else " not recorded"),
             f"- AITER: version {f.get('version_raw') or f.get('version') or 'unknown'}, commit "
             f"{aiter_commit(f) or 'unknown (an installed wheel without git metadata)'}",
             f"- ROCm: {f.get('rocm_version') or unknown}",
             f"- GPU: {f.get('gpu_name') or unknown}, PCI device id {f.get('gpu_device_id') or unknown}, "
             f"gfx {f.get('gfx')}, cu_num {f.get('cu_num')}",
             f"- Level-0 guards (test_csv_validation, test_config_shape_collision): {guard_line}"]
    return "\n".join(lines) + "\n"
