"""Formatting helpers and the neutral Table both templates render (markdown here, HTML in the template)."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DASH = "—"


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_missing(x: Any) -> bool:
    if x is None:
        return True
    if isinstance(x, float) and math.isnan(x):
        return True
    try:
        import pandas as pd

        return bool(pd.isna(x)) if not isinstance(x, (str, list, tuple, dict)) else False
    except (TypeError, ValueError):
        return False


def column_decimals(values: Iterable[Any]) -> int | None:
    """One number of decimals for a column: 4 significant digits for its smallest value (1..4)."""
    small = [abs(float(v)) for v in values if not is_missing(v) and float(v) != 0]
    if not small:
        return None
    return max(1, min(4, 3 - math.floor(math.log10(min(small)))))


def fmt_value(x: Any, decimals: int | None = None) -> str:
    """Benchmark value, fixed point, no thousands separator; ``decimals`` None = >= 4 significant digits."""
    if is_missing(x):
        return DASH
    x = float(x)
    if decimals is not None:
        return f"{x:.{decimals}f}"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:.1f}"
    if a >= 100:
        return f"{x:.2f}"
    if a >= 1:
        return f"{x:.3f}"
    decimals = min(8, 3 - math.floor(math.log10(a)))
    return f"{x:.{decimals}f}"


def fmt_pct(x: Any, signed: bool = True) -> str:
    if is_missing(x):
        return DASH
    x = float(x)
    if x == 0:
        return "0.00%"
    return f"{x:+.2f}%" if signed else f"{x:.2f}%"


def fmt_int(x: Any) -> str:
    if is_missing(x):
        return DASH
    return str(int(x))


def fmt_key(x: Any) -> str:
    if is_missing(x):
        return DASH
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def fmt_scalar(x: Any) -> str:
    if is_missing(x) or x == "":
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (list, tuple, set, frozenset)):
        return ", ".join(fmt_scalar(v) for v in x) if x else "none"
    if isinstance(x, Mapping):
        return ", ".join(f"{k}={fmt_scalar(v)}" for k, v in x.items()) if x else "none"
    if isinstance(x, _dt.datetime):
        return fmt_time(x)
    return str(x)


def fmt_duration(seconds: Any) -> str:
    if is_missing(seconds):
        return DASH
    s = float(seconds)
    neg = s < 0
    s = abs(s)
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    if h:
        txt = f"{h}h {m:02d}m {sec:02d}s"
    elif m:
        txt = f"{m}m {sec:02d}s"
    else:
        txt = f"{s:.1f}s" if s < 10 else f"{sec}s"
    return f"-{txt}" if neg else txt


def _to_datetime(x: Any) -> _dt.datetime | None:
    """Aware datetimes for epoch seconds and zoned text; naive ones (local, zone unknown) stay naive."""
    if x is None or x == "":
        return None
    if isinstance(x, _dt.datetime):
        return x
    if is_num(x):
        return _dt.datetime.fromtimestamp(float(x), tz=_dt.timezone.utc)
    try:
        return _dt.datetime.fromisoformat(str(x).strip().replace("Z", "+00:00"))
    except ValueError:
        return None


def fmt_time(x: Any) -> str:
    d = _to_datetime(x)
    if d is None:
        return DASH if is_missing(x) or x == "" else str(x)
    if d.tzinfo is None:
        return d.strftime("%Y-%m-%d %H:%M:%S")
    return d.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def elapsed_s(start: Any, end: Any) -> float | None:
    s, f = _to_datetime(start), _to_datetime(end)
    if s is None or f is None:
        return None
    if (s.tzinfo is None) != (f.tzinfo is None):  # one zoned, one local: read both as wall clock
        s, f = s.replace(tzinfo=None), f.replace(tzinfo=None)
    return (f - s).total_seconds()


def fmt_command(cmd: Any) -> str:
    if cmd is None or cmd == "":
        return ""
    if isinstance(cmd, (list, tuple)):
        import shlex

        return " ".join(shlex.quote(str(a)) for a in cmd)
    return str(cmd)


def key_label(key: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={fmt_key(v)}" for k, v in key.items())


# --------------------------------------------------------------------------------------------
# Tables: one neutral structure, rendered to markdown here and to HTML by the template
# --------------------------------------------------------------------------------------------


class Table:
    """headers, per-column numeric flag, rows of cell texts, per-row CSS class (HTML only)."""

    def __init__(self, headers: Sequence[str], numeric: Sequence[bool]):
        self.headers = list(headers)
        self.numeric = list(numeric)
        self.rows: list[list[str]] = []
        self.row_classes: list[str] = []
        self.cell_classes: list[list[str]] = []

    def add(self, cells: Sequence[Any], row_class: str = "", cell_classes: Sequence[str] | None = None):
        cells = [str(c) for c in cells]
        assert len(cells) == len(self.headers), (cells, self.headers)
        self.rows.append(cells)
        self.row_classes.append(row_class)
        self.cell_classes.append(list(cell_classes) if cell_classes else [""] * len(cells))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def columns(self) -> list[dict[str, Any]]:
        return [{"name": h, "num": n} for h, n in zip(self.headers, self.numeric)]

    def markdown(self, pad: bool = True) -> str:
        """GitHub pipe table, padded so the raw text lines up (``pad``), numbers right-aligned."""
        def esc(s: str) -> str:
            return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

        head = [esc(h) for h in self.headers]
        body = [[esc(c) for c in r] for r in self.rows]
        widths = [max([3, len(head[i])] + [len(r[i]) for r in body]) if pad else 3 for i in range(len(head))]

        def line(cells: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(cells):
                out.append(c.rjust(widths[i]) if self.numeric[i] else c.ljust(widths[i]))
            return "| " + " | ".join(out) + " |"

        sep = "| " + " | ".join(
            ("-" * (widths[i] - 1) + ":") if self.numeric[i] else "-" * widths[i]
            for i in range(len(head))
        ) + " |"
        return "\n".join([line(head), sep] + [line(r) for r in body])


def kv_table(pairs: Iterable[tuple[str, Any]]) -> Table:
    t = Table(["field", "value"], [False, False])
    for k, v in pairs:
        t.add([k, v])
    return t
