"""The README's "Your first real job", command by command, against a test-bed node (issue 27): the fenced
`sh` blocks of that section are parsed, the README's node / container / log are replaced by the test bed's,
`JOB` by the job id `run` printed, and each command must exit 0 and leave what the README says it leaves.
A README edit that the tool does not follow (or the reverse) fails here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.e2e.test_reliability_e2e import LOG, Bed, desc

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"
LIVE = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"


def readme_walk() -> list[list[str]]:
    """The commands of the README's "Your first real job" section, as argv lists (continuations joined)."""
    text = README.read_text()
    m = re.search(r"^## Your first real job\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README has no '## Your first real job' section"
    blocks = re.findall(r"^```sh\n(.*?)^```", m.group(1), re.S | re.M)
    cmds = [shlex.split(b.replace("\\\n", " ")) for b in blocks]
    assert cmds and all(c[0] == "tune-remote" for c in cmds), cmds
    return [c[1:] for c in cmds]


def test_readme_walk_parses_the_documented_steps():
    steps = [c[0] + (" --dry-run" if "--dry-run" in c else "") for c in readme_walk()]
    assert steps == ["run --dry-run", "run", "status", "promote", "export", "rollback"], steps


def test_readme_first_real_job_walk(node, tmp_path):
    bed = Bed(node, tmp_path)
    subst = {"mi355-07": node.alias, "aiter-dev": bed.c.name, "/workspace/logs/vllm_server.log": LOG}
    job = None
    live0 = bed.node_bytes(f"{bed.c.aiter_root}/{LIVE}")
    for argv in readme_walk():
        args = [subst.get(a, a) for a in argv]
        if "JOB" in args:
            assert job, f"{argv}: the README uses JOB before a run named it"
            args = [job if a == "JOB" else a for a in args]
        cp = bed.cli(*args, timeout=600)
        assert cp.returncode == 0, (argv, desc(cp))
        out = cp.stdout.decode()
        if args[0] == "run" and "--dry-run" in args:
            assert not bed.ws.exists() or not [p for p in bed.ws.iterdir() if not p.name.startswith(".")]
            assert bed.node_bytes(f"{bed.c.aiter_root}/{LIVE}") == live0
        elif args[0] == "run":
            job = json.loads(out.strip().splitlines()[-1])["job_id"]
            jd = bed.ws / job
            for name in ("report.md", "report.html", "comparison.csv"):   # step 4: where results land
                assert (jd / name).is_file(), name
            assert bed.node_bytes(f"{bed.c.aiter_root}/{LIVE}") == live0   # --promote none
        elif args[0] == "status":
            assert job in out + cp.stderr.decode()
        elif args[0] == "promote":
            assert json.loads(out)["promoted"] > 0, out
            assert bed.node_bytes(f"{bed.c.aiter_root}/{LIVE}") != live0   # a promoted row
        elif args[0] == "export":
            res = json.loads(out)
            assert res["rows"] > 0 and Path(res["csv"]).parent == bed.ws / job / "export", res
            assert Path(res["summary"]).is_file() and Path(res["csv"]).name.startswith("dsv3_")
        elif args[0] == "rollback":
            assert bed.node_bytes(f"{bed.c.aiter_root}/{LIVE}") == live0
    assert job
