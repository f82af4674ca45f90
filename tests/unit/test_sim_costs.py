"""The simulated node's cost model (sim/costs.py): real ratios, one scale factor, charges per process/build."""

import csv
import json

import pytest

from orchestrator.sim import SimSpec, costs, install

from .test_sim_common import py


def test_real_ratios():
    assert costs.PROCESS_START_S == pytest.approx(4.2)          # whole one-shape benchmark process
    assert costs.IMPORT_TORCH_S == pytest.approx(3.4)
    assert costs.build_s(27) == pytest.approx(57.9, rel=0.05)   # 27-instance cold ninja build
    assert 8 <= costs.build_s(0) <= 20                          # module_aiter_enum-like
    assert costs.build_s(54) > costs.build_s(27) > costs.build_s(1)


@pytest.mark.parametrize("raw,want", [(None, 0.0), ("", 0.0), ("0.5", 0.5), ("x", 0.0), ("-1", 0.0)])
def test_scale(raw, want):
    env = {} if raw is None else {costs.SCALE_ENV: raw}
    assert costs.scale(env) == want


def test_charge_sleeps_scaled_and_logs(monkeypatch, tmp_path):
    slept = []
    monkeypatch.setattr(costs.time, "sleep", slept.append)
    log = tmp_path / "c.jsonl"
    env = {costs.SCALE_ENV: "0.01", costs.LOG_ENV: str(log)}
    assert costs.charge(57.5, "build module_x", env) == pytest.approx(0.575)
    assert costs.charge(3.4, "import torch", {}) == 0.0           # unset: free, nothing slept
    assert slept == [pytest.approx(0.575)]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert costs.summary(lines) == {"builds": 1, "process_starts": 0, "modules": ["module_x"], "real_s": 57.5}


def test_node_charges_process_start_and_build_per_instance(tmp_path):
    inst = install(tmp_path / "n", SimSpec(cost_scale=0.0001))
    assert inst.env[costs.SCALE_ENV] == "0.0001"
    log = inst.host_path(inst.env[costs.LOG_ENV])
    jit = tmp_path / "jit"
    argv = ["op_tests/test_gemm_a8w8_blockscale.py", "-m", "16", "-nk", "1536,7168", "--ck_preshuffle", "False"]
    for _ in range(2):   # the second process finds the module built: no second build
        r = py(inst, *argv, env={"AITER_JIT_DIR": str(jit)})
        assert r.returncode == 0, r.stderr
    got = [json.loads(x) for x in open(log).read().splitlines()]
    s = costs.summary(got)
    assert s["process_starts"] == 2 and s["builds"] == 1
    assert [x["what"] for x in got].count("import aiter") == 2
    build = next(x for x in got if x["what"].startswith("build "))
    with open(f"{inst.host_path(inst.package_dir)}/configs/a8w8_blockscale_tuned_gemm.csv") as fh:
        rows = list(csv.DictReader(fh))
    # the main module compiles the table's ck rows (its cktile rows go into the _cktile sibling)
    kernels = {r["kernelName"] for r in rows if r.get("libtype", "ck") == "ck"}
    assert len(kernels) > 1 and build["what"] == "build module_gemm_a8w8_blockscale"
    assert build["real_s"] == pytest.approx(costs.build_s(len(kernels)))   # in proportion to its instances
