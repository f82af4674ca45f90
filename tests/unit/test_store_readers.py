"""`recheck` and `audit` read the team's store (issue 39): the rows any laptop promoted on a node (rolled-back
and demoted ones out, an undone demotion back in), a second laptop's recheck measuring or reporting the first
laptop's rows with their provenance, audit's findings with who promoted their row, the rows the live tables
lack, the findings written; an unreachable store: exit 3 when asked for, a warning for the default one."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import sqlalchemy as sa

from orchestrator.audit_team import missing_rows, provenance, variant_of
from orchestrator.cli import main
from orchestrator.errors import ExitCode
from orchestrator.recheck.rows import Promoted, from_store, merged
from orchestrator.state import Workspace
from orchestrator.store import Store, schema
from orchestrator.store.events import record_audit, sync_recheck
from orchestrator.store.keys import job_uid
from orchestrator.store.query import promoted_on

T = "a8w8_blockscale_tuned_gemm.csv"


def _job(store, uid, job_id, *, node="n1", origin="lap:/ws", at=10.0, keys=(), later=()):
    """A job of ``node`` that promoted ``keys`` at ``at``; ``later``: (at, "promotion"|"rollback") changes."""
    with store.engine.begin() as conn:
        store.upsert(conn, schema.jobs, [{"uid": uid, "job_id": job_id, "origin": origin, "node": node,
                                          "container": "c1", "variant": "a8w8_blockscale", "gfx": "gfx950",
                                          "cu_num": 256, "aiter_version": "0.1.20", "rocm_version": "7.0.2",
                                          "gpu_model": "AMD Instinct MI355X"}], ["uid"])
        ev = [{"kind": "promotion", "natural": f"{uid}|{T}|{k}", "job_uid": uid, "table_name": T, "row_key": k,
               "gfx": "gfx950", "cu_num": 256, "node": node, "at": at, "detail": None} for k in keys]
        ev += [{"kind": kind, "natural": f"{uid}|{T}|{t}", "job_uid": uid, "table_name": T, "row_key": None,
                "gfx": "gfx950", "cu_num": 256, "node": node, "at": t, "detail": "{}"} for t, kind in later]
        store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)


@pytest.fixture
def store(tmp_path):
    return Store.open(f"sqlite:///{tmp_path / 'team.sqlite'}")


def test_the_rows_live_on_a_node_are_each_key_s_newest_promotion_not_rolled_back_nor_demoted(store, tmp_path):
    _job(store, "a", "job-a", origin="lapA:/ws", at=10.0, keys=["m=1,n=512,k=7168", "m=16,n=512,k=7168"])
    _job(store, "b", "job-b", origin="lapB:/ws", at=20.0, keys=["m=16,n=512,k=7168"])          # newer: wins m=16
    _job(store, "c", "job-c", at=30.0, keys=["m=64,n=512,k=7168"], later=[(40.0, "rollback")])
    _job(store, "d", "job-d", at=30.0, keys=["m=128,n=512,k=7168"],                           # rolled back, then
         later=[(40.0, "rollback"), (50.0, "promotion")])                                     # promoted again
    _job(store, "e", "job-e", node="n2", at=30.0, keys=["m=1,n=512,k=7168"])
    got = {(r["node"], r["row_key"]): r for r in promoted_on(store, ["n1"])}
    assert set(got) == {("n1", "m=1,n=512,k=7168"), ("n1", "m=16,n=512,k=7168"), ("n1", "m=128,n=512,k=7168")}
    assert got[("n1", "m=16,n=512,k=7168")]["job_id"] == "job-b"
    assert got[("n1", "m=16,n=512,k=7168")]["origin"] == "lapB:/ws"
    assert got[("n1", "m=1,n=512,k=7168")]["aiter_version"] == "0.1.20"
    assert {r["node"] for r in promoted_on(store, ["n1", "n2"])} == {"n1", "n2"}

    # a recheck on n1 demoted m=1 (slower_now): it is no longer live; its undo brings it back
    rdir = tmp_path / "recheck-1"
    rdir.mkdir()
    doc = {"id": "recheck-1", "node": "n1", "time": 60.0, "now": {"gfx": "gfx950", "cu_num": 256},
           "rows": [{"variant": "a8w8_blockscale", "live": f"/r/{T}", "key": {"m": "1", "n": "512", "k": "7168"},
                     "job_id": "job-a", "job_uid": "a", "promoted_at": 10.0, "verdict": "slower_now"}],
           "demotion": {"tables": [{"live": f"/r/{T}"}]}}
    (rdir / "recheck.json").write_text(json.dumps(doc))
    with store.engine.begin() as conn:
        store.claim(conn, "a", [{"gfx": "gfx950", "cu_num": 256, "table_name": T, "row_key": "m=1,n=512,k=7168",
                                 "at": 10.0}])
    sync_recheck(store, rdir)
    assert ("n1", "m=1,n=512,k=7168") not in {(r["node"], r["row_key"]) for r in promoted_on(store, ["n1"])}
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.team_rows)).scalar() == 0
    doc["demotion"]["undone"] = [{"live": f"/r/{T}", "already": False}]
    (rdir / "recheck.json").write_text(json.dumps(doc))
    sync_recheck(store, rdir)
    sync_recheck(store, rdir)                      # again: nothing doubled
    assert ("n1", "m=1,n=512,k=7168") in {(r["node"], r["row_key"]) for r in promoted_on(store, ["n1"])}
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(schema.team_rows.c.job_uid)).scalars().all() == ["a"]
        kinds = conn.execute(sa.select(schema.events.c.kind).where(schema.events.c.natural.like("recheck-1|%"))
                             ).scalars().all()
    assert sorted(kinds) == ["demotion", "demotion_undone", "recheck"]


def test_a_store_row_of_the_workspace_s_own_job_is_that_row_and_a_newer_one_takes_its_live_table():
    class J:
        job_id, created = "job-a", 5.0
    mine = [Promoted("a8w8_blockscale", f"/root/aiter/configs/{T}", {"m": "1", "n": "512", "k": "7168"}, {},
                     "job-a", 10.0, created=5.0)]
    entry = {"node": "n1", "container": "c1", "variant": "a8w8_blockscale", "table_name": T, "gfx": "gfx950",
             "cu_num": 256, "job_id": "job-a", "job_uid": job_uid(J), "origin": "lapA:/ws", "promoted_at": 11.0,
             "aiter_version": "0.1.20", "rocm_version": "7.0.2", "gpu_model": "MI355X"}
    team = from_store([{**entry, "row_key": "m=1,n=512,k=7168"},
                       {**entry, "row_key": "m=16,n=512,k=7168", "job_uid": "x", "job_id": "job-x"},
                       {**entry, "node": "n2", "row_key": "m=2,n=512,k=7168"}], "n1", None)
    assert [(r.job_id, r.key["m"], r.live, r.prefix) for r in team] == [
        ("job-a", "1", "", {"gfx": "gfx950", "cu_num": "256"}), ("job-x", "16", "", {"gfx": "gfx950", "cu_num": "256"})]
    assert team[1].shape == {"m": 16, "n": 512, "k": 7168} and team[1].origin == "lapA:/ws"
    rows = merged(mine, team)
    assert [(r.job_id, r.key["m"], r.live) for r in rows] == [("job-a", "1", f"/root/aiter/configs/{T}"),
                                                             ("job-x", "16", "")]
    newer = from_store([{**entry, "row_key": "m=1,n=512,k=7168", "job_uid": "y", "job_id": "job-y",
                         "promoted_at": 99.0}], "n1", None)
    (row,) = merged(mine, newer)
    assert (row.job_id, row.live, row.origin) == ("job-y", f"/root/aiter/configs/{T}", "lapA:/ws")


def _demo(ws, url, *extra):
    assert main(["-q", "--workspace", str(ws), "--store", url, "demo", "--repeats", "2", *extra]) == 0
    return Workspace(ws).jobs()[0]


def test_a_second_laptop_s_recheck_sees_the_first_s_rows_with_their_provenance(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    a = _demo(tmp_path / "a", url)
    b = _demo(tmp_path / "b", url, "--aa")           # an A/A node: laptop B promotes nothing of its own
    assert a.node == b.node and a.remote.promotion["promoted"] and not (b.remote.promotion or {}).get("promoted")
    capsys.readouterr()
    store = Store.open(url)
    with store.engine.begin() as conn:           # and a row A promoted into a table B's node does not read
        store.upsert(conn, schema.events, [{
            "kind": "promotion", "natural": "x|model_configs", "job_uid": job_uid(a), "node": a.node,
            "table_name": "dsv3_a8w8_blockscale_tuned_gemm.csv", "row_key": "m=3,n=512,k=7168", "gfx": "gfx950",
            "cu_num": 256, "at": 1.0, "detail": None}], ["kind", "natural"], update=False)
    # without a store: exactly as before (laptop B's workspace promoted nothing there)
    assert main(["--workspace", str(tmp_path / "b"), "--store", "none", "recheck", "--node", b.node]) == 2
    assert "no job in this workspace promoted a row on demo" in capsys.readouterr().err
    assert main(["--workspace", str(tmp_path / "b"), "--store", url, "--json", "recheck", "--node", b.node,
                 "--repeats", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    doc = json.loads((tmp_path / "b" / out["recheck"] / "recheck.json").read_text())
    promoted = len(a.remote.promotion["promoted"])
    assert len(doc["rows"]) == promoted + 1
    (other,) = [m for m in out["missing"] if m["live"] == "dsv3_a8w8_blockscale_tuned_gemm.csv"]
    assert other["key"] == {"m": "3", "n": "512", "k": "7168"} and other["job_id"] == a.job_id
    assert other["why"] == f"its table is not the live table of a8w8_blockscale here ({b.remote.live_csv})"
    out["missing"].remove(other)
    assert {(r["job_id"], r["origin"], r["source"]) for r in doc["rows"]} == \
        {(a.job_id, f"{__import__('socket').gethostname()}:{(tmp_path / 'a').resolve()}", "store")}
    live = b.remote.live_csv
    held = pd.read_csv(live)
    here = {(int(m), int(n), int(k)) for m, n, k in zip(held["M"], held["N"], held["K"])}
    gone = {(int(r["key"]["m"]), int(r["key"]["n"]), int(r["key"]["k"])) for r in doc["rows"]
            if r["live"] == live} - here
    assert gone and {(int(m["key"]["m"]), int(m["key"]["n"]), int(m["key"]["k"])) for m in out["missing"]} == gone
    assert all(m["why"] == "not in the live table now" and m["live"] == live for m in out["missing"])
    assert any("the team's store says job" in n for n in doc["notes"])
    with Store.open(url).engine.connect() as conn:      # the verdicts are in the store as the recheck ends
        n = conn.execute(sa.select(sa.func.count()).select_from(schema.events)
                         .where(schema.events.c.kind == "recheck")).scalar()
    assert n == promoted + 1


def test_audit_findings_say_who_promoted_their_row_and_the_rows_the_live_tables_lack():
    team = [{"node": "n1", "container": "c1", "variant": "a8w8_blockscale", "table_name": T, "row_key": k,
             "gfx": "gfx950", "cu_num": 256, "job_id": "job-a", "job_uid": "a", "origin": "lapA:/ws",
             "promoted_at": 10.0, "aiter_version": "0.1.20", "aiter_commit": None, "gpu_model": "MI355X"}
            for k in ("m=16,n=512,k=7168", "m=32,n=512,k=7168", "m=64,n=512,k=7168")]
    df = pd.DataFrame({"gfx": ["gfx950", "gfx950", "gfx942"], "cu_num": [256, 256, 304], "M": [16, 1, 64],
                       "N": [512, 512, 512], "K": [7168, 7168, 7168], "us": [1.0, 2.0, 3.0]})
    label = f"aiter/configs/{T}"
    assert variant_of(label) == "a8w8_blockscale"
    assert variant_of(f"aiter/configs/model_configs/dsv3_{T}") == "a8w8_blockscale"
    findings = [{"kind": "err_ratio", "file": label, "key": {"gfx": "gfx950", "cu_num": "256", "M": "16", "N": "512",
                                                              "K": "7168"}, "detail": "x"},
                {"kind": "err_ratio", "file": label, "key": {"gfx": "gfx950", "cu_num": "256", "M": "1", "N": "512",
                                                              "K": "7168"}, "detail": "y"}]
    got = provenance(findings, team)
    assert got[0]["promoted_by"]["job_id"] == "job-a" and got[0]["promoted_by"]["origin"] == "lapA:/ws"
    assert got[1]["promoted_by"] is None and {k: got[1][k] for k in findings[1]} == findings[1]
    miss = missing_rows([(label, df)], team)          # m=32 is nowhere; m=64 only for another GPU kind
    assert [(m["kind"], m["file"], m["key"]) for m in miss] == [     # keyed as the table's other findings
        ("missing_row", label, {"gfx": "gfx950", "cu_num": "256", "M": "32", "N": "512", "K": "7168"}),
        ("missing_row", label, {"gfx": "gfx950", "cu_num": "256", "M": "64", "N": "512", "K": "7168"})]
    assert "job-a (lapA:/ws)" in miss[0]["detail"] and miss[0]["promoted_by"]["job_uid"] == "a"
    (elsewhere,) = missing_rows([("aiter/configs/other_tuned_gemm.csv", df)], team[:1])
    assert elsewhere["file"] == T and elsewhere["key"] == {"m": "16", "n": "512", "k": "7168"}
    assert "not among the container's live tables" in elsewhere["detail"]


def test_audit_findings_are_written_once_with_table_key_kind_node_and_aiter(store):
    f = {"kind": "copied_us", "file": f"aiter/configs/{T}", "key": {"gfx": "gfx950", "cu_num": "256", "M": "16",
                                                                    "N": "512", "K": "7168"}, "detail": "same us",
         "promoted_by": {"job_uid": "a", "job_id": "job-a"}}
    kw = dict(node="n1", gfx="gfx950", cu_num=256, at=5.0, aiter={"version": "0.1.20", "commit": "abc"},
              variants={f"aiter/configs/{T}": "a8w8_blockscale"})
    assert record_audit(store, [f], **kw) == 1
    record_audit(store, [f], **kw)
    with store.engine.connect() as conn:
        (ev,) = conn.execute(sa.select(schema.events).where(schema.events.c.kind == "audit")).mappings().all()
    assert (ev["table_name"], ev["row_key"], ev["node"], ev["gfx"], ev["cu_num"], ev["job_uid"]) == \
        (T, "m=16,n=512,k=7168", "n1", "gfx950", 256, "a")
    detail = json.loads(ev["detail"])
    assert detail["kind"] == "copied_us" and detail["aiter"] == {"version": "0.1.20", "commit": "abc"}
    record_audit(store, [f], **{**kw, "aiter": {"version": "0.1.21", "commit": "def"}})   # another AITER: new
    assert store.counts()["events"] == 2


def test_an_unreachable_store_asked_for_is_exit_3_and_the_default_one_a_warning(tmp_path, capsys, monkeypatch):
    bad = "postgresql://nobody@127.0.0.1:1/team"
    for argv in (["recheck", "--node", "n1"], ["audit", "--node", "n1"], ["recheck", "--node", "n1", "--all-nodes"]):
        assert main(["--workspace", str(tmp_path), "--store", bad, *argv]) == ExitCode.CONNECT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "unreachable" in err and "--store none" in err
    monkeypatch.delenv("TUNE_REMOTE_STORE", raising=False)
    (tmp_path / "xdg").write_text("a file, not a directory: the default store cannot be made")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert main(["--workspace", str(tmp_path / "ws"), "recheck", "--node", "n1"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("tune-remote: warning: store sqlite:///") and "read without it" in err[0]
    assert "no job in this workspace promoted a row on n1" in err[1]
    (tmp_path / "xdg2").write_text("")         # another default store (a warning is given once per process)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg2"))
    assert main(["--inventory", str(tmp_path / "none.yaml"), "audit", "--node", "n1"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()           # the audit goes on without it: to the inventory
    assert len(err) == 2 and "read without it" in err[0] and "inventory" in err[1]


def test_all_nodes_are_the_inventory_s_nodes_of_the_named_nodes_gpu_kind(monkeypatch):
    from orchestrator import fleet
    from orchestrator.errors import ConnectError
    from orchestrator.inventory_model import ContainerSpec, Inventory, NodeSpec
    nodes = {n: NodeSpec(name=n, host=n, containers={f"{n}-c": ContainerSpec(name=f"{n}-c")})
             for n in ("a", "b", "c", "d", "e")}
    inv = Inventory(path="inv.yaml", nodes=nodes, groups={"pair": ("a", "c")})
    kinds = {"a": ("gfx950", 256), "b": ("gfx950", 256), "c": ("gfx942", 80), "e": ("gfx942", 80)}
    asked = []

    def kind(_inv, name, container, _accept):
        asked.append((name, fleet.probe_container(_inv.node(name), container)))
        if name == "d":
            return None, ConnectError("ssh d: connection refused", hint="check the node")
        return kinds[name], None
    monkeypatch.setattr(fleet, "_kind", kind)
    got = fleet.same_kind(inv, ["a"])
    assert got.nodes == ["a", "b"] and got.kind_text() == "gfx950/cu_num=256"
    assert got.skipped == [{"node": "d", "why": "GPU kind unknown: ssh d: connection refused (hint: check the node)"}]
    assert sorted(asked) == [(n, f"{n}-c") for n in "abcde"]            # every node probed, in its container
    assert fleet.same_kind(inv, ["pair"]).nodes == ["a", "b", "c", "e"]  # a group: the kinds of its nodes
    with pytest.raises(ConnectError):                                   # the named node's own error
        fleet.same_kind(inv, ["d"])
    assert fleet.lacks(nodes["a"], "a-c") is None and fleet.lacks(nodes["a"], None) is None
    assert fleet.lacks(nodes["a"], "x") == "no container x (its containers: a-c)"


def test_rows_a_campaign_spread_onto_a_peer_node_are_live_there_in_the_store(tmp_path):
    """A campaign's spread (remote.peer_promotions of the peer's sub-job) promotes rows on a node whose own
    job tuned none: the store lists them there for any laptop's recheck/audit (they were missing), a rolled-back
    spread not; the source job keeps the team's key (no claim, no 'promoted first' warning)."""
    from orchestrator.store.sync import sync_job
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    a = _demo(tmp_path / "a", url)
    b = _demo(tmp_path / "b", url, "--aa")
    store = Store.open(url)
    assert not [r for r in promoted_on(store, [b.node]) if r["job_id"] == b.job_id]
    spread = a.remote.promotion["promoted"][:2]
    # (both demos' node is "demo": the spread is newer than A's own promotion of those keys there)
    now = __import__("time").time()
    b.remote.peer_promotions = [{"from": a.job_id, "promoted": spread, "live": b.remote.live_csv, "time": now},
                                {"from": "old", "promoted": a.remote.promotion["promoted"][2:4],
                                 "live": b.remote.live_csv, "time": now, "rolled_back": True}]
    assert sync_job(store, Workspace(tmp_path / "b"), b) == {"lost": []}
    mine = [r for r in promoted_on(store, [b.node]) if r["job_id"] == b.job_id]
    cols = ("m", "n", "k")
    assert sorted(r["row_key"] for r in mine) == sorted(
        ",".join(f"{c}={v}" for c, v in zip(cols, [str(x) for x in t[-3:]])) for t in spread)
