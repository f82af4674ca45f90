"""Bad input: one clear line, exit 2, and nothing remote (the node below would refuse: exit 3)."""

import json

import pytest

from orchestrator.cli import main

INV = """nodes:
  n1:
    host: 127.0.0.1
    port: 1
    containers:
      c1: {}
  n2:
    host: 127.0.0.1
    port: 1
    containers:
      c1: {}
      c2: {}
"""


@pytest.fixture
def inv(tmp_path, monkeypatch):
    p = tmp_path / "inv.yaml"
    p.write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(p))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    return p


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,needle", [
    (["run", "--node", "nx", "--container", "c1", "--variant", "a8w8", "--nk", "1,2"], "unknown node 'nx'"),
    (["run", "--node", "n1", "--container", "cx", "--variant", "a8w8", "--nk", "1,2"], "no container 'cx'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a9w9", "--nk", "1,2"], "unknown variant 'a9w9'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--log", "local:/nonexistent.log"],
     "not found on this machine"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "7168"], "--nk '7168'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8"], "no shape source"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2", "--job-id", "../x"],
     "invalid job id"),
    # --container may be left out only where the node has exactly one container (issue 10)
    (["run", "--node", "n2", "--variant", "a8w8", "--nk", "1,2"], "node 'n2' has 2 containers; say which"),
    (["run", "--container", "c1", "--variant", "a8w8", "--nk", "1,2"], "say where to tune"),
    (["resume", "nope"], "no job 'nope'"),
    (["logs", "nope"], "no job 'nope'"),
])
def test_usage_errors_exit_2_with_one_line(inv, capsys, argv, needle):
    code, out, err = run(argv, capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


def test_bad_inventory_exits_2(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  n1:\n    host: h\n    containers: 3\n")
    code, out, err = run(["--inventory", str(bad), "run", "--node", "n1", "--container", "c",
                          "--variant", "a8w8", "--nk", "1,2"], capsys)
    assert code == 2 and f"{bad}:4" in err


def test_unreachable_node_exits_3(inv, capsys):
    code, out, err = run(["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2",
                          "--yes"], capsys)
    assert code == 3, err
    assert "cannot connect" in err


def test_status_json_lists_jobs(inv, capsys):
    from orchestrator.state import JobState, Workspace, resolve_workspace
    ws = Workspace(resolve_workspace(None))
    ws.save(JobState(job_id="j1", node="n1", container="c1", variant="a8w8", created=0.0, request={}))
    code, out, err = run(["status", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert rows[0]["job_id"] == "j1" and rows[0]["state"] == "running"
    assert {"job_id", "state", "step", "node", "container", "variant"} <= set(rows[0])
