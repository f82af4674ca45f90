"""What a job costs (issue 26), end to end: JIT builds per job counted from the job's own logs (before arm,
tuner, after arm, promotion), against the minimum; process starts from the node's cost log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.parsing.ninjalog import build_lines
from orchestrator.sim import costs
from tests.e2e.test_outcome_e2e import MODULE, _build_live_module
from tests.e2e.test_reliability_e2e import Bed, desc

pytestmark = pytest.mark.e2e


def _builds(bed: Bed) -> dict[str, list[str]]:
    """Modules built per phase, from the job's fetched logs (as the report's JIT section reads them)."""
    r = bed.state()["remote"]
    logs = {"before": r["logs"]["baseline"], "tuner": r["logs"]["tune"], "after": r["logs"]["after"]}
    out = {}
    for phase, node_path in logs.items():
        local = bed.job_dir / "logs" / Path(node_path).name
        out[phase] = [b["module"] for b in build_lines(local.read_text(errors="replace"))]
    engaged = bed.job_dir / "engaged_at_runtime.log"
    out["promotion"] = [b["module"] for b in build_lines(engaged.read_text(errors="replace"))] \
        if engaged.is_file() else []
    return out


def test_builds_per_job_at_the_minimum(node, tmp_path):
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    _build_live_module(bed)                 # the live module is current for the live table
    live_so = bed.node_bytes(f"{root}/{MODULE}")
    cost_log = bed.c.host_path(bed.c.env[costs.LOG_ENV])
    cost_log.write_text("")
    cp = bed.cli(*bed.run_args("--repeats", "2", "--promote", "all"), timeout=400)
    assert cp.returncode == 0, desc(cp)
    builds = _builds(bed)
    print("builds per phase:", builds)
    module = Path(MODULE).stem
    # minimum: nothing before (live module current, copied into the arm's private dir), the tuner's own
    # *_tune module, each module once in the after arm, nothing at promotion (the table promoted is the
    # staging table the after arm built from)
    assert builds["before"] == [], builds
    assert all(m.endswith("_tune") for m in builds["tuner"]) and len(builds["tuner"]) <= 1, builds
    assert builds["after"] == [module], builds
    assert builds["promotion"] == [], builds
    total = sum(map(len, builds.values()))
    assert total <= 2, builds
    st = bed.state()
    promo = st["remote"]["promotion"]
    assert promo["promoted"] and promo["rounds"][0]["reused_modules"] == [f"{root}/{MODULE}"]
    # the live module was replaced by the promoted one (not rebuilt), and rollback restores the old one
    assert bed.node_bytes(f"{root}/{MODULE}") != live_so
    summary = costs.summary([json.loads(x) for x in cost_log.read_text().splitlines() if x.strip()])
    print("cost log:", summary)
    assert summary["builds"] == total
