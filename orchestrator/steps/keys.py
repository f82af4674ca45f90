"""One normaliser for key values (review D-09), without pandas: the early steps use it before pandas loads."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

_INT_RE = re.compile(r"[+-]?\d+")


def norm_key_value(v: Any) -> Any:
    """Make '16', 16, 16.0 and numpy ints one key value; None/NaN -> None; other text stripped."""
    if v is None:
        return None
    pd = sys.modules.get("pandas")   # a pandas NA can only exist once pandas is loaded; never load it here
    if pd is not None and (v is pd.NA or v is pd.NaT):
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return None
        return int(v) if v.is_integer() else v
    if hasattr(v, "item") and not isinstance(v, str):  # numpy scalars
        try:
            return norm_key_value(v.item())
        except (TypeError, ValueError):
            pass
    s = str(v).strip()
    if _INT_RE.fullmatch(s):
        return int(s)
    try:  # "16.0" as read back from a float CSV column
        f = float(s)
        if f.is_integer() and not s.lower().startswith(("inf", "nan", "-inf")):
            return int(f)
    except ValueError:
        pass
    return s
