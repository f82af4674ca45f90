"""Tiny stand-ins for the pandas / tabulate output the real AITER prints (stdlib only).

A "frame" is (columns: list[str], rows: list[dict]). Values are Python objects (int, float, str, bool,
None = missing). Rendering mimics pandas ``repr(df)`` / ``df.to_string(index=False)`` and
``df.to_markdown(index=False)`` (tabulate "pipe" format, exact).
"""

import csv
import math
import os


def columns_of(rows, first=None):
    """Union of the rows' keys in first-appearance order (pandas DataFrame(list_of_dicts))."""
    cols = list(first or [])
    seen = set(cols)
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def _is_missing(v):
    return v is None or (isinstance(v, float) and math.isnan(v))


# ---------------------------------------------------------------------------------------- CSV I/O

def read_csv(path):
    """Read like aiter's _read_csv: strip headers/cells, drop 'Unnamed:' columns and empty rows.

    Returns (columns, rows) with string cell values ('' for empty cells).
    """
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return [], []
        header = [h.strip() for h in header]
        keep = [i for i, h in enumerate(header) if h and not h.startswith("Unnamed:")]
        cols = [header[i] for i in keep]
        rows = []
        for rec in reader:
            cells = [(rec[i].strip() if i < len(rec) else "") for i in keep]
            if not any(cells):
                continue
            rows.append(dict(zip(cols, cells)))
    return cols, rows


def _csv_cell(v, na_rep):
    if _is_missing(v):
        return na_rep
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(path, cols, rows, na_rep=""):
    """df.to_csv(path, index=False, na_rep=na_rep), written atomically."""
    d = os.path.dirname(os.path.abspath(path))
    if d and not os.path.isdir(d):
        os.makedirs(d, exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([_csv_cell(r.get(c), na_rep) for c in cols])
    os.replace(tmp, path)


def write_table(path, cols, rows, na_rep="", torn=False):
    """What AITER's tuners do with their -o file: ``df.to_csv(path)``, the whole file rewritten IN PLACE
    (truncate, then write; not atomic: aiter-formats.md §1.4). ``torn``: the writer stops half way
    (flushed to disk) and never returns, as a process frozen or killed in the middle of the rewrite."""
    d = os.path.dirname(os.path.abspath(path))
    if d and not os.path.isdir(d):
        os.makedirs(d, exist_ok=True)
    import io
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([_csv_cell(r.get(c), na_rep) for c in cols])
    data = buf.getvalue()
    with open(path, "w", newline="") as fh:
        if not torn:
            fh.write(data)
            return
        fh.write(data[:max(1, len(data) // 2)])
        fh.flush()
        os.fsync(fh.fileno())
        import time
        while True:
            time.sleep(3600)


def norm(v):
    """Normalise a CSV cell for key comparison: '16' / 16 / 16.0 -> 16, 'True' -> 1."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    s = str(v).strip()
    if s in ("True", "False"):
        return int(s == "True")
    try:
        f = float(s)
    except ValueError:
        return s
    if math.isnan(f):
        return s
    return int(f) if f.is_integer() else f


def sort_value(v):
    n = norm(v)
    if isinstance(n, (int, float)):
        return (0, n, "")
    return (1, 0, str(n))


# ---------------------------------------------------------------------------------------- pandas-ish

def _fmt_pandas_col(values):
    """Format one column like pandas' repr (floats share a decimal count)."""
    nums = [v for v in values if not _is_missing(v) and not isinstance(v, bool)
            and isinstance(v, (int, float))]
    has_float = any(isinstance(v, float) for v in nums) or (nums and any(_is_missing(v) for v in values))
    if nums and len(nums) + sum(1 for v in values if _is_missing(v)) == len(values) and has_float:
        decs = 0
        for v in nums:
            s = ("%.6g" % float(v))
            if "e" in s:
                continue
            if "." in s:
                decs = max(decs, len(s.split(".")[1]))
        decs = max(decs, 1)
        out = []
        for v in values:
            out.append("NaN" if _is_missing(v) else "%.*f" % (decs, float(v)))
        return out
    return ["NaN" if (_is_missing(v) and isinstance(v, float)) else ("None" if v is None else str(v))
            for v in values]


def df_repr(cols, rows, index=True, max_rows=60):
    """repr(pd.DataFrame(rows, columns=cols)) (index=True) or df.to_string(index=False)."""
    if not rows:
        return "Empty DataFrame\nColumns: [%s]\nIndex: []" % ", ".join(cols)
    idx = list(range(len(rows)))
    shown = idx
    truncated = index and len(rows) > max_rows
    if truncated:
        shown = idx[:5] + [None] + idx[-5:]
    cells = {}
    for c in cols:
        vals = [rows[i].get(c, float("nan")) for i in idx]
        f = _fmt_pandas_col(vals)
        cells[c] = [("..." if i is None else f[i]) for i in shown]
    widths = {c: max([len(str(c))] + [len(x) for x in cells[c]]) for c in cols}
    lines = []
    if index:
        iw = max(len(str(i)) if i is not None else 3 for i in shown)
        head = " " * iw + "".join("  " + str(c).rjust(widths[c]) for c in cols)
        lines.append(head)
        for n, i in enumerate(shown):
            lab = ("..." if i is None else str(i)).ljust(iw)
            lines.append(lab + "".join("  " + cells[c][n].rjust(widths[c]) for c in cols))
        out = "\n".join(lines)
        if truncated:
            out += "\n\n[%d rows x %d columns]" % (len(rows), len(cols))
        return out
    lines.append(" ".join(str(c).rjust(widths[c]) for c in cols))
    for n in range(len(shown)):
        lines.append(" ".join(cells[c][n].rjust(widths[c]) for c in cols))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- tabulate

def _tab_type(v):
    if v is None:
        return 0  # none
    if isinstance(v, bool):
        return 1
    if isinstance(v, int):
        return 2
    if isinstance(v, float):
        return 3
    if isinstance(v, str):
        s = v
        if s in ("True", "False"):
            return 1
        try:
            int(s)
            return 2
        except ValueError:
            pass
        try:
            float(s)
            return 3
        except ValueError:
            return 5
    return 5


def _tab_format(v, ctype):
    if v is None:
        return ""
    if ctype == 3:
        try:
            return format(float(v), "g")
        except (TypeError, ValueError):
            return str(v)
    if ctype == 2:
        return format(int(v), "") if not isinstance(v, str) else v
    return "%s" % (v,)


def _isnumber(s):
    try:
        float(s)
        return True
    except (TypeError, ValueError):
        return False


def _isint_str(s):
    try:
        int(s)
        return True
    except (TypeError, ValueError):
        return False


def _afterpoint(s):
    if _isnumber(s):
        if _isint_str(s):
            return -1
        pos = s.rfind(".")
        pos = s.lower().rfind("e") if pos < 0 else pos
        if pos >= 0:
            return len(s) - pos - 1
        return -1
    return -1


def to_markdown(cols, rows):
    """df.to_markdown(index=False) == tabulate(..., headers='keys', tablefmt='pipe', showindex=False)."""
    headers = [str(c) for c in cols]
    data = [[(r[c] if c in r else float("nan")) for c in cols] for r in rows]
    ncol = len(headers)
    out_cols = []
    aligns = []
    for j in range(ncol):
        vals = [row[j] for row in data]
        ctype = max([_tab_type(v) for v in vals] or [0])
        strs = [_tab_format(v, ctype) for v in vals]
        align = "decimal" if ctype in (2, 3) else "left"
        minw = len(headers[j]) + 2
        if align == "decimal":
            decs = [_afterpoint(s) for s in strs]
            maxdec = max(decs) if decs else -1
            strs = [s + (maxdec - d) * " " for s, d in zip(strs, decs)]
            width = max([minw] + [len(s) for s in strs])
            strs = [s.rjust(width) for s in strs]
        else:
            strs = [s.strip() for s in strs]
            width = max([minw] + [len(s) for s in strs])
            strs = [s.ljust(width) for s in strs]
        out_cols.append(strs)
        aligns.append(align)
    widths = [max([len(headers[j]) + 2] + [len(s) for s in out_cols[j]]) for j in range(ncol)]
    hdr = []
    for j in range(ncol):
        h = headers[j]
        hdr.append(h.ljust(widths[j]) if aligns[j] == "left" else h.rjust(widths[j]))
    lines = ["|" + "|".join(" " + h + " " for h in hdr) + "|"]
    seg = []
    for j in range(ncol):
        w = widths[j] + 2
        seg.append(("-" * (w - 1)) + ":" if aligns[j] == "decimal" else ":" + "-" * (w - 1))
    lines.append("|" + "|".join(seg) + "|")
    for i in range(len(data)):
        lines.append("|" + "|".join(" " + out_cols[j][i] + " " for j in range(ncol)) + "|")
    return "\n".join(lines)
