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
CKTILE = "aiter/jit/module_gemm_a8w8_blockscale_cktile.so"


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
    # the table feeds two modules and this job's winners need both: the ck rows and the misses are served
    # by the main one, the cktile rows by module_gemm_a8w8_blockscale_cktile; each built once
    assert builds["after"] == [module, f"{module}_cktile"], builds
    assert builds["promotion"] == [], builds
    total = sum(map(len, builds.values()))
    assert total <= 3, builds
    st = bed.state()
    promo = st["remote"]["promotion"]
    assert promo["promoted"] and promo["rounds"][0]["reused_modules"] == [f"{root}/{MODULE}",
                                                                           f"{root}/{CKTILE}"]
    # the live module was replaced by the promoted one (not rebuilt), and rollback restores the old one
    assert bed.node_bytes(f"{root}/{MODULE}") != live_so
    summary = costs.summary([json.loads(x) for x in cost_log.read_text().splitlines() if x.strip()])
    print("cost log:", summary)
    assert summary["builds"] == total



def test_a_cktile_winner_is_promoted_through_its_own_module_and_engaged(node, tmp_path):
    """One tuned CSV feeds several modules: a blockscale row whose libtype is cktile is compiled into, and
    served through, module_gemm_a8w8_blockscale_cktile. The live install holds that module built from the
    old table (a server served the table's one cktile row); promotion must move it aside too (else the
    fresh process keeps the stale module and the default kernel), the after arm's build of it is reused,
    the engaged check proves the cktile rows hit through it, and rollback restores it byte for byte."""
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    _build_live_module(bed)
    bed.c.sh(f"cd {root} && python3 op_tests/test_gemm_a8w8_blockscale.py -m 16384 -nk 512,7168 > /dev/null 2>&1")
    old_cktile = bed.node_bytes(f"{root}/{CKTILE}")     # built from the live table's one cktile row
    # the simulated tuner's winners: M=64 on (7168,2048) and (1536,7168) cktile, M=16 on (1536,7168) ck
    f = tmp_path / "shapes.csv"
    f.write_text("M,N,K\n64,7168,2048\n64,1536,7168\n16,1536,7168\n")
    cp = bed.cli("run", "--node", bed.node.alias, "--container", bed.c.name, "--variant", "a8w8_blockscale",
                 "--shapes-csv", f, "--repeats", "1", "--promote", "all", "--yes", "--job-id", bed.job_id,
                 timeout=400)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    promo = st["remote"]["promotion"]
    assert f"{root}/{CKTILE}" in promo["modules"], promo["modules"]        # moved aside, not left stale
    assert f"{root}/{CKTILE}" in promo["rounds"][0]["reused_modules"], promo["rounds"][0]
    builds = _builds(bed)
    assert sorted(builds["after"]) == [Path(MODULE).stem, Path(CKTILE).stem], builds
    assert builds["before"] == [] and builds["promotion"] == [], builds
    eng = st["steps"]["promote"]["info"]["engaged"]
    by_m = {(s["key"]["m"], s["key"]["n"]): s for s in eng["shapes"]}
    assert eng["engaged"] == eng["total"] == 3, eng
    assert by_m[(64, 7168)]["module"] == by_m[(64, 1536)]["module"] == Path(CKTILE).stem, eng
    assert by_m[(16, 1536)]["module"] == Path(MODULE).stem, eng
    assert f"[{Path(CKTILE).stem}]" in (bed.job_dir / "engaged_at_runtime.log").read_text()
    cp = bed.cli("rollback", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    assert bed.node_bytes(f"{root}/{CKTILE}") == old_cktile
