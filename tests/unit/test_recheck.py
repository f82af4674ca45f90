"""tune-remote recheck (issue 29): verdicts, which rows the workspace promoted, the node ops that take rows out of
a live table (recheck_tables, demote) and the rollback that puts them back; the simulator's upgrade knob."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.recheck.judge import VERDICTS, counts, judge_rows
from orchestrator.recheck.report import csv_text
from orchestrator.recheck.rows import promoted_rows
from orchestrator.state import JobState

HEAD = "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
LIVE = (HEAD + "gfx950,256,1,1536,7168,3,0,9.1,k_shipped\n"
        "gfx950,256,16,1536,7168,5,0,8.0,k_promoted16\n"
        "gfx950,256,32,1536,7168,6,0,9.9,k_kept32\n"
        "gfx950,256,64,4096,512,7,0,4.0,k_promoted64\n")


# ------------------------------------------------------------------------------------------ verdicts

def test_a_row_slower_than_what_aiter_serves_without_it_is_slower_now():
    got = judge_rows({"a": ([11.0, 11.1, 11.05], [10.0, 10.1, 10.05])}, higher_is_better=False)["a"]
    assert got["verdict"] == "slower_now"
    assert got["with_row"] == 11.05 and got["without_row"] == 10.05 and got["speedup_pct"] < 0


def test_a_row_that_still_wins_is_still_faster_and_one_within_noise_no_longer_faster():
    got = judge_rows({"fast": ([8.0, 8.05, 8.1], [10.0, 10.1, 10.05]),
                      "same": ([10.0, 10.2, 10.1], [10.1, 10.0, 10.2])}, higher_is_better=False)
    assert got["fast"]["verdict"] == "still_faster" and got["fast"]["speedup_pct"] > 0
    assert got["same"]["verdict"] == "no_longer_faster"


def test_higher_is_better_metrics_judge_the_other_way_round():
    got = judge_rows({"a": ([100.0, 101.0, 100.5], [120.0, 121.0, 120.5])}, higher_is_better=True)["a"]
    assert got["verdict"] == "slower_now"


def test_an_arm_without_samples_gets_no_verdict_and_counts_as_not_measured():
    got = judge_rows({"a": ([], [10.0, 10.1])}, higher_is_better=False)["a"]
    assert got["verdict"] is None
    assert counts(["slower_now", None, "still_faster", "slower_now"]) == {
        "still_faster": 1, "no_longer_faster": 0, "slower_now": 2, "not_measured": 1}
    assert set(counts([])) == set(VERDICTS)


def test_recheck_csv_has_the_key_columns_then_the_contract_columns():
    rows = [{"variant": "a8w8_blockscale", "key": {"m": "16", "n": "1536", "k": "7168"}, "kernelName": "kx",
             "with_row": 11.0, "without_row": 10.0, "speedup_pct": -9.09, "verdict": "slower_now"},
            {"variant": "a8w8_blockscale", "key": {"m": "8", "n": "1536", "k": "7168"}, "verdict": None}]
    lines = csv_text(rows).splitlines()
    assert lines == ["m,n,k,kernelName,with_row,without_row,speedup_pct,verdict",
                     "16,1536,7168,kx,11,10,-9.09,slower_now"]


# ------------------------------------------------------------------------------------------ promoted rows

def _job(job_id, *, node="n1", container="c1", variant="a8w8_blockscale", promoted=(), rolled_back=False,
         at=1.0, peers=None):
    job = JobState(job_id=job_id, node=node, container=container, variant=variant, created=at, request={})
    job.shapes = [{"m": 16, "n": 1536, "k": 7168}]
    job.facts.version = "0.1.20"
    if promoted:
        job.remote.promotion = {"live": "/a/live.csv", "promoted": [list(k) for k in promoted],
                                "rolled_back": rolled_back, "time": at}
    if peers:
        job.remote.peer_promotions = peers
    return job


def test_promoted_rows_come_from_the_jobs_promotion_records_of_that_node_and_container():
    jobs = [_job("j1", promoted=[("gfx950", "256", "16", "1536", "7168")], at=1.0),
            _job("j2", promoted=[("gfx950", "256", "16", "1536", "7168"), ("256", "32", "1536", "7168")], at=2.0),
            _job("j3", promoted=[("gfx950", "256", "64", "4096", "512")], rolled_back=True),
            _job("j4", node="n2", promoted=[("gfx950", "256", "1", "1536", "7168")]),
            _job("j5", container="c2", promoted=[("gfx950", "256", "2", "1536", "7168")]),
            _job("j6", peers=[{"from": "x", "live": "/a/live.csv", "time": 3.0,
                               "promoted": [["gfx950", "256", "8", "1536", "7168"]]}])]
    rows = promoted_rows(jobs, "n1", "c1")
    got = {(r.key["m"], r.job_id): r for r in rows}
    assert set(got) == {("16", "j2"), ("32", "j2"), ("8", "j6")}       # newest promotion of a key wins
    assert got[("16", "j2")].node_key() == {"gfx": "gfx950", "cu_num": "256", "m": "16", "n": "1536", "k": "7168"}
    assert got[("32", "j2")].prefix == {"cu_num": "256"}
    assert got[("16", "j2")].shape == {"m": 16, "n": 1536, "k": 7168}   # the job's typed shape
    assert got[("16", "j2")].facts["version"] == "0.1.20"
    assert promoted_rows(jobs, "n1", "c1", variant="a8w8") == []
    assert {r.key["m"] for r in promoted_rows(jobs, "n1", None)} == {"16", "32", "8", "2"}


# ------------------------------------------------------------------------------------------ node ops

@pytest.fixture
def recheck_mod():
    from orchestrator.nodeside import recheck, staging
    return recheck, staging


KEY16 = {"gfx": "gfx950", "cu_num": "256", "m": "16", "n": "1536", "k": "7168"}
KEY64 = {"gfx": "gfx950", "cu_num": "256", "m": "64.0", "n": "4096", "k": "512"}


def test_the_without_table_is_the_live_table_without_the_rows_byte_for_byte(recheck_mod, tmp_path):
    recheck, _ = recheck_mod
    live = tmp_path / "live.csv"
    live.write_text(LIVE)
    res = recheck.op_recheck_tables({"live": str(live), "without": str(tmp_path / "w" / "t.csv"),
                                     "keys": [KEY16, {"m": "99", "n": "1", "k": "1"}, KEY64]})
    assert res["found"] == {"0": "k_promoted16", "2": "k_promoted64"}     # key 1 is not in the table
    assert (tmp_path / "w" / "t.csv").read_text() == (
        HEAD + "gfx950,256,1,1536,7168,3,0,9.1,k_shipped\ngfx950,256,32,1536,7168,6,0,9.9,k_kept32\n")
    assert live.read_text() == LIVE


def test_demote_backs_up_renames_a_complete_table_moves_the_module_aside_and_rollback_restores(recheck_mod,
                                                                                                tmp_path):
    recheck, staging = recheck_mod
    live = tmp_path / "live.csv"
    live.write_text(LIVE)
    live.chmod(0o640)
    jit = tmp_path / "jit"
    jit.mkdir()
    (jit / "module_x.so").write_bytes(b"built from LIVE")
    req = {"live": str(live), "backup_dir": str(tmp_path / "bk"), "keys": [KEY16], "modules": ["module_x"],
           "package_dir": None, "jit_dir_env": str(jit)}
    res = recheck.op_demote(req)
    assert res["demoted"] == [KEY16] and res["removed_rows"] == 1 and not res["already"]
    assert live.read_text() == LIVE.replace("gfx950,256,16,1536,7168,5,0,8.0,k_promoted16\n", "")
    assert live.stat().st_mode & 0o777 == 0o640
    assert Path(res["backup"]).read_text() == LIVE
    assert not (jit / "module_x.so").exists()
    assert Path(res["modules"][str(jit / "module_x.so")]).read_bytes() == b"built from LIVE"
    assert recheck.op_demote(req)["already"] is True                    # a second demote changes nothing
    assert live.read_text().count("\n") == LIVE.count("\n") - 1
    back = staging.op_rollback({"backup_dir": str(tmp_path / "bk")})
    assert not back["already"]
    assert live.read_text() == LIVE and (jit / "module_x.so").read_bytes() == b"built from LIVE"


def test_demote_of_rows_no_longer_in_the_table_changes_nothing(recheck_mod, tmp_path):
    recheck, _ = recheck_mod
    live = tmp_path / "live.csv"
    live.write_text(LIVE)
    res = recheck.op_demote({"live": str(live), "backup_dir": str(tmp_path / "bk"),
                             "keys": [{"m": "99", "n": "1", "k": "1"}]})
    assert res["nothing"] and live.read_text() == LIVE and not (tmp_path / "bk").exists()


# ------------------------------------------------------------------------------------------ sim upgrade knob

def test_the_upgrade_slows_a_deterministic_subset_of_tuned_rows_below_the_default_kernel():
    from orchestrator.sim import perf_model, upgrade
    shapes = [{"m": m, "n": 1536, "k": 7168} for m in range(1, 200)]
    slow = [s for s in shapes if upgrade.slowed("a8w8_blockscale", s, "gfx950", 256, "0.1.20.post1")]
    assert 0.2 * len(shapes) < len(slow) < 0.5 * len(shapes)
    assert slow == [s for s in shapes if upgrade.slowed("a8w8_blockscale", s, "gfx950", 256, "0.1.20.post1")]
    for s in shapes:
        before = perf_model.bench_us("a8w8_blockscale", s, "gfx950", 256, tuned_from=s)
        now = upgrade.upgraded_us("a8w8_blockscale", s, "gfx950", 256, s, "0.1.20.post1", before)
        default = perf_model.default_us("a8w8_blockscale", s, "gfx950", 256)
        assert (now > default * 1.05) if s in slow else (now == before)
        assert upgrade.upgraded_us("a8w8_blockscale", s, "gfx950", 256, None, "0.1.20.post1", default) == default


def test_the_upgrade_knob_rewrites_the_version_a_running_node_reports(tmp_path):
    import json

    from orchestrator import sim
    from orchestrator.sim import upgrade
    inst = sim.install(tmp_path / "node")
    rec = upgrade.apply(inst, "0.1.20.post1")
    assert rec == {"version": "0.1.20.post1", "from": "0.1.20"}
    dists = sorted(p.name for p in (tmp_path / "node" / "pylib").glob("amd_aiter-*.dist-info"))
    assert dists == ["amd_aiter-0.1.20.post1.dist-info"]
    meta = (tmp_path / "node" / "pylib" / dists[0] / "METADATA").read_text()
    assert "Version: 0.1.20.post1" in meta
    assert json.loads((tmp_path / "node" / "sim" / "node.json").read_text())["upgrade"] == rec
    assert (tmp_path / "node" / "aiter" / "aiter" / "_sim" / "upgrade.py").is_file()
    # a node known by its directory only (a demo node): the next upgrade starts from the last one
    assert upgrade.apply(tmp_path / "node", "0.1.21") == {"version": "0.1.21", "from": "0.1.20.post1"}
    assert [p.name for p in (tmp_path / "node" / "pylib").glob("amd_aiter-*.dist-info")] == ["amd_aiter-0.1.21.dist-info"]
