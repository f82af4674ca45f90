"""The node op `promote` (orchestrator/nodeside/staging.py) on tables whose key columns differ:
a live (or model_configs) table without a gfx column keys its rows by cu_num only."""

from __future__ import annotations

from pathlib import Path

KEYS = ["token", "model_dim"]
GFX_HEAD = "gfx,cu_num,token,model_dim,us,kernel\n"
OLD_HEAD = "cu_num,token,model_dim,us,kernel\n"


def _req(tmp: Path, **kw) -> dict:
    return {"live": str(tmp / "live.csv"), "staging": str(tmp / "staging.csv"), "backup_dir": str(tmp / "bk"),
            "key_columns": KEYS, "keys": [["1", "7168"], ["2", "7168"]], "gfx": "gfx950", "cu_num": "256",
            "others": [], "modules": [], "package_dir": None, "jit_dir_env": None, **kw}


def test_a_promoted_key_replaces_its_row_in_a_live_table_without_a_gfx_column(staging_mod, tmp_path):
    (tmp_path / "live.csv").write_text(OLD_HEAD + "80,1,7168,9.0,old80\n256,1,7168,9.0,old\n256,4,7168,5.0,keep\n")
    (tmp_path / "staging.csv").write_text(GFX_HEAD + "gfx950,256,1,7168,7.0,new1\ngfx950,256,2,7168,6.0,new2\n")
    res = staging_mod.op_promote(_req(tmp_path))
    assert res["replaced"] == 1 and res["added"] == 1
    assert (tmp_path / "live.csv").read_text() == (
        OLD_HEAD + "80,1,7168,9.0,old80\n256,1,7168,7.0,new1\n256,4,7168,5.0,keep\n256,2,7168,6.0,new2\n")
    assert Path(res["backup"]).read_text().endswith("256,1,7168,9.0,old\n256,4,7168,5.0,keep\n")


def test_a_key_another_table_covers_without_a_gfx_column_is_never_duplicated(staging_mod, tmp_path):
    (tmp_path / "live.csv").write_text(GFX_HEAD)
    (tmp_path / "staging.csv").write_text(GFX_HEAD + "gfx950,256,1,7168,7.0,new1\ngfx950,256,2,7168,6.0,new2\n")
    (tmp_path / "model_x.csv").write_text(OLD_HEAD + "256,2,7168,5.5,theirs\n")
    res = staging_mod.op_promote(_req(tmp_path, others=[str(tmp_path / "model_*.csv")]))
    assert res["skipped_duplicates"] == [["gfx950", "256", "2", "7168"]]
    assert (tmp_path / "live.csv").read_text() == GFX_HEAD + "gfx950,256,1,7168,7.0,new1\n"


def test_key_changes_counts_added_changed_removed_and_notes_a_vanished_key():
    """C-11: the report counts keys, not rows; a key the tuner dropped is said."""
    import types

    import pandas as pd

    from orchestrator.records import NodePaths
    from orchestrator.steps.compare import _key_changes
    from orchestrator.steps.report import _rows_written
    notes = []
    ctx = types.SimpleNamespace(variant=types.SimpleNamespace(key_columns=("m", "n", "k")),
                                job=types.SimpleNamespace(note=notes.append, remote=NodePaths(tuned_csv="/x/t.csv")))
    head = ["gfx", "cu_num", "M", "N", "K", "kernelId", "splitK", "us", "kernelName"]   # as AITER writes it
    old = pd.DataFrame([["gfx950", 256, 1, 512, 7168, 3, 0, 9.0, "a"], ["gfx950", 256, 2, 512, 7168, 3, 0, 9.0, "a"],
                        ["gfx950", 256, 4, 512, 7168, 3, 0, 9.0, "a"]], columns=head)
    new = pd.DataFrame([["gfx950", 256, 1, 512, 7168, 3, 0, 9.0, "a"], ["gfx950", 256, 2, 512, 7168, 5, 0, 7.0, "b"],
                        ["gfx950", 256, 8, 512, 7168, 3, 0, 9.0, "a"]], columns=head)
    res = _key_changes(ctx, old, new)
    assert res == {"keys_added": 1, "keys_changed": 1, "keys_removed": 1}
    assert _rows_written({**res, "rows_before": 3, "rows_after": 3}) == 2     # a row count would say 0
    assert len(notes) == 1 and "1 key(s) of t.csv" in notes[0] and "M=4 N=512 K=7168" in notes[0]


def test_the_after_arms_module_is_reused_only_when_the_promoted_table_holds_the_staging_rows(staging_mod, tmp_path):
    """Issue 26: promotion copies the module the after arm built from the staging table into the live JIT dir
    when the promoted table has the same rows (no rebuild); otherwise the live module is only moved aside.
    Rollback removes the reused module (the live dir had none before)."""
    built, live_jit = tmp_path / "after_jit", tmp_path / "jit"
    built.mkdir()
    live_jit.mkdir()
    (built / "module_x.so").write_text("built from staging")
    rows = "gfx950,256,1,7168,7.0,new1\ngfx950,256,2,7168,6.0,new2\n"
    (tmp_path / "staging.csv").write_text(GFX_HEAD + rows)
    (tmp_path / "live.csv").write_text(GFX_HEAD + "gfx950,256,2,7168,9.0,old2\n")
    req = _req(tmp_path, modules=["module_x"], jit_dir_env=str(live_jit), built_dir=str(built))
    res = staging_mod.op_promote(req)
    assert res["rounds"][0]["reused_modules"] == [str(live_jit / "module_x.so")]
    assert (live_jit / "module_x.so").read_text() == "built from staging"
    assert (live_jit / "module_x.so").stat().st_mtime >= (tmp_path / "live.csv").stat().st_mtime
    staging_mod.op_rollback({"backup_dir": req["backup_dir"]})
    assert not (live_jit / "module_x.so").exists()
    # only one of the two keys promoted: the live table differs from the staging one, nothing is reused
    (tmp_path / "live.csv").write_text(GFX_HEAD + "gfx950,256,2,7168,9.0,old2\n")
    res = staging_mod.op_promote(_req(tmp_path, keys=[["1", "7168"]], modules=["module_x"],
                                      jit_dir_env=str(live_jit), built_dir=str(built), backup_dir=str(tmp_path / "b2")))
    assert res["rounds"][0]["reused_modules"] == [] and not (live_jit / "module_x.so").exists()
