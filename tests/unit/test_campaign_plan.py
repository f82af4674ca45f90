"""Campaign planning without nodes: inventory groups, cost-balanced shards, GPU-kind groups."""

from __future__ import annotations

import pytest

from orchestrator.campaign.plan import Probe, group, shape_cost, shard
from orchestrator.campaign.targets import InventorySource, TargetRef
from orchestrator.errors import InventoryError, UsageError
from orchestrator.inventory import load_inventory

INV = """
nodes:
  a: {host: 10.0.0.1, containers: {dev: {}}}
  b: {host: 10.0.0.2, containers: {dev: {}}}
  c: {host: 10.0.0.3, containers: {dev: {}, other: {}}}
groups:
  ab: [a, b]
  bc: [b, c]
"""


def _inv(tmp_path, text=INV):
    p = tmp_path / "inventory.yaml"
    p.write_text(text)
    return load_inventory(str(p))


def test_groups_all_and_nodes_select_each_node_once_in_order(tmp_path):
    inv = _inv(tmp_path)
    assert [n.name for n in inv.select(["ab", "bc"])] == ["a", "b", "c"]
    assert [n.name for n in inv.select(["all"])] == ["a", "b", "c"]
    assert [n.name for n in inv.select(["c", "a"])] == ["c", "a"]
    with pytest.raises(InventoryError, match="unknown node 'x'"):
        inv.select(["x"])


@pytest.mark.parametrize("groups, needle", [
    ("groups:\n  g: [a, zz]\n", "names unknown node 'zz'"),
    ("groups:\n  g: []\n", "non-empty list"),
    ("groups:\n  all: [a]\n", "invalid group name 'all'"),
    ("groups:\n  a: [b]\n", "invalid group name 'a'"),
    ("groups: [a]\n", "'groups' must map"),
])
def test_bad_groups_are_one_line_inventory_errors(tmp_path, groups, needle):
    text = "nodes:\n  a: {host: h, containers: {dev: {}}}\n  b: {host: h, containers: {dev: {}}}\n" + groups
    with pytest.raises(InventoryError, match=needle):
        _inv(tmp_path, text)


def test_container_may_be_left_out_only_where_a_node_has_one(tmp_path):
    inv = _inv(tmp_path)
    assert InventorySource(inv, ["ab"], None).targets() == [TargetRef("a", "dev"), TargetRef("b", "dev")]
    with pytest.raises(UsageError, match="node 'c' has 2 containers"):
        InventorySource(inv, ["all"], None).targets()
    with pytest.raises(InventoryError, match="no container 'other'"):
        InventorySource(inv, ["all"], "other").targets()


def test_shards_are_disjoint_complete_and_balanced_by_cost_and_gpus():
    shapes = [{"m": m, "n": 7168, "k": 2048} for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 8192)]
    refs = {TargetRef("a", "d"): 8, TargetRef("b", "d"): 8, TargetRef("c", "d"): 4}
    out = shard(shapes, refs)
    flat = [tuple(s.values()) for rows in out.values() for s in rows]
    assert sorted(flat) == sorted(tuple(s.values()) for s in shapes) and len(flat) == len(set(flat))
    load = {r: sum(shape_cost(s) for s in rows) / refs[r] for r, rows in out.items()}
    assert max(load.values()) <= 1.5 * min(load.values())
    # the costliest shape is never stacked on top of another big one
    big = {"m": 8192, "n": 7168, "k": 2048}
    (holder,) = [r for r, rows in out.items() if big in rows]
    assert all(shape_cost(s) < shape_cost(big) / 2 for s in out[holder] if s != big)


def test_groups_split_by_gpu_kind_and_exclude_gpus_that_cannot_run_the_variant():
    p = [Probe(TargetRef("a", "d"), {"gfx": "gfx950", "cu_num": 256, "profile": "current", "free_gpus": [0]}),
         Probe(TargetRef("b", "d"), {"gfx": "gfx950", "cu_num": 64, "profile": "current", "free_gpus": [0]}),
         Probe(TargetRef("c", "d"), {"gfx": "gfx942", "cu_num": 304, "profile": "current", "free_gpus": [0]}),
         Probe(TargetRef("d", "d"), error="unreachable")]
    groups, excluded = group(p, "a8w8_blockscale")
    assert sorted(len(v) for v in groups.values()) == [1, 1, 1]
    groups, excluded = group(p, "a4w4_blockscale")
    assert [m.ref.node for ms in groups.values() for m in ms] == ["a", "b"]
    assert len(excluded) == 1 and "c/d" in excluded[0] and "gfx942" in excluded[0]


@pytest.mark.parametrize("errors,code", [(("connect", "connect"), 3), (("lost", "lost"), 1), (("connect", "lost"), 1)])
def test_a_plan_no_target_answered_exits_3_only_when_none_could_be_connected_to(monkeypatch, errors, code):
    """Never 75 ('resume continues it'): there is no job yet to resume (a reviewer's finding)."""
    from types import SimpleNamespace

    from orchestrator.campaign import driver
    from orchestrator.campaign import plan as planning
    from orchestrator.campaign.plan import Probe
    from orchestrator.campaign.targets import TargetRef
    from orchestrator.errors import ConnectError, ConnectionLost, JobError
    from orchestrator.records import JobRequest
    make = {"connect": lambda: ConnectError("cannot connect"), "lost": lambda: ConnectionLost("lost")}
    probes = [Probe(TargetRef(f"n{i}", "c"), error="x", exc=make[e]()) for i, e in enumerate(errors)]
    monkeypatch.setattr(planning, "probe", lambda *a, **k: probes)
    job = SimpleNamespace(request=JobRequest())
    with pytest.raises(JobError) as err:
        driver.make_plan(job, None, [], ["a8w8"], None, None)
    assert err.value.exit_code == code and "no target could be used" in str(err.value)


def test_a_variant_whose_tuner_a_target_lacks_is_left_out_there_or_refused_when_named():
    """issue 36 defect 4: what each target can tune is known at plan time (discover's paths_exist rider): the
    target lacking it is excluded with its reason; a variant named on the command line is refused (exit 2), one line
    naming the target, its AITER version and what is missing."""
    from orchestrator.campaign import capable
    from orchestrator.campaign.plan import refuse_untunable
    from orchestrator.errors import ExitCode
    from orchestrator.variants import profile_for
    sent = capable.path_templates()
    answer = {"answer": {"exists": ["gemm_a16w16_tune.py" not in t for t in sent]}}
    lacks = capable.missing(answer, profile_for((0, 1, 20)), "gfx950")
    assert set(lacks) == {"a16w16"} and lacks["a16w16"] == "csrc/gemm_a16w16/gemm_a16w16_tune.py (its tuner)"
    assert capable.missing(None, profile_for((0, 1, 20)), "gfx950") == {}
    trimmed = Probe(TargetRef("a", "dev"), {"gfx": "gfx950", "cu_num": 256, "profile": "current",
                                             "version": "0.1.20", "cannot_tune": lacks})
    full = Probe(TargetRef("b", "dev"), {"gfx": "gfx950", "cu_num": 256, "profile": "current", "version": "0.1.20"})
    groups, excluded = group([trimmed, full], "a16w16")
    assert [p.ref.node for ps in groups.values() for p in ps] == ["b"]
    assert excluded == ["a/dev: a16w16 cannot be tuned there: its AITER 0.1.20 has no "
                        "csrc/gemm_a16w16/gemm_a16w16_tune.py (its tuner)"]
    assert len(group([trimmed, full], "a8w8_blockscale")[0][trimmed.kind]) == 2
    refuse_untunable([trimmed, full], ["a8w8_blockscale"])
    with pytest.raises(UsageError) as exc:
        refuse_untunable([full, trimmed], ["a8w8_blockscale", "a16w16"])
    line = exc.value.one_line()
    assert exc.value.exit_code == ExitCode.USAGE and len(line.splitlines()) == 1
    assert "a/dev" in line and "AITER 0.1.20" in line and "csrc/gemm_a16w16/gemm_a16w16_tune.py" in line
