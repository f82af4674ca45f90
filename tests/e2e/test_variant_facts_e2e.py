"""A variant is data (issue 35): a fake variant that follows AITER's common tuner CLI, registered in the test by
its entry alone, runs end to end on the test bed (real sshd + docker exec). The product knows nothing of it; the
node's simulated AITER serves it from its facts (orchestrator/sim/fromfacts.py), written into the container's tree
by the test bed's own helper, as a release that ships its tuner and op_test would."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator import gen_variant_facts as gen
from orchestrator.cli import main
from tests.expect import assert_comparison_matches_model
from tests.unit.test_variant_facts import FAKE, register_fake

pytestmark = pytest.mark.e2e


def test_a_fake_variant_added_by_one_entry_runs_end_to_end(make_node, tmp_path, monkeypatch):
    fake = register_fake(monkeypatch)
    node = make_node("current")
    c = node.container("aiter-dev")
    c.serve_variant(fake.name, gen.sim_facts(fake))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", FAKE.name, "--nk", "7168,2048", "--m-preset", "1,64",
                 "--repeats", "1", "--promote", "none", "--yes", "--job-id", "fake"])
    job = tmp_path / "ws" / "fake"
    st = json.loads((job / "state.json").read_text())
    assert code == 0, (st.get("error"), st.get("notes"))
    assert st["state"] == "succeeded" and st["variant"] == FAKE.name
    assert [(s["m"], s["n"], s["k"]) for s in st["shapes"]] == [(1, 7168, 2048), (64, 7168, 2048)]
    assert st["remote"]["tune_argv"][1] == f"{st['remote']['meta_root']}/{FAKE.tune_script}"
    assert len(c.launches()) == 1
    # comparison.csv: keys, metric and values exactly as the perf model says for the fake's facts
    got = assert_comparison_matches_model(job, FAKE.name, "0.1.20")
    assert len(got) == 2 and set(got["metric"]) == {"us"} and set(got["promoted"]) == {"false"}
    assert "lower is better" in (job / "report.md").read_text()
    # --promote none: the live table is as the release shipped it (header only)
    live = c.host_path(f"{c.aiter_root}/{FAKE.tuned_csv}").read_text()
    assert live.splitlines() == ["gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"]
