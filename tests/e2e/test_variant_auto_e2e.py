"""`--variant auto` picks only what the chosen targets can tune (issue 36 defect 4): two nodes whose AITER (a
trimmed 0.1.20 install) lacks csrc/gemm_a16w16/gemm_a16w16_tune.py, a log with bf16 (a16w16) misses beside
a8w8_blockscale ones. The plan leaves a16w16 out with its reason (stderr and the report) and the job exits 0;
naming a16w16 is refused before anything runs: exit 2, one line naming the node, its AITER version and the file."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e

TUNER = "csrc/gemm_a16w16/gemm_a16w16_tune.py"
LOG = "\n".join(
    [f"shape is M:{m}, N:2112, K:7168, not found tuned config in /tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, "
     "will use default config!" for m in (16, 96)]
    + [f"shape is M:{m}, N:1024, K:7168 dtype='torch.bfloat16' otype='torch.bfloat16' bias=False, scaleAB=False, "
       "bpreshuffle=False, not found tuned config in /opt/aiter/aiter/configs/bf16_tuned_gemm.csv, will use default "
       "config! using torch solution:0" for m in (16, 96)]) + "\n"


@pytest.fixture(scope="module")
def trimmed(testbed):
    nodes = [testbed.create_node(("current",), proxy=False) for _ in range(2)]
    for n in nodes:
        for c in n.containers.values():
            tuner = Path(c.host_path(f"{c.aiter_root}/{TUNER}"))    # develop: csrc/ in the checkout
            assert tuner.is_file()
            tuner.unlink()              # a trimmed install: AITER 0.1.20 without the a16w16 tuner
    yield nodes
    for n in nodes:
        testbed.destroy_node(n)


def _cli(tmp_path, nodes, *argv) -> tuple[int, str]:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                                       "containers": {c: {} for c in n.containers}} for n in nodes},
                                   "groups": {"pair": [n.alias for n in nodes]}}))
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), *argv])
    return rc, out.getvalue()


def test_auto_leaves_out_the_variant_the_nodes_cannot_tune_and_exits_0(trimmed, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    log = tmp_path / "server.log"
    log.write_text(LOG)
    rc, out = _cli(tmp_path, trimmed, "run", "--node", "pair", "--variant", "auto", "--log", f"local:{log}",
                   "--yes", "--job-id", "auto1")
    err = capsys.readouterr().err
    assert rc == 0, (out, err)
    left = [line for line in err.splitlines() if "a16w16 left out by --variant auto" in line]
    assert len(left) == 1, err
    for n in trimmed:
        assert f"{n.alias}/" in left[0] and TUNER in left[0] and "AITER 0.1.20" in left[0]
    job = tmp_path / "ws" / "auto1"
    report = (job / "report.md").read_text()
    assert "a16w16 left out by --variant auto" in report and TUNER in report
    assert "Variants: a8w8_blockscale. Targets: 2." in report and (job / "comparison.csv").is_file()
    assert not [t for t in (job / "targets").iterdir() if "a16w16" in t.name]
    for n in trimmed:
        for c in n.containers.values():
            assert not [x for x in c.launches() if "a16w16" in str(x)]


def test_a_named_variant_a_node_cannot_tune_is_refused_before_anything_runs(trimmed, tmp_path, capsys):
    before = [len(c.launches()) for n in trimmed for c in n.containers.values()]
    rc, _ = _cli(tmp_path, trimmed, "run", "--node", "pair", "--variant", "a8w8_blockscale,a16w16",
                 "--nk", "1024,7168", "--m-preset", "16", "--yes", "--job-id", "named1")
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert rc == 2 and len(errors) == 1, errors
    err = errors[0]
    assert trimmed[0].alias in err and "AITER 0.1.20" in err and TUNER in err and "a16w16" in err
    assert [len(c.launches()) for n in trimmed for c in n.containers.values()] == before
    # one node, one named variant (a single-target job): refused the same way
    c = next(iter(trimmed[0].containers))
    rc, _ = _cli(tmp_path, trimmed, "run", "--node", trimmed[0].alias, "--container", c, "--variant", "a16w16",
                 "--nk", "1024,7168", "--m-preset", "16", "--yes", "--job-id", "named2")
    err = capsys.readouterr().err
    assert rc == 2 and trimmed[0].alias in err and "0.1.20" in err and "gemm_a16w16_tune.py" in err, err
