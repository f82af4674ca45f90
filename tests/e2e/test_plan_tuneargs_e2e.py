"""A campaign's --tune-arg is checked at plan time against each target's tuner --help (the plan's one probe
per variant, campaign/capable.py): two nodes, one AITER 0.1.20 whose a8w8_blockscale tuner has
--min_improvement_pct (base_tuner.py, v0.1.13+), one 0.1.11 whose tuner has not: the campaign is refused, exit
2, one line naming the 0.1.11 target, the variant and the flag, before any target job starts; without the
flag's target (or with a flag both list) the plan goes on."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pair(testbed):
    nodes = [testbed.create_node(("current",), proxy=False), testbed.create_node(("legacy",), proxy=False)]
    yield nodes
    for n in nodes:
        testbed.destroy_node(n)


def _cli(tmp_path, capsys, pair, *argv) -> tuple[int, str]:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                                       "containers": {c: {} for c in n.containers}} for n in pair}}))
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", *argv])
    return rc, out.getvalue() + capsys.readouterr().err


def test_a_flag_one_targets_tuner_lacks_refuses_the_campaign_before_any_target_job(pair, tmp_path, capsys):
    new, old = pair
    base = ["--node", new.alias, "--node", old.alias, "--variant", "a8w8_blockscale", "--nk", "7168,2048",
            "--m-preset", "16", "--repeats", "1", "--promote", "none", "--yes"]
    capsys.readouterr()
    rc, text = _cli(tmp_path, capsys, pair, *base, "--tune-arg=--min_improvement_pct=5", "--job-id", "bad")
    assert rc == 2, text
    said = [line for line in text.splitlines() if "--min_improvement_pct" in line]
    old_label = f"{old.alias}/{next(iter(old.containers))}"
    assert len(said) == 1 and f"{old_label}: a8w8_blockscale: the tuner on this node (" in said[0], said
    assert "has no flag --min_improvement_pct" in said[0] and new.alias not in said[0]
    assert not (tmp_path / "ws" / "bad" / "targets").exists()        # no target job was made, none started
    # the node whose tuner lists it alone: the plan goes on (a dry run prints it)
    rc, text = _cli(tmp_path, capsys, pair, "--node", new.alias, "--node", old.alias, "--variant",
                    "a8w8_blockscale", "--nk", "7168,2048", "--m-preset", "16", "--tune-arg=--warmup=3",
                    "--dry-run", "--job-id", "ok")
    assert rc == 0, text
    assert "a8w8_blockscale on " in text and "has no flag" not in text
