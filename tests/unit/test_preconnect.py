"""run connects while it checks its inputs (preconnect.py): which command lines start connecting before the
CLI parses them (a plain single-target run only), and a connection for another target is never used."""

from __future__ import annotations

import pytest

from orchestrator import preconnect
from orchestrator.errors import ConnectError
from orchestrator.inventory_model import ContainerSpec, NodeSpec


@pytest.mark.parametrize("argv,want", [
    (["run", "--node", "n1", "--variant", "a8w8_blockscale", "--nk", "1,2"],
     {"inventory": None, "node": "n1", "container": None, "accept": False}),
    (["--inventory", "i.yaml", "-q", "run", "--node=n1", "--container", "c", "--variant", "bf16",
      "--accept-new-host-key"], {"inventory": "i.yaml", "node": "n1", "container": "c", "accept": True}),
    (["--workspace=w", "--json", "run", "--variant", "a8w8", "--node", "n1"],
     {"inventory": None, "node": "n1", "container": None, "accept": False}),
])
def test_a_plain_single_target_run_is_recognised(argv, want):
    assert preconnect.single_run(argv) == want


@pytest.mark.parametrize("argv", [
    ["status"], ["resume", "run"],
    ["run", "--node", "n1", "--node", "n2", "--variant", "a8w8"],        # a campaign
    ["run", "--node", "n1,n2", "--variant", "a8w8"],
    ["run", "--node", "n1", "--variant", "a8w8,bf16"],
    ["run", "--node", "n1", "--variant", "auto"],
    ["run", "--node", "n1"],                                              # no variant: a usage error comes
    ["run", "--node", "n1", "--variant", "a8w8", "--dry-run"],
    ["run", "--node", "n1", "--variant", "a8w8", "--help"],
    ["run", "--slurm", "gpu", "--variant", "a8w8"],
    ["--verbose", "run", "--node", "n1", "--variant", "a8w8"],           # unknown group option: unsure
    ["--workspace", "run", "status"],                                     # `run` is a value here
])
def test_anything_else_is_left_to_the_cli(argv):
    assert preconnect.single_run(argv) is None


def test_a_speculative_connection_for_another_target_is_abandoned_not_used(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  n1:\n    host: 127.0.0.1\n    port: 1\n    containers:\n      c1: {}\n"
                   "  n2:\n    host: 127.0.0.1\n    port: 1\n    containers:\n      c1: {}\n")
    preconnect.speculate(["--inventory", str(inv), "run", "--node", "n1", "--variant", "a8w8"])
    spec = preconnect._speculation["pre"]
    abandoned = []
    monkeypatch.setattr(spec, "abandon", lambda: abandoned.append(True))
    n2 = NodeSpec(name="n2", host="127.0.0.1", port=1, containers={"c1": ContainerSpec(name="c1")})
    assert preconnect.claim(str(inv), n2, n2.container("c1"), False) is None
    assert abandoned == [True] and preconnect._speculation == {}


def test_the_speculative_connection_for_this_target_is_used_and_says_what_connecting_said(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  n1:\n    host: 127.0.0.1\n    port: 1\n    containers:\n      c1: {}\n")
    preconnect.speculate(["--inventory", str(inv), "run", "--node", "n1", "--variant", "a8w8"])
    n1 = NodeSpec(name="n1", host="127.0.0.1", port=1, containers={"c1": ContainerSpec(name="c1")})
    pre = preconnect.claim(str(inv), n1, n1.container("c1"), False)
    assert pre is not None
    with pytest.raises(ConnectError):            # port 1 refuses: the error `run` would have met itself
        pre.target()
