"""The team's store on SQLite (issue 39): migrated on open, a newer schema refused, every record of a demo job
written as it goes, a re-sync and an import doubling nothing, a failed write lost nowhere."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa

from orchestrator.cli import main
from orchestrator.errors import ExitCode
from orchestrator.state import Workspace
from orchestrator.store import PromotionConflict, Store, StoreTooNew, resolve_url
from orchestrator.store import db, schema, sync


def _demo(ws, url, *extra) -> dict:
    assert main(["-q", "--workspace", str(ws), "--store", url, "demo", "--repeats", "2", *extra]) == 0
    return Workspace(ws).jobs()[0]


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """One demo job synced into a store of its own."""
    d = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{d / 'team.sqlite'}"
    job = _demo(d / "ws", url)
    return d, url, job


def test_the_migrated_schema_is_the_one_the_code_writes_and_head_is_alembic_s(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.config import Config
    store = Store.open(f"sqlite:///{tmp_path / 's.sqlite'}")
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), schema.metadata) == []
        assert store.revision(conn) == db.HEAD
    cfg = Config()
    cfg.set_main_option("script_location", str(db.MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == db.HEAD
    Store.open(store.url)           # opening again migrates nothing


def test_a_store_of_a_newer_schema_is_refused_with_a_hint(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    store = Store.open(url)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0042'"))
    with pytest.raises(StoreTooNew, match="0042, newer than this tune-remote knows") as exc:
        Store.open(url)
    assert "upgrade tune-remote" in exc.value.hint
    assert main(["--store", url, "store", "info"]) == ExitCode.USAGE
    assert "newer than this tune-remote knows" in capsys.readouterr().err


def test_an_unreachable_database_is_one_line_and_exit_3(tmp_path, capsys):
    rc = main(["--workspace", str(tmp_path), "--store", "postgresql://nobody@127.0.0.1:1/team", "status"])
    err = capsys.readouterr().err
    assert rc == ExitCode.CONNECT
    assert err.count("\n") == 1 and "unreachable" in err and "--store none" in err


def test_store_none_and_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("TUNE_REMOTE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert resolve_url(None) == f"sqlite:///{tmp_path}/tune-remote/store.sqlite"
    assert resolve_url("none") is None
    monkeypatch.setenv("TUNE_REMOTE_STORE", "None")
    assert resolve_url(None) is None and resolve_url("sqlite:///x") == "sqlite:///x"


def test_a_demo_job_is_in_the_store_with_its_gpu_versions_rows_samples_and_promotions(one):
    d, url, job = one
    store = Store.open(url)
    comp = json.loads((Workspace(d / "ws").job_dir(job.job_id) / "comparison.json").read_text())
    with store.engine.connect() as conn:
        rec = conn.execute(sa.select(schema.jobs)).mappings().one()
        assert (rec["gfx"], rec["cu_num"], rec["gpu_model"], rec["pci_device_id"]) == \
            ("gfx950", 256, "AMD Instinct MI355X", "0x75a3")
        assert rec["aiter_version"] == job.facts.version and rec["rocm_version"] == job.facts.to_dict()["rocm_version"] == "7.0.2"
        assert rec["state"] == "succeeded" and "_tune.py" in rec["tuner_command"]
        assert json.loads(rec["request"])["repeats"] == 2
        n_samples = conn.execute(sa.select(sa.func.count()).select_from(schema.samples)).scalar()
    assert n_samples == sum(r["before_n"] + r["after_n"] for r in comp["rows"])
    counts = store.counts()
    promoted = len(job.remote.promotion["promoted"])
    assert counts["results"] == len(comp["rows"]) and counts["team_rows"] == promoted > 0
    assert counts["events"] == promoted and counts["tuned_rows"] >= promoted


def test_a_resync_and_an_import_double_nothing(one, capsys):
    d, url, job = one
    store = Store.open(url)
    before = store.counts()
    sync._SEEN.clear()
    sync.sync_job(store, Workspace(d / "ws"), job)
    assert store.counts() == before
    assert main(["--store", url, "store", "import", str(d / "ws")]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == before


def test_a_write_that_fails_mid_sync_loses_nothing_once_the_database_is_back(one, tmp_path, monkeypatch):
    d, _, job = one
    store = Store.open(f"sqlite:///{tmp_path / 'killed.sqlite'}")
    real = sync.write_comparison

    def dies(*a, **k):
        real(*a, **k)
        raise sa.exc.OperationalError("INSERT", {}, Exception("server closed the connection unexpectedly"))
    monkeypatch.setattr(sync, "write_comparison", dies)
    with pytest.raises(sa.exc.OperationalError):
        sync.sync_job(store, Workspace(d / "ws"), job)
    assert store.counts()["jobs"] == 0          # the transaction went with the connection
    monkeypatch.setattr(sync, "write_comparison", real)
    sync.sync_job(store, Workspace(d / "ws"), job)
    assert store.counts() == Store.open(f"sqlite:///{d / 'team.sqlite'}").counts()


def test_two_laptops_promoting_one_key_at_once_one_wins_the_other_is_told(tmp_path):
    url = f"sqlite:///{tmp_path / 'race.sqlite'}"
    store = Store.open(url)
    with store.engine.begin() as conn:
        store.upsert(conn, schema.jobs, [{"uid": u, "job_id": u, "origin": f"laptop-{u}"} for u in ("a", "b")],
                     ["uid"])
    key = {"gfx": "gfx950", "cu_num": 256, "table_name": "t.csv", "row_key": "m=1,n=2,k=3", "at": 1.0}
    out, go = {}, threading.Barrier(2)

    def promote(uid):
        mine = Store.open(url)
        go.wait()
        try:
            mine.claim_one(uid, key)
            out[uid] = "won"
        except PromotionConflict as exc:
            out[uid] = exc.holder["held_by"]
    threads = [threading.Thread(target=promote, args=(u,)) for u in ("a", "b")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winner = next(u for u, v in out.items() if v == "won")
    loser = "b" if winner == "a" else "a"
    assert out[loser] == winner
    assert store.counts()["team_rows"] == 1
    store.claim_one(winner, key)                # the holder promoting again: no conflict


def test_a_second_laptop_is_told_the_team_rows_it_promoted_second_and_rows_shows_the_first(one, capsys):
    d, url, job = one
    # (--reuse none: the second laptop tunes the same keys itself; with the default it would promote the
    # first one's very rows, which tells nobody anything: test_reuse_proven_is_the_default...)
    assert main(["-q", "--workspace", str(d / "ws2"), "--store", url, "demo", "--repeats", "2",
                 "--reuse", "none"]) == 0
    err = capsys.readouterr().err
    assert "the team's row was promoted first by job " + job.job_id in err
    assert main(["--store", url, "rows", "--json", "--gpu", "MI355X"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found and {r["job_id"] for r in found} == {job.job_id}
    assert {r["origin"].split(":", 1)[1] for r in found} == {str((d / "ws").resolve())}
    assert all(r["row"] and r["aiter_version"] == job.facts.version for r in found)
    assert main(["--store", url, "rows", "--json", "--aiter", "0.0.1"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["--store", url, "rows", "--export", "--variant", job.variant]) == 0
    text = capsys.readouterr().out.splitlines()
    tuned = Workspace(d / "ws").job_dir(job.job_id) / __import__("pathlib").Path(job.remote.tuned_csv).name
    assert text[0] == tuned.read_text().splitlines()[0] and len(text) == len(found) + 1


def test_an_unwritable_default_store_never_stops_a_job(tmp_path, monkeypatch, capsys):
    from pathlib import Path
    from orchestrator.cli import store as cli_store
    monkeypatch.delenv("TUNE_REMOTE_STORE", raising=False)
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "file"))
    assert main(["-q", "--workspace", str(tmp_path / "ws"), "demo", "--repeats", "1"]) == 0
    assert Workspace(tmp_path / "ws").jobs()[0].state == "succeeded"
    # a real node's job (a fixture's state.json) saved with the default store unwritable: one warning, no raise
    ws = Workspace(tmp_path / "real")
    fixture = sorted((Path(__file__).parents[1] / "fixtures" / "state").glob("*.json"))[0]
    (ws.root / "j").mkdir(parents=True)
    data = {**json.loads(fixture.read_text()), "job_id": "j"}
    data["request"] = {k: v for k, v in data["request"].items() if k not in ("demo_dir", "demo_nodes")}
    (ws.root / "j" / "state.json").write_text(json.dumps(data))       # as if its node were a real one
    job = ws.load("j")
    assert not (job.request.get("demo_dir") or job.request.get("demo_nodes"))
    cli_store._QUIET["failed_at"].clear()
    ws.save(job)
    ws.save(job)
    err = capsys.readouterr().err
    assert err.count("warning: store sqlite:///") == 1 and "the job goes on" in err


def test_a_demo_never_writes_the_default_store(tmp_path, monkeypatch):
    """A simulated node's rows (gfx950/cu_num 256, as a real MI355X's) would hold the team's keys: a demo is
    written only to a store asked for (--store URL, $TUNE_REMOTE_STORE)."""
    monkeypatch.delenv("TUNE_REMOTE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert main(["-q", "--workspace", str(tmp_path / "ws"), "demo", "--repeats", "1"]) == 0
    assert not (tmp_path / "data" / "tune-remote" / "store.sqlite").exists()


def test_old_jobs_of_the_fixtures_sync(tmp_path):
    from pathlib import Path
    store = Store.open(f"sqlite:///{tmp_path / 's.sqlite'}")
    fixtures = sorted((Path(__file__).parents[1] / "fixtures" / "state").glob("*.json"))
    ws = Workspace(tmp_path / "ws")
    for i, f in enumerate(fixtures):
        d = ws.root / f"j{i}"
        d.mkdir(parents=True)
        data = json.loads(f.read_text())
        data["job_id"] = f"j{i}"
        (d / "state.json").write_text(json.dumps(data))
        sync.sync_job(store, ws, ws.load(f"j{i}"))
    assert store.counts()["jobs"] == len(fixtures)


def test_a_recheck_s_demotion_releases_the_team_row_and_audit_findings_are_kept(one, tmp_path, capsys):
    from orchestrator.store.events import record_audit
    d, _, job = one
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    assert main(["--store", url, "store", "import", str(d / "ws")]) == 0
    capsys.readouterr()
    store = Store.open(url)
    with store.engine.connect() as conn:
        held = conn.execute(sa.select(schema.team_rows.c.row_key)).scalars().all()
    first = dict(kv.split("=") for kv in held[0].split(","))
    rdir = d / "ws" / "recheck-1"
    rdir.mkdir(exist_ok=True)
    live = job.remote.live_csv
    (rdir / "recheck.json").write_text(json.dumps({
        "id": "recheck-1", "node": "demo", "time": 5.0, "now": {"gfx": "gfx950", "cu_num": 256},
        "rows": [{"variant": job.variant, "live": live, "key": {c: int(v) for c, v in first.items()},
                  "job_id": job.job_id, "verdict": "slower_now"},
                 {"variant": job.variant, "live": live, "key": {"m": 1, "n": 1, "k": 1}, "job_id": job.job_id,
                  "verdict": "still_faster"}],
        "demotion": {"tables": [{"live": live}]}}))
    before = store.counts()
    for _ in range(2):
        assert main(["--store", url, "store", "import", str(d / "ws")]) == 0
        assert json.loads(capsys.readouterr().out)["rechecks"] == 1
    after = store.counts()
    (rdir / "recheck.json").unlink()
    assert after["team_rows"] == before["team_rows"] - 1 and after["events"] == before["events"] + 3
    with store.engine.connect() as conn:
        assert held[0] not in conn.execute(sa.select(schema.team_rows.c.row_key)).scalars().all()
    finding = {"kind": "copied_us", "file": "/x/a8w8_tuned_gemm.csv", "key": {"m": 1}, "detail": "same us"}
    assert record_audit(store, [finding], node="n1") == 1
    record_audit(store, [finding], node="n1")
    assert store.counts()["events"] == after["events"] + 1


def _untuned(job_dir) -> list[str]:
    (path,) = (job_dir / "untuned").glob("*.csv")
    return path.read_text().splitlines()[1:]


def test_reuse_proven_is_the_default_and_measures_the_team_s_rows_before_promoting_them(one, tmp_path, capsys):
    """The second laptop does not tune the team's proven shapes: their rows go into its staging table as if
    its tuner had written them, the benchmarks measure them with the rest and only proven ones are promoted;
    the plan names the job, node and laptop each row came from."""
    d, _, job = one
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    assert main(["--store", url, "store", "import", str(d / "ws")]) == 0
    assert main(["-q", "--workspace", str(tmp_path / "ws"), "--store", url, "demo", "--repeats", "1"]) == 0
    err = capsys.readouterr().err
    ws = Workspace(tmp_path / "ws")
    second = ws.jobs()[0]
    held = set(map(tuple, job.remote.promotion["promoted"]))
    reused = second.steps["shapes"].info["reused"]
    assert len(second.shapes) == len(job.shapes) and len(reused) == len(held) > 0       # every shape in the job
    assert len(_untuned(ws.job_dir(second.job_id))) == len(job.shapes) - len(held)       # the tuner's list: the rest
    assert second.steps["shapes"].info["estimate_s"] < job.steps["shapes"].info["estimate_s"]
    origin = reused[0]["origin"]
    assert origin.endswith(str(d / "ws")) and {r["job_id"] for r in reused} == {job.job_id}
    assert any(f"{len(held)} shape(s) have a proven row" in n and f"from job {job.job_id} on demo ({origin})" in n
               and "same a8w8_blockscale kernel list" in n for n in second.notes)
    # the staging table holds the team's rows (their kernels) for the reused keys, as the tuner's would
    import csv
    staged = {(r["M"], r["N"], r["K"]): r["kernelName"] for r in
              csv.DictReader(open(ws.job_dir(second.job_id) / "a8w8_blockscale_tuned_gemm.csv"))}
    for r in reused:
        assert staged[tuple(str(r["key"][c]) for c in "mnk")] == r["row"]["kernelName"]
    # measured on this node: every reused key has both arms and a verdict; promoted only where proven
    comp = {tuple(x[c] for c in "mnk"): x for x in json.load(open(ws.job_dir(second.job_id) / "comparison.json"))["rows"]}
    keys = [tuple(r["key"][c] for c in "mnk") for r in reused]
    assert all(comp[k]["before"] and comp[k]["after"] and comp[k]["verdict"] for k in keys)
    promoted = {tuple(t[2:]) for t in second.remote.promotion["promoted"]}
    assert all((str(comp[k]["promoted"]).lower() == "true") == (tuple(map(str, k)) in {tuple(map(str, p)) for p in promoted})
               for k in keys)
    assert any(str(comp[k]["promoted"]).lower() == "true" for k in keys)
    assert "promoted first by job" not in err       # the same row promoted again: the team keeps it, nobody told
    # --reuse none tunes every shape again
    assert main(["-q", "--workspace", str(tmp_path / "ws3"), "--store", url, "demo", "--repeats", "1",
                 "--reuse", "none"]) == 0
    third = Workspace(tmp_path / "ws3").jobs()[0]
    assert "reused" not in third.steps["shapes"].info
    assert len(_untuned(Workspace(tmp_path / "ws3").job_dir(third.job_id))) == len(job.shapes)