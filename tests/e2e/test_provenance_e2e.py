"""Export provenance names the AITER commit of a develop checkout whose HEAD sits on a tag (issue 36 defect 3):
`git describe --tags --always` prints just the tag there; the commit is `git rev-parse HEAD`."""

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import SimSpec

pytestmark = pytest.mark.e2e


def test_export_names_the_commit_of_a_checkout_on_a_tag(make_node, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node(SimSpec(profile="newest"))
    c = next(iter(node.containers.values()))
    git = f"git -C {c.aiter_root} -c user.email=t@example.com -c user.name=t"
    r = c.sh(f"{git} init -q && {git} add -A && {git} commit -qm sim && {git} tag v0.1.29 && "
             f"{git} describe --tags --always && {git} rev-parse HEAD")
    describe, sha = r.stdout.split()
    assert describe == "v0.1.29" and len(sha) == 40, r.stderr
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws")]
    code = main([*base, "-q", "run", "--node", node.alias, "--container", c.name, "--variant", "a8w8_blockscale",
                 "--nk", "7168,2048", "--m-preset", "1,16,64,256", "--yes", "--repeats", "2", "--promote", "none",
                 "--job-id", "p"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main([*base, "--json", "export", "p", "--model-config", "dsv3"])
    out = capsys.readouterr().out
    assert code == 0, out
    md = Path(json.loads(out)["summary"]).read_text()
    assert f"commit {sha}" in md and "commit unknown" not in md, md
