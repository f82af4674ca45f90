"""csvcolumns.parse_columns (the stdlib reading of a table, issue 26) gives read_tuned_csv exactly the frame
pandas' own reading gives: every table the simulated nodes ship, the real AITER samples when present, and the
corner cases; where the two would differ (inf, 1_000, a row wider than the header) pandas reads it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from orchestrator.parsing import csvtools
from orchestrator.parsing.csvcolumns import Unusual, parse_columns
from orchestrator.parsing.untuned import read_table_rows

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path("/work/shared/aiter-samples/configs")
TABLES = sorted((ROOT / "orchestrator" / "sim").rglob("*.csv")) + sorted(SAMPLES.rglob("*.csv"))

CASES = {
    "header only": "a,b,c\n",
    "bom": "\ufeffM,N,K\n1,2,3\n",
    "blank and empty rows": "M,N\n1,2\n\n , \n,\n3,4\n",
    "quoted": 'M,name\n1,"a,b"\n2,"c ""d"""\n',
    "repeated name": "M,M,N,M\n1,2,3,4\n",
    "float with a missing value": "M,us\n1,\n2,3.5\n",
    "ints with a missing value": "M,x\n1,\n2,3\n",
    "signs and exponents": "M,us\n1,-0\n2,+5\n3,1e3\n4,.5\n",
    "booleans and percents": "M,bias,err1\n1,True,0.3%\n2,False,1%\n",
    "trailing comma": "M,N,\n1,2,\n",
    "short row": "M,N,K\n1,2\n",
    "integral floats": "M,x\n1,2.0\n2,3.0\n",
    "spaces and tabs": "M, N ,K\n 1, 2 ,\t3\n",
    "null spellings": "M,x,y\n1,NaN,None\n2,Null,<NA>\n",
    "all null column": "M,x\n1,\n2,\n",
    "mixed text and numbers": "M,x\n1,abc\n2,3\n",
}
PANDAS_DECIDES = {"inf": "M,us\n1,inf\n2,-inf\n", "underscore": "M,us\n1,1_000\n",
                  "huge integer": "M,x\n1,12345678901234567890\n", "wider row": "M,N\n1,2,3\n"}


def _same(text: str) -> None:
    fast = csvtools.read_tuned_csv(text)
    slow = csvtools._read_with_pandas(text)
    pd.testing.assert_frame_equal(fast.reset_index(drop=True), slow.reset_index(drop=True), check_dtype=True)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_every_shipped_table_reads_as_pandas_reads_it(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    parse_columns(text)          # none of them needs pandas' own reading
    _same(text)


@pytest.mark.parametrize("name", CASES)
def test_corner_cases_read_as_pandas_reads_them(name):
    _same(CASES[name])


@pytest.mark.parametrize("name", PANDAS_DECIDES)
def test_what_python_and_pandas_read_apart_is_left_to_pandas(name, tmp_path):
    with pytest.raises(Unusual):
        parse_columns(PANDAS_DECIDES[name])
    _same(PANDAS_DECIDES[name])                 # read_tuned_csv falls back to pandas' reading
    p = tmp_path / "s.csv"
    p.write_text(PANDAS_DECIDES[name])
    with pytest.raises(ValueError, match=str(p)):   # the early, pandas-free reading refuses it in one line
        read_table_rows(p)


def test_the_stdlib_reading_is_a_test_that_can_fail():
    names, cols = parse_columns("M,us\n1,2\n")
    assert names == ["M", "us"] and cols == {"M": [1], "us": [2]}
    assert not pd.DataFrame({"us": [2.0]}).equals(csvtools.read_tuned_csv("M,us\n1,2\n")[["us"]])
