"""What upstream reviewers ask of a tuned-config PR (aiter#5155, #5500): the exact tuner command, the AITER
commit and version, ROCm version, GPU model and PCI device id (gfx and cu_num cannot tell MI300X from MI325X
or MI350X from MI355X), and upstream's level-0 CSV guards. Its own section of the export summary."""
from __future__ import annotations

import re

from ..remote.shell import quote
from ..state import JobState

GUARDS = ("op_tests/tuning_tests/test_csv_validation.py", "op_tests/tuning_tests/test_config_shape_collision.py")


def aiter_commit(facts: dict) -> str | None:
    """The commit: a develop checkout's ``git rev-parse HEAD`` (discover's ``git_commit``; a checkout on a tag
    describes as just ``v0.1.20``), else the one in a git describe or a local version (``v0.1.29-5-g1a2b3c4``,
    ``0.1.6.dev500+g1a2b3c4``)."""
    if re.fullmatch(r"[0-9a-f]{7,40}", str(facts.get("git_commit") or "")):
        return facts["git_commit"]
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


GUARD_TESTS = tuple(g.rsplit("/", 1)[-1].removesuffix(".py") for g in GUARDS)
GUARD_TIMEOUT_S = 300


def run_guards(ctx, file_name: str, content: str) -> dict:
    """Upstream's level-0 guards on the node's AITER with the exported file added to a temporary copy of its
    configs (nodeside/guards.py): ``{test: {"status", "exit", "tail"}}``, or ``{"error": text}``."""
    from ..errors import TuneRemoteError
    try:
        ans = ctx.call("tuning_guards", {"python": ctx.target.container.python, "root": ctx.job.facts.aiter_root,
                                         "file": file_name, "content": content, "tests": list(GUARD_TESTS),
                                         "timeout_s": GUARD_TIMEOUT_S}, timeout=2 * GUARD_TIMEOUT_S + 60)
    except TuneRemoteError as exc:
        return {"error": str(exc).splitlines()[0]}
    return ans.get("results") or {}


def guards_line(ran: dict | None, job: JobState, file_name: str) -> str | None:
    """The provenance line of guards run at export, or None when they were not run."""
    if not ran:
        return None
    where = ran.get("on") or f"{job.node}/{job.container}"      # a campaign's: the target they ran on
    ran = {k: v for k, v in ran.items() if k != "on"}
    if "error" in ran:
        return (f"could not be run on {where} ({ran['error']}): run `python3 -m unittest "
                + " ".join("op_tests.tuning_tests." + t for t in GUARD_TESTS) + "` with this file added")
    parts = []
    for test, r in ran.items():
        st = r.get("status")
        tail = (r.get("tail") or "").strip().splitlines()
        why = next((ln for ln in reversed(tail) if "Error" in ln or "duplicate" in ln), tail[-1] if tail else "")
        parts.append(f"`{test}` {'**FAILED**' if st == 'failed' else st}" + (f" ({why.strip()[:320]})"
                                                                          if st in ("failed", "timed_out") and why else ""))
    return (f"run by tune-remote on {where} (the node's AITER, a temporary copy of its configs "
            f"with this file added as model_configs/{file_name}): " + "; ".join(parts))


def provenance(job: JobState, guards_ran: dict | None = None, file_name: str = "") -> str:
    """The summary's provenance section (Markdown); ``guards_ran``: ``run_guards``'s answer at export."""
    f = job.facts
    unknown = "unknown (not reported by the node)"
    cmd = tuner_command(job)
    guards = f.get("probes", {}).get("tuning_tests")
    ran = guards_line(guards_ran, job, file_name)
    if ran:
        guard_line = ran
    elif guards:
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
