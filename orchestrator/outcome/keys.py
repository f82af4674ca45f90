"""Key values as typed Python values, without pandas: the early steps use it before pandas loads.

The rule itself is ``key_text`` (orchestrator/shapelib/text.py, review D-09): the one normaliser the
CSV tools and the node helper use too. This is its typed view for the laptop's dicts and sets.
"""

from __future__ import annotations

import re
from typing import Any

from ..shapelib.text import key_text

_CANON_INT = re.compile(r"-?\d+")   # key_text's spelling of an integer


def norm_key_value(v: Any) -> Any:
    """``key_text(v)`` typed: an int when integer-like ('16', 16, 16.0, numpy ints); None for None, NaN and
    pandas NA; a non-integer float stays that float (us, tflops); other text stripped ('' stays ''), booleans
    'True'/'False'."""
    if not isinstance(v, (str, int, float)) and hasattr(v, "item"):
        try:   # numpy scalars: their Python value (a numpy float keeps being a float)
            v = v.item()
        except (TypeError, ValueError):
            pass
    t = key_text(v)
    if _CANON_INT.fullmatch(t):
        return int(t)
    if isinstance(v, float):
        return None if v != v else v
    if t == "" and not isinstance(v, str):
        return None
    return t
