"""The table key (orchestrator/shapelib/tablekey.py) on a table keyed in lower case WITHOUT cu_num: the
opus/FlyDSL MXFP8 BMM table (gfx,b,m,n,k,w_scale_block + libtype; OpusBmmMxscaleTuner.KEYS, ROCm/aiter
f081855b), beside the CK tables' gfx,cu_num,M,N,K. Staging, promotion, audit, the merge and compare read it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.parsing.audit import audit_tables
from orchestrator.parsing.csvtools import diff_tuned, key_columns, merge_tuned, read_tuned_csv
from orchestrator.shapelib.tablekey import has_cu_num, table_key

BMM_HEAD = "gfx,b,m,n,k,w_scale_block,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
# the same table once ROCm/aiter PR #5668 (open) adds cu_num to its key
BMM_CU_HEAD = "gfx,cu_num,b,m,n,k,w_scale_block,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
BMM_SHAPE = ("b", "m", "n", "k", "w_scale_block")


def _row(m, block, us, name="opus_k", kid=8179):
    return f"gfx950,16,{m},512,7168,{block},opus,{kid},1,{us},{name},1.0,1.0,0.0\n"


def test_the_key_is_the_tables_own_spelling_and_has_cu_num_only_where_the_header_does():
    assert table_key(BMM_HEAD.strip().split(",")) == ["gfx", "b", "m", "n", "k", "w_scale_block"]
    assert table_key(BMM_CU_HEAD.strip().split(",")) == ["gfx", "cu_num", "b", "m", "n", "k", "w_scale_block"]
    assert table_key("gfx,cu_num,M,N,K,kernelId,us".split(",")) == ["gfx", "cu_num", "M", "N", "K"]
    assert table_key(BMM_HEAD.strip().split(","), BMM_SHAPE) == ["gfx", "b", "m", "n", "k", "w_scale_block"]
    assert not has_cu_num(BMM_HEAD.split(",")) and has_cu_num(BMM_CU_HEAD.split(","))


def test_audit_judges_duplicates_on_the_bmm_tables_own_key():
    """Two block sizes of one shape are two keys (the runtime's lookup keys by w_scale_block); the same
    shape and block twice is a duplicate. Keyed by gfx alone (upper-case key names only) every row of the
    table was a duplicate of the first."""
    df = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 5.0) + _row(16, "32x32", 6.0) + _row(32, "128x128", 7.0))
    assert key_columns(df) == ["gfx", "b", "m", "n", "k", "w_scale_block"]
    assert [f for f in audit_tables([("bmm.csv", df)], cu_nums=[256], gfx="gfx950")
            if f["kind"] == "duplicate_key"] == []
    dup = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 5.0) + _row(16, "128x128", 6.0))
    kinds = [f["kind"] for f in audit_tables([("bmm.csv", dup)], cu_nums=[256], gfx="gfx950")]
    assert kinds.count("duplicate_key") == 1


def test_audit_cannot_call_a_cu_num_less_row_foreign():
    """No cu_num column: an MI350P (128 CU) row and an MI355X (256 CU) row look alike; no foreign_cu_num."""
    df = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 5.0))
    assert [f for f in audit_tables([("bmm.csv", df)], cu_nums=[128], gfx="gfx950")
            if f["kind"] == "foreign_cu_num"] == []


def test_merge_and_compare_key_the_bmm_table_by_shape_and_block():
    a = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 5.0) + _row(16, "32x32", 6.0))
    b = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 4.0, name="fly_k", kid=-1) + _row(16, "32x32", 6.0))
    merged = merge_tuned([a, b])
    assert len(merged) == 2 and sorted(merged["us"]) == [4.0, 6.0]
    d = diff_tuned(a, b)
    assert sorted(d["status"]) == ["changed", "same"]


def _req(tmp: Path, **kw) -> dict:
    return {"live": str(tmp / "live.csv"), "staging": str(tmp / "staging.csv"), "backup_dir": str(tmp / "bk"),
            "key_columns": list(BMM_SHAPE), "keys": [["16", "16", "512", "7168", "128x128"]],
            "gfx": "gfx950", "cu_num": "256", "others": [], "modules": [], "package_dir": None,
            "jit_dir_env": None, **kw}


def test_promotion_and_rollback_of_a_cu_num_less_table_keep_its_header_and_other_block(staging_mod, tmp_path):
    live = BMM_HEAD + _row(16, "128x128", 9.0, name="old") + _row(16, "32x32", 6.0, name="other_block")
    (tmp_path / "live.csv").write_text(live)
    (tmp_path / "staging.csv").write_text(BMM_HEAD + _row(16, "128x128", 5.0, name="new")
                                          + _row(16, "32x32", 1.0, name="not_asked"))
    res = staging_mod.op_promote(_req(tmp_path))
    assert res["replaced"] == 1 and res["added"] == 0
    assert (tmp_path / "live.csv").read_text() == (
        BMM_HEAD + _row(16, "128x128", 5.0, name="new") + _row(16, "32x32", 6.0, name="other_block"))
    assert Path(res["backup"]).read_text() == live
    staging_mod.op_rollback({"live": str(tmp_path / "live.csv"), "backup_dir": str(tmp_path / "bk"),
                             "modules": [], "package_dir": None, "jit_dir_env": None})
    assert (tmp_path / "live.csv").read_text() == live


def test_staging_offers_store_rows_to_a_cu_num_less_table_by_its_key(staging_mod, tmp_path):
    (tmp_path / "live.csv").write_text(BMM_HEAD + _row(16, "128x128", 9.0, name="live"))
    rows = [dict(zip(BMM_HEAD.strip().split(","), _row(m, "128x128", 3.0, name="store").strip().split(",")))
            for m in (16, 64)]
    res = staging_mod.op_stage({"live": str(tmp_path / "live.csv"), "staging": str(tmp_path / "staging.csv"),
                                "offer": {"key_columns": list(BMM_SHAPE), "rows": rows}})
    text = (tmp_path / "staging.csv").read_text()
    assert "live" in text and text.count("store") == 1 and ",64,512," in text, (res, text)
    assert pd.read_csv(tmp_path / "staging.csv").columns.tolist() == BMM_HEAD.strip().split(",")


def test_a_promotion_records_prefix_of_a_cu_num_less_table_is_its_gfx_not_a_cu_num():
    """Staging's promoted key tuples carry the GPU columns that table has: ("gfx950", b, m, n, k, block) for
    the MXFP8 BMM table. recheck read a one-value prefix as cu_num ("cu_num": "gfx950")."""
    from orchestrator.shapelib.tablekey import prefix_columns
    assert prefix_columns(["gfx950"]) == ("gfx",)
    assert prefix_columns(["256"]) == ("cu_num",)
    assert prefix_columns(["gfx950", "256"]) == ("gfx", "cu_num")
    assert prefix_columns([]) == () and prefix_columns(["a", "b", "c"]) is None


def test_audit_says_what_it_cannot_tell_in_a_table_without_cu_num():
    notes: list = []
    df = read_tuned_csv(BMM_HEAD + _row(16, "128x128", 5.0))
    audit_tables([("bmm.csv", df)], cu_nums=[256], gfx="gfx950", skipped=notes)
    assert len(notes) == 1 and "bmm.csv has no cu_num column" in notes[0] and "MI350P" in notes[0]
    notes.clear()
    with_cu = read_tuned_csv(BMM_CU_HEAD + "gfx950,256,16,16,512,7168,128x128,opus,8179,1,5.0,k,1,1,0\n")
    audit_tables([("bmm.csv", with_cu)], cu_nums=[256], gfx="gfx950", skipped=notes)
    assert notes == []          # PR #5668's form: cu_num is in the key, foreign_cu_num is checked


def test_the_store_takes_a_cu_num_less_tables_rows_as_measured_on_the_nodes_cu_num(tmp_path):
    """Decision: a row of a table without cu_num is stored under the cu_num of the node that measured it (the
    team's key is gfx, cu_num, table, row key, cu_num NOT NULL), never NULL: `--reuse proven` then offers it
    only to nodes of the same gfx AND cu_num (an MI350P row, 128 CUs, is not reused on an MI355X, 256 CUs,
    though that table cannot tell them apart). Rows of another gfx in the table are not the job's."""
    from types import SimpleNamespace

    from orchestrator.store.sync import tuned_rows
    (tmp_path / "t.csv").write_text(BMM_HEAD + _row(16, "128x128", 5.0)
                                    + _row(16, "32x32", 6.0).replace("gfx950", "gfx942"))
    job = SimpleNamespace(remote=SimpleNamespace(tuned_csv="/x/t.csv"), facts=SimpleNamespace(gfx="gfx950", cu_num=128),
                          shapes=[{"b": 16, "m": 16, "n": 512, "k": 7168, "w_scale_block": "128x128"},
                                  {"b": 16, "m": 16, "n": 512, "k": 7168, "w_scale_block": "32x32"}])
    rows, order, _ = tuned_rows(job, tmp_path, BMM_SHAPE)
    assert order == list(BMM_SHAPE)
    assert [r["row_key"] for r in rows] == ["b=16,m=16,n=512,k=7168,w_scale_block=128x128"]
    from orchestrator.store.sync import record_keys
    promoted = {"promoted": [["gfx950", "16", "16", "512", "7168", "128x128"]]}   # staging's (gfx,) + key
    assert record_keys(promoted, order, BMM_SHAPE) == ["b=16,m=16,n=512,k=7168,w_scale_block=128x128"]
