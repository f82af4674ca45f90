"""One key normaliser for the laptop and the node (review D-09; issue 9): ``key_text`` in
orchestrator/shapelib/text.py, used by every call site."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (value, its key text): the same answer wherever a key is compared (a CSV on the laptop or on the node,
# a log, JSON)
KEY_CASES = [
    ("16", "16"), (16, "16"), (16.0, "16"), ("16.0", "16"), ("1e3", "1000"), ("+16", "16"), (" 16 ", "16"),
    ("-16", "-16"), ("", ""), (None, ""), (float("nan"), ""), ("torch.int8", "torch.int8"), ("inf", "inf"),
    (" torch.bfloat16 ", "torch.bfloat16"), ("0.5", "0.5"), (0.5, "0.5"), ("True", "True"),
]


@pytest.fixture
def node_mods():
    """The helper's modules as the node imports them: the packages orchestrator.nodeside and .shapelib."""
    from orchestrator.nodeside import files, staging
    from orchestrator.shapelib import text
    return text, files, staging


def _cell(v) -> str:
    """How a CSV holds the value (csv.writer: None -> empty; a NaN is written empty by our tools)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def test_every_key_normaliser_gives_the_same_text(node_mods, tmp_path):
    import pandas as pd

    from orchestrator.parsing.csvtools import _key_series
    from orchestrator.outcome.keys import norm_key_value

    _text, files, _staging = node_mods
    laptop_typed = {repr(v): norm_key_value(v) for v, _ in KEY_CASES}
    laptop_csv = _key_series(pd.DataFrame({"m": pd.Series([v for v, _ in KEY_CASES], dtype=object)}), ["m"])
    table = tmp_path / "a8w8_tuned_gemm.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["M", "us"])
        w.writerows([_cell(v), "1.0"] for v, _ in KEY_CASES)
    node = files.op_tuned_keys({"patterns": [str(table)], "key_columns": ["m"]})["files"][str(table)]
    got = {}
    for (v, want), csv_key, (node_key,) in zip(KEY_CASES, laptop_csv, node):
        typed = laptop_typed[repr(v)]
        got[repr(v)] = ("" if typed is None else str(typed), csv_key[0], node_key)
    assert got == {repr(v): (want, want, want) for v, want in KEY_CASES}


def test_the_typed_view_keeps_its_types():
    import numpy as np
    import pandas as pd

    from orchestrator.outcome.keys import norm_key_value
    assert [norm_key_value(v) for v in ("16.0", "+16", " 16 ", 16.0, np.int64(16), True)] == [16] * 5 + ["True"]
    assert norm_key_value("1e3") == 1000
    assert all(type(norm_key_value(v)) is int for v in ("16.0", np.int64(16), 16.0))
    assert [norm_key_value(v) for v in (None, float("nan"), pd.NA, pd.NaT)] == [None] * 4
    assert norm_key_value("") == "" and norm_key_value(" torch.int8") == "torch.int8"
    assert norm_key_value(4.83) == 4.83 and norm_key_value(float("inf")) == float("inf")   # us, tflops


def test_one_key_normaliser_everywhere(node_mods):
    from orchestrator.shapelib import text as laptop_text
    text, files, staging = node_mods
    assert files.key_text is text.key_text and staging.key_text is text.key_text
    assert Path(text.__file__).resolve() == Path(laptop_text.__file__).resolve()
    import numpy as np
    import pandas as pd
    numpy_and_pandas = (np.int64(7), np.float64(7.0), pd.NA, pd.NaT, False)
    assert [laptop_text.key_text(v) for v in numpy_and_pandas] == ["7", "7", "", "", "False"]
    # no module keeps a normaliser of its own (the three that were: review D-09)
    for rel in ("parsing/csvtools.py", "nodeside/files.py", "outcome/keys.py"):
        src = (ROOT / "orchestrator" / rel).read_text()
        assert "is_integer()" not in src, rel
