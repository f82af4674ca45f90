"""The FHMoE tuner as a variant, end to end on a head node (gfx950, 256 CUs; op_tests/tuners/tune_fhmoe.py
and aiter/fhmoe.py as ROCm/aiter eb326e45 has them). The node's live table lacks the HY4 MXFP8 row of token
4096, so the server raised `The active FHMoE config does not cover this HY4 MXFP8 token shape: M=3000`; a
DSV4 I384 raise in the same log names a shape this AITER cannot tune. `run --variant fhmoe --log` tunes
token 4096 from an incumbent row (a copy of the nearest token's), measures both arms with the tuner's
--baseline-only (ms), promotes the row and reports; after that the runtime serves M=3000 instead of raising."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e

LOG = ("(Worker_TP0 pid=101) ERROR 12-02 10:00:01 [core.py:1029] NotImplementedError: The active FHMoE config "
       "does not cover this HY4 MXFP8 token shape: M=3000\n"
       "(Worker_TP1 pid=102) ERROR 12-02 10:00:01 [core.py:1029] NotImplementedError: The active FHMoE config "
       "does not cover this HY4 MXFP8 token shape: M=3000\n"
       "(Worker_TP0 pid=101) ERROR 12-02 10:00:02 [core.py:1029] NotImplementedError: The active FHMoE config "
       "does not cover this DSV4 I384 token shape: M=5\n")


def _hy4(row: dict) -> bool:
    return row["model_dim"] == "6144" and row["q_dtype_w"] == "torch.float8_e4m3fn"


def _serve(c, m: int) -> subprocess.CompletedProcess:
    code = ("from aiter.fhmoe import fhmoe_\n"
            f"print(fhmoe_({m}, 6144, 256, 257, 9, shared_expert_id=256))\n")
    return subprocess.run(["docker", "exec", "-w", f"{c.aiter_root}", c.name, "python3", "-c", code],
                          capture_output=True, text=True, check=False)


def test_a_runtime_raise_is_tuned_measured_promoted_and_reported(make_node, tmp_path, capsys):
    node = make_node({"profile": "head"})
    c = next(iter(node.containers.values()))
    live_path = c.host_path(f"{c.aiter_root}/aiter/configs/tuned_fhmoe.csv")
    text = live_path.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    kept = [r for r in rows if not (_hy4(r) and r["token"] == "4096")]
    assert len(kept) == len(rows) - 1
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(kept)
    live_path.write_text(out.getvalue())
    before = out.getvalue()
    served = _serve(c, 3000)
    assert "does not cover this HY4 MXFP8 token shape: M=3000" in served.stderr, served

    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    log = tmp_path / "server.log"
    log.write_text(LOG)
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws")]
    code = main([*base, "-q", "run", "--node", node.alias, "--container", c.name, "--variant", "fhmoe",
                 "--log", f"local:{log}", "--yes", "--repeats", "2", "--promote", "all", "--job-id", "f1"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    job = tmp_path / "ws" / "f1"
    st = json.loads((job / "state.json").read_text())
    argv = st["remote"]["tune_argv"]
    assert argv[argv.index("--tokens") + 1] == "4096" and argv[argv.index("--mp") + 1] == "1", argv
    assert "--batch" not in argv and argv[argv.index("-o") + 1] != st["remote"]["live_csv"], argv
    tuner_in = argv[argv.index("-i") + 1]
    assert tuner_in != st["remote"]["live_csv"]
    rows_in = list(csv.DictReader(c.host_path(tuner_in).open()))
    donor = [r for r in rows_in if _hy4(r) and r["token"] == "2048"][0]
    added = [r for r in rows_in if _hy4(r) and r["token"] == "4096"]
    assert len(added) == 1 and added[0]["kernelName1"] == donor["kernelName1"]   # the incumbent: 2048's row
    # both arms: the tuner's --baseline-only, in ms
    comp = list(csv.DictReader((job / "comparison.csv").open()))
    assert [r["token"] for r in comp] == ["4096"], comp
    notes = " ".join(st.get("notes") or [])
    assert "cannot be tuned by this AITER" in cap.err + notes and "DSV4 I384" in cap.err + notes
    # promoted: the live table now covers M=3000 and the runtime serves it
    live_rows = list(csv.DictReader(live_path.open()))
    assert len([r for r in live_rows if _hy4(r) and r["token"] == "4096"]) == 1
    served = _serve(c, 3000)
    assert served.returncode == 0 and "flydsl_moe1_afp8_wfp8" in served.stdout, served
    assert live_path.read_text() != before
    search = st["steps"]["compare"]["info"]["fhmoe_search"]       # the tuner's own M=.. lines, in ms
    assert [r["token"] for r in search] == [4096] and search[0]["validated"], search
    assert st["steps"]["promote"]["info"]["added"] == 1
    md = (job / "report.md").read_text()
    assert "measured by the tuner" in md and "the tuner's own search" in md, md
    assert "**Metric:** ms" in md and " us" not in md.split("## Notes")[0], md
    # recheck cannot time the row's absence (the tuner raises on such a table, as the runtime does): not measured
    code = main([*base, "recheck", "--node", node.alias, "--container", c.name, "--variant", "fhmoe"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["counts"]["not_measured"] == 1, out
    ran = " ".join(p.read_text(errors="replace") for p in Path(out["dir"]).rglob("*") if p.is_file())
    assert "{fhmoe:" not in ran and "missing HY4 FHMoE rows" not in ran      # no benchmark with a table lacking it
    # rollback restores the table the runtime raised on
    assert main([*base, "-q", "rollback", "f1"]) == 0, capsys.readouterr().err
    assert live_path.read_text() == before



def test_a_node_the_tuner_raises_on_is_refused_before_anything_runs(make_node, tmp_path, capsys):
    node = make_node({"profile": "head", "cu_num": 128})      # a gfx950 in a partition mode: 128 CUs
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    log = tmp_path / "server.log"
    log.write_text(LOG)
    launches = len(c.launches())
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
                 "--container", c.name, "--variant", "fhmoe", "--log", f"local:{log}", "--yes"])
    err = capsys.readouterr().err
    assert code == 2, err
    said = [line for line in err.splitlines() if "cannot be tuned on this node" in line]
    assert len(said) == 1 and "cu_num=128" in said[0] and "256 CUs" in said[0], err
    assert "hint:" in err and len(c.launches()) == launches       # nothing was launched


@pytest.mark.parametrize("profile", ["head", "newest"])
def test_variant_auto_plans_fhmoe_only_where_the_tuner_is(make_node, tmp_path, capsys, profile):
    node = make_node({"profile": profile})
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    log = tmp_path / "server.log"
    log.write_text(LOG)
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
                 "--container", c.name, "--variant", "auto", "--log", f"local:{log}", "--dry-run"])
    err = capsys.readouterr().err
    if profile == "head":
        assert code == 0 and "fhmoe on gfx950/256" in err and "(1 target(s), 1 shapes)" in err, err
        assert "DSV4 I384" in err, err
    else:   # 0.1.29 ships no tune_fhmoe.py: probed (its file), named with the reason, nothing else to tune
        assert code == 2 and "fhmoe cannot be tuned there" in err and "tune_fhmoe.py" in err, err
