"""--inventory reads an Ansible YAML inventory (issue 10): hosts, groups, variables, host ranges."""

from __future__ import annotations

import pytest

from orchestrator.campaign.targets import InventorySource
from orchestrator.cli import main
from orchestrator.errors import InventoryError, UsageError
from orchestrator.inventory import load_inventory

ANSIBLE = """\
all:
  vars:
    ansible_user: amd
    tune_remote_containers: [aiter-dev]
  hosts:
    lonely:
      ansible_host: 10.0.0.5
      tune_remote_containers: {aiter-a: {env: {AITER_LOG_MORE: 1}}, aiter-b: {}}
  children:
    mi355:
      vars:
        ansible_ssh_private_key_file: ~/.ssh/id_mi355
      hosts:
        mi355-[07:09]:
        mi355-08:
          ansible_port: 2222
      children:
        mi355-old:
          vars: {ansible_user: legacy}
          hosts:
            mi355-09: {}
    bare:
      hosts:
        bare1:
          tune_remote_docker: sudo -n docker
          ansible_ssh_user: ops
"""


@pytest.fixture
def inv(tmp_path):
    p = tmp_path / "hosts.yml"
    p.write_text(ANSIBLE)
    return load_inventory(str(p))


def test_hosts_groups_and_variables_follow_ansibles_precedence(inv):
    assert list(inv.nodes) == ["lonely", "mi355-07", "mi355-08", "mi355-09", "bare1"]
    assert inv.groups == {"mi355": ("mi355-07", "mi355-08", "mi355-09"), "mi355-old": ("mi355-09",),
                          "bare": ("bare1",)}
    n7, n8, n9 = (inv.nodes[f"mi355-0{i}"] for i in (7, 8, 9))
    assert (n7.host, n7.port, n7.user, n7.identity_file) == ("mi355-07", None, "amd", "~/.ssh/id_mi355")
    assert n8.port == 2222 and n8.user == "amd"
    assert n9.user == "legacy" and n9.identity_file == "~/.ssh/id_mi355"     # child group beats parent
    assert list(n7.containers) == ["aiter-dev"] and not n7.any_container
    lonely = inv.nodes["lonely"]
    assert lonely.host == "10.0.0.5" and list(lonely.containers) == ["aiter-a", "aiter-b"]
    assert lonely.containers["aiter-a"].env == {"AITER_LOG_MORE": "1"}
    bare = inv.nodes["bare1"]
    assert bare.docker == ("sudo", "-n", "docker") and bare.user == "ops"
    assert list(bare.containers) == ["aiter-dev"]          # all's vars reach every host


def test_a_host_without_containers_takes_container_from_the_command_line(tmp_path):
    p = tmp_path / "hosts.yml"
    p.write_text("gpu:\n  hosts:\n    n1:\n    n2:\n")
    inv = load_inventory(str(p))
    assert inv.groups == {"gpu": ("n1", "n2")} and inv.nodes["n1"].any_container
    refs = InventorySource(inv, ["gpu"], "aiter-dev").targets()
    assert [(r.node, r.container) for r in refs] == [("n1", "aiter-dev"), ("n2", "aiter-dev")]
    with pytest.raises(UsageError, match="names no container"):
        InventorySource(inv, ["gpu"], None).targets()


@pytest.mark.parametrize("text, needle", [
    ("all:\n  hosts: {}\n", "lists no hosts"),
    ("all:\n  hosts:\n    n1: {ansible_port: abc}\n", "ansible_port 'abc' is not a number"),
    ("all:\n  hosts:\n    n1: {ansible_port: 70000}\n", "out of range"),
    ("g:\n  hosts: {g: {}}\n", "has the name of a host"),
    ("all:\n  hosts:\n    'bad host': {}\n", "invalid host name"),
    ("all:\n  hosts:\n    n1: {tune_remote_containers: {'a b': {}}}\n", "invalid container name"),
])
def test_bad_ansible_inventories_are_one_line_errors(tmp_path, text, needle):
    p = tmp_path / "hosts.yml"
    p.write_text(text)
    with pytest.raises(InventoryError, match=needle):
        load_inventory(str(p))


def test_a_bad_ansible_inventory_exits_2_before_anything_remote(tmp_path, capsys):
    p = tmp_path / "hosts.yml"
    p.write_text("all:\n  hosts:\n    n1: {ansible_port: abc}\n")
    rc = main(["--inventory", str(p), "--workspace", str(tmp_path / "ws"), "run", "--node", "n1",
               "--container", "c", "--variant", "a8w8", "--nk", "512,7168", "--yes"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "ansible_port" in err[0]
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())


def test_a_tune_remote_inventory_is_not_taken_for_an_ansible_one(tmp_path):
    p = tmp_path / "inventory.yaml"
    p.write_text("nodes:\n  n1:\n    containers: {c: {}}\n")
    assert list(load_inventory(str(p)).nodes) == ["n1"]
    p.write_text("hosts:\n  n1: {}\n")
    with pytest.raises(InventoryError, match="missing 'nodes:'"):
        load_inventory(str(p))


def test_an_empty_group_is_named_as_such(tmp_path):
    p = tmp_path / "hosts.yml"
    p.write_text("all:\n  children:\n    gpu:\n      hosts:\n        n1: {tune_remote_containers: [c]}\n"
                 "    spare:\n      hosts: {}\n")
    with pytest.raises(InventoryError, match="group 'spare' in .* has no nodes"):
        load_inventory(str(p)).select(["spare"])
    assert [n.name for n in load_inventory(str(p)).select(["gpu"])] == ["n1"]
