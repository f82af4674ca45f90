"""An AITER table read column by column with the stdlib, as ``csvtools.read_tuned_csv`` reads it with pandas
(issue 26: the pandas reader applied Python functions cell by cell anyway and was ~6x slower on the shipped
tables; for the few-row tables of a job it was ~20 ms a read, on the critical path of every job).

Header names and cells stripped, empty (and ``Unnamed: N``) header columns dropped as pandas drops them, a repeated name
renamed ``NAME.1`` as pandas does, null cells (``NULLS``) None, rows with no value dropped, a column whose every
value is a plain decimal number numbers: ints when every value is integral and none is missing, else floats.
``tests/unit/test_csv_columns.py`` compares it with pandas on every shipped table and on the corner cases.
"""

from __future__ import annotations

import csv
import io
import math
import re

NULLS = {"", "Null", "null", "None", "none", "nan", "NaN", "NULL", "<NA>"}
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_EXACT = 2 ** 53       # beyond it an integer has no exact float: pandas' own rules decide


class Unusual(ValueError):
    """A table the stdlib reading would read otherwise than pandas: a row wider than the header, or a number
    Python and pandas read apart (``inf``, ``1_000``, an integer beyond 2**53)."""


def parse_columns(text: str) -> tuple[list[str], dict[str, list]]:
    """(column names, {name: values}); raises ``Unusual`` where pandas must decide."""
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text.lstrip("\ufeff")), skipinitialspace=True)]
    rows = [r for r in rows if r]
    if not rows:
        return [], {}
    head, body = rows[0], rows[1:]
    for n, r in enumerate(body, start=2):
        if len(r) > len(head):
            raise Unusual(f"line {n}: {len(r)} fields, the header has {len(head)}")
    names, cols = [], {}
    for i, name in enumerate(head):
        if not name or name.startswith("Unnamed:"):    # pandas' name for a nameless column, written back
            continue
        unique, k = name, 0
        while unique in cols:
            k += 1
            unique = f"{name}.{k}"
        names.append(unique)
        cols[unique] = [None if i >= len(r) or r[i] in NULLS else r[i] for r in body]
    alive = [j for j in range(len(body)) if any(cols[n][j] is not None for n in names)]
    return names, {n: _typed([cols[n][j] for j in alive]) for n in names}


def _typed(values: list) -> list:
    cells = [v for v in values if v is not None]
    if not cells or not all(NUMBER.fullmatch(v) for v in cells):
        for v in cells:
            try:
                float(v)
            except ValueError:
                continue
            raise Unusual(f"{v!r} is a number to Python, not to pandas' reader")
        return values
    nums = [float(v) for v in cells]
    if any(abs(x) >= _EXACT for x in nums):
        raise Unusual("an integer beyond 2**53")
    if len(cells) == len(values) and all(math.isfinite(x) and x == round(x) for x in nums):
        return [int(x) for x in nums]
    it = iter(nums)
    return [next(it) if v is not None else None for v in values]
