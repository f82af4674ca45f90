"""read_shapes_csv reads a user's --shapes-csv with the stdlib (the CLI checks it before it connects; pandas
loads in the warm-up thread meanwhile) exactly as the pandas reader of the tables reads it (issue 26)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.errors import UsageError
from orchestrator.parsing import csvtools
from orchestrator.parsing.untuned import read_shapes_csv, read_table_rows

TRICKY = ("M , N,K,,gfx\n"
          " 1, 4608 ,7168,,gfx950\n"
          "\n"
          ",,,,\n"
          "16.0,4608,7168,x,Null\n"
          "1e3,2048,7168,,\n")


def test_rows_as_the_pandas_reader_reads_them(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(TRICKY)
    header, rows = read_table_rows(p)
    df = csvtools.read_tuned_csv(p)
    assert header == list(df.columns)
    want = [{k: (None if v != v else v) for k, v in r.items()} for r in df.to_dict("records")]
    assert rows == want
    assert read_shapes_csv(p, "a8w8_blockscale") == [{"m": 1, "n": 4608, "k": 7168}, {"m": 16, "n": 4608, "k": 7168},
                                                       {"m": 1000, "n": 2048, "k": 7168}]


def test_empty_cells_missing_columns_and_conflicts_are_refused(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("M,N,K\n1,,7168\n")
    with pytest.raises(ValueError, match="line 2: empty N"):
        read_shapes_csv(p, "a8w8_blockscale")
    p.write_text("M,N\n1,2\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) K .*found: M,N"):
        read_shapes_csv(p, "a8w8_blockscale")
    p.write_text("")
    with pytest.raises(ValueError, match="found: nothing"):
        read_shapes_csv(p, "a8w8_blockscale")
    p.write_text("M,N,K\n<<<<<<< HEAD\n1,2,3\n")
    with pytest.raises(UsageError, match="git-conflict marker at line 2"):
        read_shapes_csv(p, "a8w8_blockscale")


def test_reading_a_shapes_csv_does_not_load_pandas(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("M,N,K\n1,4608,7168\n")
    code = ("import sys; from orchestrator.parsing.untuned import read_shapes_csv; "
            f"read_shapes_csv({str(p)!r}, 'a8w8_blockscale'); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
