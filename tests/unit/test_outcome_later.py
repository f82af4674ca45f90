"""`promote`, `rollback`, `export` after the job (README "The outcome"): a later `promote --rows all` adds the
rows not promoted yet as a new round, rollback restores the live table as before the FIRST promotion, the
job's report is rendered again, and a campaign's targets are reached (orchestrator/campaign/outcome.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli import main


HEAD = "gfx,cu_num,m,n,k,us,kernel\n"


def test_a_later_promotion_adds_the_rest_as_a_round_and_rollback_restores_before_the_first(staging_mod, tmp_path):
    live, so = tmp_path / "live.csv", tmp_path / "jit" / "module_x.so"
    live0 = HEAD + "gfx950,256,9,512,7168,9.0,theirs\ngfx950,256,2,512,7168,9.0,old2\n"
    live.write_text(live0)
    so.parent.mkdir()
    so.write_bytes(b"M0")
    (tmp_path / "staging.csv").write_text(
        live0 + "gfx950,256,1,512,7168,7.0,new1\ngfx950,256,2,512,7168,6.0,new2\ngfx950,256,3,512,7168,5.0,new3\n")
    req = {"live": str(live), "staging": str(tmp_path / "staging.csv"), "backup_dir": str(tmp_path / "bk"),
           "key_columns": ["m", "n", "k"], "gfx": "gfx950", "cu_num": "256", "others": [], "modules": ["module_x"],
           "package_dir": None, "jit_dir_env": str(so.parent)}
    first = staging_mod.op_promote(dict(req, keys=[["1", "512", "7168"]], mode="proven"))
    assert first["already"] is False and first["promoted_now"] == [["gfx950", "256", "1", "512", "7168"]]
    live1 = live.read_bytes()
    so.write_bytes(b"M1")                         # the engaged check built the module from the promoted table
    every = [[str(m), "512", "7168"] for m in (1, 2, 3)]
    second = staging_mod.op_promote(dict(req, keys=every, mode="all"))
    assert second["already"] is False
    assert second["promoted_now"] == [["gfx950", "256", m, "512", "7168"] for m in ("2", "3")]
    assert len(second["promoted"]) == 3 and second["replaced"] == 1 and second["added"] == 2
    assert live.read_text() == (HEAD + "gfx950,256,9,512,7168,9.0,theirs\ngfx950,256,2,512,7168,6.0,new2\n"
                                "gfx950,256,1,512,7168,7.0,new1\ngfx950,256,3,512,7168,5.0,new3\n")
    # its own backup of the live table as it was just before it; the record keeps the first one
    [r1, r2] = second["rounds"]
    assert Path(r2["backup"]).read_bytes() == live1 and r2["mode"] == "all" and r1["mode"] == "proven"
    assert second["backup"] == first["backup"] and Path(first["backup"]).read_text() == live0
    assert not so.exists() and Path(r2["modules"][str(so)]).read_bytes() == b"M1"   # the stale module moved aside
    # the same again: nothing changes
    promoted = live.read_bytes()
    again = staging_mod.op_promote(dict(req, keys=every, mode="all"))
    assert again["already"] is True and live.read_bytes() == promoted
    assert staging_mod.op_promote(dict(req, keys=[["1", "512", "7168"]]))["already"] is True
    # rollback: as before the FIRST promotion, byte for byte, module included
    back = staging_mod.op_rollback({"backup_dir": str(tmp_path / "bk")})
    assert back["rounds_undone"] == 2 and live.read_text() == live0 and so.read_bytes() == b"M0"
    assert staging_mod.op_rollback({"backup_dir": str(tmp_path / "bk")})["already"] is True


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.05")
    return tmp_path / "ws"


def _cli(ws: Path, capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--workspace", str(ws), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _demo(ws: Path, capsys, *args) -> Path:
    assert _cli(ws, capsys, "demo", "--repeats", "1", *args)[0] == 0
    [job] = [d for d in ws.iterdir() if (d / "state.json").is_file()]
    return job


def _promoted(job: Path) -> pd.DataFrame:
    comp = pd.read_csv(job / "comparison.csv", dtype=str, keep_default_na=False)
    return comp[comp["promoted"] == "true"]


def test_promote_rows_all_after_the_jobs_proven_promotion_promotes_the_rest(ws, capsys):
    job = _demo(ws, capsys)
    state = json.loads((job / "state.json").read_text())
    live, before = Path(state["remote"]["live_csv"]), Path(state["remote"]["promotion"]["backup"]).read_bytes()
    proven = len(_promoted(job))
    tuned = {tuple(str(s[c]) for c in ("m", "n", "k")) for s in state["steps"]["compare"]["info"]["tuned"]["tuned"]}
    assert 0 < proven < len(tuned)

    rc, out, err = _cli(ws, capsys, "promote", job.name, "--rows", "all", "--yes")
    assert rc == 0, err
    res = json.loads(out)
    assert res["already"] is False and res["promotions"] == 2
    assert res["promoted"] == len(tuned) and res["promoted_now"] == len(tuned) - proven
    assert res["rollback_restores"] == state["remote"]["promotion"]["backup"] != res["backup"]
    assert Path(res["backup"]).read_bytes() != before                # the live table as it was just now
    got = _promoted(job)
    assert {(r["m"], r["n"], r["k"]) for _, r in got.iterrows()} <= tuned and len(got) > proven
    assert set(got["verdict"]) - {"improved"}, "--rows all promotes rows that are not proven too"
    rows = pd.read_csv(live, dtype=str)
    assert tuned <= {(r["M"], r["N"], r["K"]) for _, r in rows.iterrows()}
    st = json.loads((job / "state.json").read_text())
    assert st["steps"]["promote"]["info"]["engaged"]["total"] == len(tuned)   # checked like any promotion
    # the same again: idempotent
    promoted = live.read_bytes()
    rc, out, _ = _cli(ws, capsys, "promote", job.name, "--rows", "all", "--yes")
    assert rc == 0 and json.loads(out)["already"] is True and live.read_bytes() == promoted
    rc, out, _ = _cli(ws, capsys, "promote", job.name)
    assert rc == 0 and json.loads(out)["already"] is True and live.read_bytes() == promoted

    # rollback: the table as before the job's FIRST promotion, byte for byte
    rc, out, err = _cli(ws, capsys, "rollback", job.name)
    assert rc == 0, err
    res = json.loads(out)
    assert res["already"] is False and "before the job's first promotion (2 promotion(s) undone)" in res["restored"]
    assert live.read_bytes() == before and _promoted(job).empty


def test_the_report_is_rendered_again_after_a_later_promote_and_rollback(ws, capsys):
    job = _demo(ws, capsys)
    proven = len(_promoted(job))
    assert f" {proven} promoted, " in (job / "report.md").read_text()

    assert _cli(ws, capsys, "promote", job.name, "--rows", "all", "--yes")[0] == 0
    n = len(_promoted(job))
    md, html = (job / "report.md").read_text(), (job / "report.html").read_text()
    assert f" {n} promoted, " in md and f" {proven} promoted, " not in md
    head = md[:md.index("## ")]
    assert "**The outcome changed after the job:**" in head and "`tune-remote promote --rows all`" in head
    assert md.count("(promoted)") == n and "Promotion 2 (all, " in md
    assert 'id="outcome-changed"' in html and "tune-remote promote --rows all" in html
    state = json.loads((job / "state.json").read_text())
    assert Path(state["remote"]["report_md"]).read_text() == md        # the node's copy too

    assert _cli(ws, capsys, "rollback", job.name)[0] == 0
    md = (job / "report.md").read_text()
    assert " 0 promoted, " in md and "(promoted)" not in md
    assert "`tune-remote rollback`" in md[:md.index("## ")] and "- Rolled back at " in md
    assert "Before the rollback: Engaged at runtime" in md
    assert "`tune-remote rollback`" in (job / "report.html").read_text()


def test_a_campaign_promotes_rolls_back_and_exports_through_its_targets(ws, capsys):
    job = _demo(ws, capsys, "--nodes", "3")
    targets = {}
    for d in (job / "targets").iterdir():
        st = json.loads((d / "state.json").read_text())
        targets[st["node"]] = (Path(st["remote"]["live_csv"]), Path(st["remote"]["promotion"]["backup"]).read_bytes())
    assert set(targets) == {"demo1", "demo2", "demo3"}
    assert all(live.read_bytes() != before for live, before in targets.values())

    rc, out, err = _cli(ws, capsys, "promote", job.name, "--rows", "all", "--yes")
    assert rc == 0, err
    rows = {r["node"]: r for r in json.loads(out)["targets"]}
    assert all(rows[n]["promoted_now"] > 0 and rows[n]["promotions"] == 2 for n in rows)
    assert any("demo2 promoted on demo1" in x for x in rows["demo1"]["spread"])
    assert "The outcome changed after the campaign" in (job / "report.md").read_text()
    rc, out, _ = _cli(ws, capsys, "promote", job.name, "--rows", "all", "--yes")
    assert rc == 0 and all(r["already"] for r in json.loads(out)["targets"])

    rc, out, err = _cli(ws, capsys, "rollback", job.name)
    assert rc == 0, err
    rows = {r["node"]: r for r in json.loads(out)["targets"]}
    assert [x.split(" (")[0] for x in rows["demo1"]["undone"]] == ["the rows of demo2", "its own rows"]
    assert [x.split(" (")[0] for x in rows["demo3"]["undone"]] == ["its own rows"]      # a kind of its own
    for node, (live, before) in targets.items():        # own rows and the rows spread onto it: all undone
        assert live.read_bytes() == before, node
    assert _promoted(job).empty
    rc, out, _ = _cli(ws, capsys, "rollback", job.name)
    assert rc == 0 and all(r["already"] for r in json.loads(out)["targets"])
    rc, _, err = _cli(ws, capsys, "rollback", job.name, "--node", "nosuch")
    assert rc == 2 and "no target on node 'nosuch'" in err

    rc, out, err = _cli(ws, capsys, "export", job.name, "--model-config", "dsv3")
    assert rc == 0, err
    res = json.loads(out)["variants"]["a8w8_blockscale"]
    exported = pd.read_csv(res["csv"], dtype=str)
    assert len(exported) == res["rows"] > 0 and set(exported["cu_num"]) == {"256", "64"}
    assert "demo3/simulated" in Path(res["summary"]).read_text()
