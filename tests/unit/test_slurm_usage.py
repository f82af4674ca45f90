"""Bad Slurm input on the command line (issue 11): one line, exit 2, and nothing remote (the login node below
is unreachable: anything that tried to reach it would exit 3)."""

import pytest

from orchestrator.cli import main

INV = """nodes:
  n1:
    host: 127.0.0.1
    port: 1
    containers:
      c1: {}
slurm:
  gpu:
    login: 127.0.0.1
    port: 1
    container: "aiter-{node}"
"""


@pytest.fixture
def inv(tmp_path, monkeypatch):
    p = tmp_path / "inv.yaml"
    p.write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(p))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    return p


@pytest.mark.parametrize("extra,needle", [
    (["--slurm", "nosuch"], "unknown Slurm cluster 'nosuch'"),
    (["--slurm", "gpu", "--node", "n1"], "--slurm takes its nodes from Slurm"),
    (["--slurm", "gpu", "--slurm-nodes", "0"], "'--slurm-nodes': 0 is not in the range"),
    (["--slurm", "gpu", "--variant", "a9w9"], "unknown variant 'a9w9'"),
])
def test_bad_slurm_input_exits_2_with_one_line_and_nothing_remote(inv, tmp_path, capsys, extra, needle):
    code = main(["run", "--variant", "a8w8", "--nk", "1,2", "--yes", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())    # no job was made


def test_a_reachable_cluster_name_goes_remote(inv, capsys):
    """The control case: the same command with a good cluster tries the login node (exit 3 here)."""
    code = main(["run", "--slurm", "gpu", "--variant", "a8w8", "--nk", "1,2", "--yes"])
    assert code == 3, capsys.readouterr().err
