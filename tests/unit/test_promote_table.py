"""The node op `promote` (orchestrator/remote/helpers/staging.py) on tables whose key columns differ:
a live (or model_configs) table without a gfx column keys its rows by cu_num only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parents[2] / "orchestrator" / "remote" / "helpers"


@pytest.fixture
def staging_mod(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    for name in ("staging", "files", "common"):
        sys.modules.pop(name, None)
    import staging
    return staging


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
