"""Issue 36, the merge at HEAD: the node's duplicate-key merge rule is probed by running its own merge
(nodeside/mergeprobe.py) on every simulated profile, and promotion follows it (nodeside/staging.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.aiter_profiles import profile_from_facts
from orchestrator.nodeside import mergeprobe
from orchestrator.sim import SimSpec, install

KEYS = ["token", "model_dim"]
HEAD = "gfx,cu_num,token,model_dim,us,kernel\n"


@pytest.mark.parametrize("profile,rule", [("head", "resolve"), ("newest", "raise"), ("current", "raise")])
def test_the_probe_reads_each_profiles_merge_rule_from_its_core_py(tmp_path, profile, rule):
    inst = install(tmp_path / profile, SimSpec(profile=profile))
    core = Path(inst.aiter_root) / "aiter" / "jit" / "core.py"
    before = set(os.listdir("/tmp"))
    assert mergeprobe.merge_rule(str(core)) == (rule, None)
    assert not {n for n in set(os.listdir("/tmp")) - before if n.startswith("tune-remote-merge-")}


def test_a_core_py_without_the_merge_method_or_whose_merge_fails_is_not_told(tmp_path):
    core = tmp_path / "core.py"
    core.write_text("class AITER_CONFIG:\n    pass\n")
    assert mergeprobe.merge_rule(str(core)) == (None, None)     # no merge method: nothing to tell, nothing said
    core.write_text("class AITER_CONFIG:\n    def update_config_files(self, file_path, merge_name):\n"
                    "        import pandas_that_is_not_there\n")
    rule, why = mergeprobe.merge_rule(str(core), sys.executable)
    assert rule is None and "ModuleNotFoundError" in why
    assert mergeprobe.merge_rule(str(tmp_path / "gone.py")) == (None, None)


def test_the_head_merge_resolves_in_the_merged_copy_and_leaves_read_only_sources_byte_identical(tmp_path):
    """The sim's v0.1.30/HEAD merge: lowest us per key, the first source on ties, the union of columns (gfx from
    cu_num, ksplit 0), sources untouched (read-only here); a non-numeric us of a duplicate still raises."""
    inst = install(tmp_path / "h", SimSpec(profile="head"))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,ksplit\n"
                 "gfx942,80,16,64,64,1,0,9.5,slow,1\ngfx942,80,32,64,64,1,0,5.0,tie_first,1\n")
    b.write_text("cu_num,M,N,K,kernelId,splitK,us,kernelName\n80,16,64,64,2,0,4.25,fast\n80,32,64,64,2,0,5.0,tie_2nd\n")
    for p in (a, b):
        p.chmod(0o444)
    data = [p.read_bytes() for p in (a, b)]
    code = ("import sys, aiter.jit.core as c; print(open(c.AITER_CONFIGS.update_config_files(sys.argv[1], "
            "'x_tuned_gemm')).read())")
    env = dict(os.environ, PYTHONPATH=f"{inst.aiter_root}:{Path(inst.aiter_root).parent}/pylib", TMPDIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code, f"{a}:{b}"], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines() == ["gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,ksplit",
                                               "gfx942,80,32,64,64,1,0,5.0,tie_first,1",
                                               "gfx942,80,16,64,64,2,0,4.25,fast,0"]
    assert [p.read_bytes() for p in (a, b)] == data
    (tmp_path / "c.csv").write_text("gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName\ngfx942,80,16,64,64,3,0,n/a,x\n")
    run = subprocess.run([sys.executable, "-c", code, f"{a}:{tmp_path / 'c.csv'}"], env=env, capture_output=True,
                         text=True)
    assert run.returncode != 0 and "non-numeric 'us'" in run.stderr


def test_the_profile_records_the_merge_rule_as_probed():
    facts = {"version_raw": "0.1.30+rocm10.1", "probes": {"merge_rule": "resolve"}}
    p = profile_from_facts(facts)
    assert p.version == (0, 1, 30) and p.merge_rule == "resolve" and not p.merge_rejects_duplicates
    assert any(x.startswith("duplicate-key merge rule (aiter/jit/core.py") for x in p.probed)
    assert not any("duplicate-key merge rule" in x for x in p.assumed)
    q = profile_from_facts({"version_raw": "0.1.30+rocm10.1", "probes": {}})
    assert q.merge_rule == "raise" and q.merge_rejects_duplicates and not q.merge_resolves_duplicates
    assert "duplicate-key merge rule (from version 0.1.30)" in q.assumed


def _req(tmp: Path, **kw) -> dict:
    return {"live": str(tmp / "live.csv"), "staging": str(tmp / "staging.csv"), "backup_dir": str(tmp / "bk"),
            "key_columns": KEYS, "keys": [["1", "7168"], ["2", "7168"], ["4", "7168"]], "gfx": "gfx950",
            "cu_num": "256", "others": [str(tmp / "model_*.csv")], "modules": [], "package_dir": None,
            "jit_dir_env": None, **kw}


def _tables(tmp: Path) -> None:
    (tmp / "live.csv").write_text(HEAD)
    (tmp / "staging.csv").write_text(HEAD + "gfx950,256,1,7168,7.0,new1\ngfx950,256,2,7168,6.0,new2\n"
                                     "gfx950,256,4,7168,3.0,new4\n")
    (tmp / "model_x.csv").write_text(HEAD + "gfx950,256,2,7168,5.5,theirs2\ngfx950,256,4,7168,3.0,theirs4\n")


def test_on_a_resolving_node_a_key_another_table_holds_is_promoted_and_said_shadowed_or_winning(staging_mod,
                                                                                              tmp_path):
    _tables(tmp_path)
    res = staging_mod.op_promote(_req(tmp_path, merge_rule="resolve"))
    assert res["skipped_duplicates"] == [] and res["added"] == 3
    assert res["shadowed"] == [{"key": ["gfx950", "256", "2", "7168"], "us": "6.0",
                                "by": str(tmp_path / "model_x.csv"), "by_us": "5.5"}]
    # a tie: the live table is the merge's first source, so the promoted row wins it
    assert res["overrides"] == [{"key": ["gfx950", "256", "4", "7168"], "us": "3.0",
                                 "over": [{"file": str(tmp_path / "model_x.csv"), "us": "3.0"}]}]
    assert (tmp_path / "model_x.csv").read_text().count("\n") == 3       # the other table is never touched


def test_on_a_raising_node_promotion_is_as_before(staging_mod, tmp_path):
    for rule in ("raise", None):
        tmp = tmp_path / str(rule)
        tmp.mkdir()
        _tables(tmp)
        res = staging_mod.op_promote(_req(tmp, **({"merge_rule": rule} if rule else {})))
        assert res["skipped_duplicates"] == [["gfx950", "256", "2", "7168"], ["gfx950", "256", "4", "7168"]]
        assert res["shadowed"] == [] and res["overrides"] == []
        assert (tmp / "live.csv").read_text() == HEAD + "gfx950,256,1,7168,7.0,new1\n"


def test_a_duplicate_whose_us_is_not_a_number_is_skipped_even_where_the_merge_resolves(staging_mod, tmp_path):
    _tables(tmp_path)
    (tmp_path / "model_x.csv").write_text(HEAD + "gfx950,256,2,7168,,theirs2\n")
    res = staging_mod.op_promote(_req(tmp_path, merge_rule="resolve"))
    assert res["skipped_duplicates"] == [["gfx950", "256", "2", "7168"]]


def test_audit_on_a_resolving_node_says_which_row_wins_instead_of_a_finding():
    import pandas as pd

    from orchestrator.parsing.audit import audit_tables, shadowed_rows
    row = {"gfx": "gfx950", "cu_num": 256, "M": 16, "N": 1536, "K": 7168, "us": 7.0, "kernelName": "a8w8_ck_1"}
    main_t = pd.DataFrame([row, {**row, "M": 32, "us": 4.0}])
    model = pd.DataFrame([{**row, "us": 6.0}, {**row, "M": 32, "us": 4.0}])
    tables = [("aiter/configs/a8w8_tuned_gemm.csv", main_t), ("aiter/configs/model_configs/x_a8w8_tuned_gemm.csv", model)]
    assert [f["kind"] for f in audit_tables(tables)] == ["duplicate_key"] * 2        # a raising node: as before
    assert audit_tables(tables, merge_rule="resolve") == []
    assert shadowed_rows(tables) == [
        "shadowed: aiter/configs/a8w8_tuned_gemm.csv: gfx=gfx950 cu_num=256 M=16 N=1536 K=7168 (us 7) is ineffective: "
        "AITER's merge keeps the row of aiter/configs/model_configs/x_a8w8_tuned_gemm.csv (us 6, lowest us)",
        "shadowed: aiter/configs/model_configs/x_a8w8_tuned_gemm.csv: gfx=gfx950 cu_num=256 M=32 N=1536 K=7168 (us 4) "
        "is ineffective: AITER's merge keeps the row of aiter/configs/a8w8_tuned_gemm.csv (us 4, the first of equal us)"]
    bad = [tables[0], (tables[1][0], model.assign(us=["n/a", 4.0]))]
    found = audit_tables(bad, merge_rule="resolve")
    assert [(f["kind"], f["key"]["M"]) for f in found] == [("duplicate_key", "16")]
    assert "not a number makes AITER's merge raise" in found[0]["detail"]


def test_a_shadowed_row_is_not_engaged_and_says_why_on_a_resolving_node():
    from orchestrator.steps.engage import not_engaged_reason
    hit = {"hit": True, "padded_m": None, "kernel": "theirs_256x16"}
    args = dict(skipped=False, now=97.0, h=hit, lk=(64, 7168, 2048), own=None, loaded=set(), near_after=True,
                promoted_kernel="ours_256x32")
    assert "a file read before the live table holds this key" in not_engaged_reason(**args)
    why = not_engaged_reason(**args, merge_resolves=True)
    assert "holds this key with a lower us, and its merge keeps that row (shadowed)" in why


def test_a_told_rule_is_kept_while_core_py_and_the_interpreter_are_unchanged(tmp_path):
    inst = install(tmp_path / "h", SimSpec(profile="head"))
    core = Path(inst.aiter_root) / "aiter" / "jit" / "core.py"
    cache = tmp_path / "cache"
    assert mergeprobe.merge_rule(str(core), sys.executable, cache_dir=str(cache)) == ("resolve", None)
    (kept,) = cache.iterdir()
    kept.write_text("raise")             # the cache is what the next call reads...
    assert mergeprobe.merge_rule(str(core), sys.executable, cache_dir=str(cache)) == ("raise", None)
    core.write_text(core.read_text() + "\n")     # ...until core.py changes
    assert mergeprobe.merge_rule(str(core), sys.executable, cache_dir=str(cache)) == ("resolve", None)
