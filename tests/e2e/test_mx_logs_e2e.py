"""The mixed-MXFP asm GEMMs' own runtime lines as the shape source and the engaged check (newest/head, gfx950):
a simulated serve with AITER_LOG_TUNED_CONFIG=1 logs `A6W4 shape M:.. N:.. K:.. has no tuned config in ..`
once per shape per process (aiter/ops/gemm_op_a6w4.py via gemm_op_mixed_mxfp.py, ROCm/aiter 610d1e8e era);
`run --variant a6w4 --log` tunes those shapes, measures them with the tuner's --run_config (whose production
op goes through the same lookup), promotes the proven row, and the engaged check reads the runtime's hit line
(`matched exact config ... in <live table>: <kernel>`). The next serve hits the promoted row."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import perf_model
from orchestrator.variants import get_variant

pytestmark = pytest.mark.e2e

NK = {"n": 7168, "k": 2048}


@pytest.mark.parametrize("profile", ["newest"])
def test_a6w4_shapes_from_its_runtime_log_tuned_promoted_and_engaged(make_node, tmp_path, capsys, profile):
    node = make_node({"profile": profile})
    c = next(iter(node.containers.values()))
    [good] = perf_model.shapes_with_outcome("a6w4", "improved", NK, "m", 1, 1)
    [guard] = perf_model.shapes_with_outcome("a6w4", "regressed", NK, "m", 1, 1)
    ms = f"{good['m']},{guard['m']}"
    serve = f"python3 -m aiter._sim.serve --mx a6w4:7168,2048 --m {ms}"
    log = f"{c.aiter_root}/serve.log"
    c.sh(f"cd {c.aiter_root} && AITER_LOG_TUNED_CONFIG=1 {serve} >/dev/null 2>{log}")
    text = c.host_path(log).read_text()
    live = f"{c.aiter_root}/{get_variant('a6w4').tuned_csv}"
    for s in (good, guard):
        assert text.count(f"A6W4 shape M:{s['m']} N:7168 K:2048 has no tuned config in ") == 1, text

    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a6w4", "--log", log, "--m-preset", ms, "--yes",
                 "--job-id", "mx1"])
    st = json.loads((tmp_path / "ws" / "mx1" / "state.json").read_text())
    assert code == 0, (capsys.readouterr().err, st.get("error"), st.get("notes"))
    assert sorted((s["m"], s["n"], s["k"]) for s in st["shapes"]) == sorted((s["m"], 7168, 2048)
                                                                           for s in (good, guard))
    eng = st["steps"]["promote"]["info"].get("engaged") or {}
    assert eng.get("total") == 1 and eng.get("engaged") == 1, eng
    [shape] = eng["shapes"]
    row = perf_model.tune_result("a6w4", good)
    # the kernel comes from the runtime's own hit line (no other line of the fresh process names it)
    assert shape["key"]["m"] == good["m"] and shape["hit"] is True and shape["kernel"] == row["kernelName"], shape
    ran = (tmp_path / "ws" / "mx1" / "engaged_at_runtime.log").read_text()
    assert f"A6W4 shape M:{good['m']} N:7168 K:2048 matched exact config M:{good['m']} N:7168 K:2048 in " in ran

    # the next server process: the promoted row is found, the fallback shape still misses
    c.sh(f"cd {c.aiter_root} && AITER_LOG_TUNED_CONFIG=1 {serve} >/dev/null 2>{log}")
    text = c.host_path(log).read_text()
    assert (f"A6W4 shape M:{good['m']} N:7168 K:2048 matched exact config M:{good['m']} N:7168 K:2048 in {live}: "
            f"{row['kernelName']}") in text, text
    # the gain guard's FALLBACK row gained nothing: not promoted, so the shape still misses
    assert f"A6W4 shape M:{guard['m']} N:7168 K:2048 has no tuned config in {live}; " in text, text


def test_a4w6_serve_log_without_the_env_says_to_set_it(make_node, tmp_path, capsys):
    """Without AITER_LOG_TUNED_CONFIG the runtime prints no lookup line: the job (shapes from --nk) says why
    the log gave none (the entry's log_gate_env)."""
    node = make_node({"profile": "newest"})
    c = next(iter(node.containers.values()))
    log = f"{c.aiter_root}/serve.log"
    c.sh(f"cd {c.aiter_root} && python3 -m aiter._sim.serve --mx a4w6:7168,2048 --m 16 >/dev/null 2>{log}")
    assert "A4W6 shape" not in c.host_path(log).read_text()
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a4w6", "--log", log, "--nk", "7168,2048", "--m-preset", "16",
                 "--yes", "--job-id", "mx2"])
    st = json.loads((tmp_path / "ws" / "mx2" / "state.json").read_text())
    assert code == 0, (capsys.readouterr().err, st.get("error"), st.get("notes"))
    gate = [n for n in st["notes"] if "AITER_LOG_TUNED_CONFIG=1" in n]
    assert len(gate) == 1 and "no a4w6 lookup lines" in gate[0], st["notes"]
