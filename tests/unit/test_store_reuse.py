"""The store's reuse (issue 39): the validator is the kernel list's fingerprint probed on the node (any AITER
version where it matches; an old record without one: the exact version), the default store never stops a
plan, and a watch's jobs consult the store like run's."""

from __future__ import annotations

import json
from types import SimpleNamespace

import sqlalchemy as sa

from orchestrator.nodeside.kernellist import kernel_list_digest
from orchestrator.store import Store, schema
from orchestrator.store.plan import plan_hook
from orchestrator.store.query import proven


def _aiter_tree(root, common="kernels_list = {0: 'a', 1: 'b'}\n"):
    d = root / "csrc" / "ck_gemm_a8w8_blockscale"
    d.mkdir(parents=True)
    (d / "gemm_a8w8_blockscale_tune.py").write_text("from gemm_a8w8_blockscale_common import kernels_list\n")
    (d / "gemm_a8w8_blockscale_common.py").write_text(common)
    (d / "gen_instances.py").write_text("def gen(k): return k\n")
    (d / "include").mkdir()
    (d / "include" / "x.cuh").write_text("// kernel templates: not the list\n")
    return d / "gemm_a8w8_blockscale_tune.py"


def test_the_kernel_list_fingerprint_follows_the_tuner_s_sources_not_the_version(tmp_path):
    a = kernel_list_digest(str(_aiter_tree(tmp_path / "v0.1.19")))
    b = kernel_list_digest(str(_aiter_tree(tmp_path / "v0.1.20")))
    c = kernel_list_digest(str(_aiter_tree(tmp_path / "v0.1.21", common="kernels_list = {0: 'a', 1: 'c'}\n")))
    assert a == b and a != c and len(a) == 64
    assert kernel_list_digest(str(tmp_path / "nowhere" / "x_tune.py")) is None


def _store_with(tmp_path, jobs: list[dict]) -> Store:
    store = Store.open(f"sqlite:///{tmp_path / 's.sqlite'}")
    with store.engine.begin() as conn:
        for i, j in enumerate(jobs):
            uid = f"u{i}"
            conn.execute(schema.jobs.insert().values(uid=uid, job_id=f"job{i}", origin=f"lap{i}:/ws", node=f"n{i}",
                                                     gfx="gfx950", cu_num=256, **j))
            conn.execute(schema.tuned_rows.insert().values(job_uid=uid, table_name="t.csv", gfx="gfx950",
                                                           cu_num=256, row_key=f"m={i}", row=json.dumps({"M": i})))
            conn.execute(schema.team_rows.insert().values(gfx="gfx950", cu_num=256, table_name="t.csv",
                                                          row_key=f"m={i}", job_uid=uid))
    return store


def test_a_row_is_reusable_where_the_kernel_list_matches_whatever_the_version(tmp_path):
    store = _store_with(tmp_path, [{"aiter_version": "0.1.19", "kernel_list": "F"},     # m=0: same list, older
                                   {"aiter_version": "0.1.20", "kernel_list": "G"},     # m=1: same version, other list
                                   {"aiter_version": "0.1.20", "kernel_list": None},    # m=2: revision 0001 record
                                   {"aiter_version": "0.1.18", "kernel_list": None}])   # m=3: old, other version
    ask = dict(gfx="gfx950", cu_num=256, table_name="t.csv", row_keys=["m=0", "m=1", "m=2", "m=3"])
    got = proven(store, aiter="0.1.20", kernel_list="F", **ask)
    assert sorted(got) == ["m=0", "m=2"] and got["m=0"]["row"] == {"M": 0} and got["m=0"]["node"] == "n0"
    assert sorted(proven(store, aiter="0.1.20", kernel_list=None, **ask)) == ["m=1", "m=2"]   # no probe: version
    assert proven(store, aiter="0.1.20", kernel_list="F", **{**ask, "cu_num": 80}) == {}       # another GPU kind


def test_the_schema_migrates_from_revision_0001_keeping_its_records(tmp_path):
    from alembic import command
    from alembic.config import Config
    from orchestrator.store import db
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        cfg = Config()
        cfg.set_main_option("script_location", str(db.MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(sa.text("INSERT INTO jobs (uid, job_id, origin, aiter_version) VALUES ('u', 'j', 'o', '1')"))
    eng.dispose()
    store = Store.open(url)
    with store.engine.connect() as conn:
        assert store.revision(conn) == "0002"
        assert conn.execute(sa.text("SELECT job_id, kernel_list FROM jobs")).all() == [("j", None)]


def _ctx(**request):
    info: dict = {}
    job = SimpleNamespace(request=request, facts=SimpleNamespace(gfx="gfx950", cu_num=256, version="0.1.20",
                                                                 get=lambda k, d=None: d),
                          notes=[], note=lambda m: job.notes.append(m),
                          step_state=lambda name: SimpleNamespace(info=info))
    return SimpleNamespace(job=job, variant=SimpleNamespace(name="v", key_columns=("m",), tuned_csv="t.csv"))


def test_an_unreadable_default_store_never_stops_a_plan_and_warns_once(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("not a directory")
    warned: list[str] = []
    shapes = [{"m": 1}, {"m": 2}]
    for _ in range(2):
        out = plan_hook(_ctx(), shapes, [], mode="proven", url=f"sqlite:///{bad}/store.sqlite", explicit=False,
                        warn=lambda t: warned.append(t) if t not in warned else None)
        assert out == shapes
    assert len(warned) == 1 and "the plan goes on without the store, every shape is tuned" in warned[0]


def test_a_demo_reads_the_default_store_never_and_none_never_asks(tmp_path):
    def boom(_):
        raise AssertionError("opened")
    import orchestrator.store.live as live
    saved, live.opened = live.opened, boom
    try:
        shapes = [{"m": 1}]
        assert plan_hook(_ctx(demo_dir="/d"), shapes, [], mode="proven", url="sqlite:///x", explicit=False,
                         warn=print) == shapes
        assert plan_hook(_ctx(), shapes, [], mode="none", url="sqlite:///x", explicit=True, warn=print) == shapes
    finally:
        live.opened = saved


def test_a_watch_s_jobs_plan_the_team_s_shapes_as_reused(tmp_path, capsys):
    """`watch` never tunes what the store already holds: its jobs pass through the shapes step's hook."""
    from orchestrator.cli import main
    from orchestrator.state import Workspace
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    assert main(["--workspace", str(tmp_path / "a"), "--store", url, "demo", "--watch"]) == 0
    first = sorted(Workspace(tmp_path / "a").jobs(), key=lambda j: j.created)[0]
    held = len(first.remote.promotion["promoted"])
    capsys.readouterr()
    assert main(["--workspace", str(tmp_path / "b"), "--store", url, "demo", "--watch"]) == 0
    job = sorted(Workspace(tmp_path / "b").jobs(), key=lambda j: j.created)[0]
    reused = job.steps["shapes"].info.get("reused") or []
    assert held > 0 and len(reused) >= held and {r["job_id"] for r in reused} <= {
        j.job_id for j in Workspace(tmp_path / "a").jobs()}
    (untuned,) = (Workspace(tmp_path / "b").job_dir(job.job_id) / "untuned").glob("*.csv")
    assert len(untuned.read_text().splitlines()) - 1 == len(job.shapes) - len(reused)
