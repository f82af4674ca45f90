"""run --profile on a test-bed node (issue 38): the trace lives in the container, the node helper's profile op
streams it there, and a budgeted job tunes the shape with the largest share of GPU time, not the most logged."""

from __future__ import annotations

import pytest

from tests.e2e.test_reliability_e2e import Bed, desc, err_lines
from tests.unit.test_profile_rank import _trace

pytestmark = pytest.mark.e2e

TRACE = "/opt/aiter-sim/logs/profile_trace.json"


def test_budgeted_run_on_a_container_profile_tunes_the_largest_time_share(node, tmp_path):
    bed = Bed(node, tmp_path)
    host = bed.c.host_path(TRACE)
    _trace(host, [(3, 4096, 512, 5000.0), (1, 1536, 7168, 10.0)])
    cp = bed.cli(*bed.run_args("--profile", TRACE, "--budget", "1s", "--repeats", "1", "--promote", "none"),
                 timeout=400)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    assert st["shapes"][0] == {"m": 3, "n": 4096, "k": 512}
    info = st["steps"]["shapes"]["info"]
    assert info["time_share"][0] > 0.8 and "of all GPU time" in info["time_line"]
    import csv
    rows = list(csv.DictReader((bed.job_dir / "comparison.csv").open()))
    assert list(rows[0])[-1] == "time_share"                          # a new last column; the others as before
    share = {(r["m"], r["n"], r["k"]): float(r["time_share"]) for r in rows}
    assert share[("3", "4096", "512")] == pytest.approx(info["time_share"][0], abs=1e-6), rows
    summary = st["steps"]["compare"]["info"]["summary"]
    assert summary["profiled_time_share"] == pytest.approx(info["time_share"][0], abs=1e-5)
    assert "Expected end-to-end gain: these shapes are" in (bed.job_dir / "report.md").read_text()


def test_a_container_profile_without_record_shapes_is_one_line_exit_2(node, tmp_path):
    bed = Bed(node, tmp_path, job_id="job2")
    host = bed.c.host_path(TRACE)
    host.write_text('{"record_shapes": 0, "traceEvents": [{"ph": "X", "cat": "cpu_op", '
                    '"name": "aiter::gemm_a8w8_blockscale", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {}}]}')
    cp = bed.cli(*bed.run_args("--profile", TRACE, "--repeats", "1"), timeout=200)
    assert cp.returncode == 2, desc(cp)
    errors = err_lines(cp)
    assert len(errors) == 1 and "record_shapes" in errors[0]
    assert "tune" not in (bed.state().get("steps") or {}).get("remote", {}).get("info", {}).get("sub", {})
