import pytest

from orchestrator.errors import ExitCode, InventoryError
from orchestrator.inventory import load_inventory


def write(tmp_path, text):
    p = tmp_path / "inventory.yaml"
    p.write_text(text)
    return str(p)


def test_shipped_example_loads():
    inv = load_inventory("inventory.yaml")
    node = inv.node("mi355-07")
    assert node.host == "10.1.2.7" and node.port == 22 and node.user == "amd"
    assert node.container("aiter-dev").aiter_path is None
    assert inv.node("mi300x-lab").container("sglang").env["AITER_CONFIG_FMOE"].endswith("tuned_fmoe.csv")


@pytest.mark.parametrize("text,needle,line", [
    ("nodes:\n  a:\n    host: h\n    prot: 22\n    containers: {c: {}}\n", "unknown key 'prot'", ":4"),
    ("nodes:\n  a:\n    host: h\n    port: abc\n    containers: {c: {}}\n", "port must be an integer", ":4"),
    ("nodes:\n  a:\n    host: h\n", "has no 'containers:'", ":2"),
    ("nodes: [\n", "invalid YAML", ":"),
    ("hosts: {}\n", "missing 'nodes:'", ""),
    ("nodes:\n  a:\n    host: h\n    containers:\n      c: {aiter_pth: /x}\n", "unknown option 'aiter_pth'", ":5"),
])
def test_bad_inventory_names_key_and_line(tmp_path, text, needle, line):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert needle in err.value.message
    assert f"{path}{line}" in err.value.message
    assert err.value.exit_code == ExitCode.USAGE


def test_unknown_node_and_container_hint_at_the_names(tmp_path):
    inv = load_inventory(write(tmp_path, "nodes:\n  a:\n    containers: {c1: {}}\n"))
    assert inv.node("a").host == "a"  # no host: the name is an ssh_config alias
    with pytest.raises(InventoryError) as err:
        inv.node("b")
    assert "a" in err.value.hint
    with pytest.raises(InventoryError) as err:
        inv.node("a").container("c2")
    assert "c1" in err.value.hint


def test_missing_file(tmp_path):
    with pytest.raises(InventoryError) as err:
        load_inventory(str(tmp_path / "nope.yaml"))
    assert "TUNE_REMOTE_INVENTORY" in err.value.hint


def test_slurm_strings_are_read_as_written(tmp_path):
    """YAML 1.1 reads an unquoted `time: 4:00:00` as the integer 14400 (base 60): sbatch -t 14400 would ask
    for 10 days. String settings are taken as written (an audit found it)."""
    from orchestrator.inventory import load_inventory
    p = tmp_path / "inv.yaml"
    p.write_text("slurm:\n  c:\n    login: login01\n    container: aiter-{node}\n    time: 4:00:00\n"
                 "    user: 0123\n    partition: 'gpu'\n")
    spec = load_inventory(str(p)).cluster("c")
    assert (spec.time, spec.user, spec.partition, spec.container) == ("4:00:00", "0123", "gpu", "aiter-{node}")


def test_container_options_are_read_as_written(tmp_path):
    """A reviewer found `user: 1000:44` (uid:gid, gid 44 = video) became the base-60 integer 60044 handed to
    `docker exec -u`, and env values 0123 / yes / 1:30 became '83' / 'True' / '90'."""
    from orchestrator.inventory import load_inventory
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  n1:\n    host: h\n    containers:\n      c:\n        user: 1000:44\n"
                 "        env: {A: 0123, B: yes, C: 1:30, D: 'x y', E: 2.50}\n        python: python3.12\n")
    c = load_inventory(str(p)).node("n1").container("c")
    assert c.user == "1000:44" and c.python == "python3.12"
    assert c.env == {"A": "0123", "B": "yes", "C": "1:30", "D": "x y", "E": "2.50"}
