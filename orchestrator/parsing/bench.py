"""Parse AITER op_tests output (aiter-formats.md §4) into rows, then into keyed benchmark results.

Two output styles (``BenchSpec.output``):

``"markdown"`` (v0.1.10+): every ``<name> summary (markdown):`` record starts a pandas/tabulate pipe table
  on the following lines (header, ``|:---|---:|`` alignment row, one row per test call). All tables in the
  text are read, in order (test_batched_gemm_bf16 prints one per dtype; logs may hold several runs). The
  header line may carry any prefix (``[aiter] ``, vLLM ``(Worker_TP0 pid=1) ``, SGLang ``[date TPn] ``,
  ``AITER_LOG_MORE`` puts it on its own line after the header record); table lines may carry the same
  prefixes, which are removed, as are ANSI colour codes. Column names are kept exactly as printed
  (``"ck us"``, ``"ck TFLOPS"``, ``"M"``). Cells that parse as numbers become floats, ``nan``/``NaN``/empty/
  ``None`` become None, anything else (``torch.bfloat16``, ``True``) stays a string. A row whose cell count
  differs from the header is skipped.

``"markdown"`` also reads a pipe table after a bare ``<name> summary:`` record (``{df.to_markdown()}``, as
  test_gemm_a8w8_mxfp8_bpreshuffle prints it; its first column is the frame's index).

``"markdown"`` also reads the pre-0.1.10 form, ``summary:\n{df}`` (a pandas repr, not markdown): the
  record's line ends in ``summary:``; the next line is the header (column names right-aligned over their
  columns, so ``"ck us"`` keeps its space), then one line per row led by the integer index. Columns are
  found by their common right edge (pandas right-aligns every cell and header); a frame wider than the
  display is printed in blocks whose headers end in a backslash and that are separated by a blank line: their
  columns are joined by index. Which form a log holds is read from the log itself, not the version.

``"perf_lines"`` (test_batched_gemm_a8w8, test_batched_gemm_bf16 <= v0.1.16): one line per shape,
  ``[perf] dim: (16, 1, 1280, 8192) dtype: torch.bfloat16, torch avg: 123.45 us, ck avg: 12.34 us,
  uplift: 900.4%`` -> ``{"b", "m", "n", "k", "dtype", "torch avg", "ck avg", "uplift"}`` (dims int, times
  and uplift (percent) float, ``nan``/``inf`` -> None).

``"run_config"``: a tuner's own ``--run_config`` table (``<label> Benchmark Results``, one ``keys:`` line per
  row; parsing/runconfig.py).

``bench_results(rows, bench)`` keeps rows matching ``bench.row_filter`` (a filter column absent from a row,
as in older AITER output, does not drop it), builds the key from
``bench.key_columns`` (output column -> lower-case key; dims as int, dtype-like keys as ``torch.<name>``
strings) and takes ``bench.metric`` as the value (None when the column is missing or NaN, e.g. test_gemm_a4w4
on a non-gfx950 GPU prints only its argument columns). Rows lacking a key column are skipped. When a key
occurs more than once the last row wins (a re-run later in the same log), in first-seen key order.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from ..shapelib.text import strip_ansi, strip_prefix
from ..variants import BenchSpec

__all__ = ["parse_bench_log", "parse_markdown_tables", "parse_pandas_tables", "parse_perf_lines",
           "bench_results"]

_SUMMARY = "summary (markdown):"
_ALIGN_CELL = re.compile(r"^:?-+:?$")
_PERF = re.compile(
    r"\[perf\] dim: \(([^)]*)\)\s*dtype: ([^,]+?),\s*torch avg:\s*(\S+)\s*us,\s*ck avg:\s*(\S+)\s*us,"
    r"\s*uplift:\s*([^%\s\[]+)%?")
_NONE_CELLS = {"", "nan", "NaN", "None", "none", "<NA>", "NaT", "null", "Null"}

DIM_KEYS = frozenset({"b", "m", "n", "k", "token", "model_dim", "inter_dim", "expert", "topk"})
DTYPE_KEYS = frozenset({"q_dtype_w", "q_dtype_a", "dtype", "outdtype"})
_DTYPE_ALIASES = {
    "i8": "torch.int8", "int8": "torch.int8", "bf16": "torch.bfloat16", "bfloat16": "torch.bfloat16",
    "fp16": "torch.float16", "float16": "torch.float16", "fp32": "torch.float32", "float32": "torch.float32",
}


def _clean(line: str) -> str:
    return strip_prefix(strip_ansi(line).rstrip("\r\n"))   # vLLM (Worker_TP0 pid=1), SGLang [date TPn], [aiter]


def _cell(text: str) -> Any:
    t = text.strip()
    if t in _NONE_CELLS:
        return None
    try:
        v = float(t)
    except ValueError:
        return t
    if math.isnan(v):
        return None
    return v


def _split_row(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _markdown_after_summary(lines: list[str], i: int) -> bool:
    """A ``<name> summary:`` record followed by a pipe table (``{df.to_markdown()}`` without the
    ``(markdown)`` label: test_gemm_a8w8_mxfp8_bpreshuffle)."""
    if not _PANDAS_SUMMARY.search(_clean(lines[i])):
        return False
    j = i + 1
    while j < len(lines) and not _clean(lines[j]).strip():
        j += 1
    return j < len(lines) and _clean(lines[j]).lstrip().startswith("|")


def parse_markdown_tables(text: str) -> list[dict]:
    """Rows of every ``... summary (markdown):`` pipe table in ``text``, in order."""
    rows: list[dict] = []
    lines = text.splitlines()
    i = 0
    n = len(lines)
    while i < n:
        if _SUMMARY not in lines[i] and not _markdown_after_summary(lines, i):
            i += 1
            continue
        i += 1
        # the table starts on the next line (blank lines tolerated)
        while i < n and not _clean(lines[i]).strip():
            i += 1
        header: list[str] | None = None
        while i < n:
            line = _clean(lines[i])
            if not line.lstrip().startswith("|"):
                break
            cells = _split_row(line)
            i += 1
            if header is None:
                header = cells
                continue
            if all(_ALIGN_CELL.match(c) for c in cells if c) and any(cells):
                continue
            if len(cells) != len(header):
                continue
            rows.append({h: _cell(c) for h, c in zip(header, cells)})
    return rows


_PANDAS_SUMMARY = re.compile(r"(?:^|\s)summary:\s*$")
_INDEX_ROW = re.compile(r"^(\d+)\s")
_TOKEN = re.compile(r"\S+")


def _pandas_block(header: str, data: list[str]) -> list[tuple[str, dict]]:
    """(index, row) of one repr block: columns split at the right edges every data line shares."""
    spans = [[(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(line)][1:] for line in data]
    edges = set.intersection(*(set(e for _, e, _ in toks) for toks in spans))
    edges = sorted(edges | {max(e for _, e, _ in spans[0])} if spans[0] else edges)

    def cells(tokens) -> list[str]:
        out: dict[int, list[str]] = {}
        for _, end, text in tokens:
            edge = next((e for e in edges if e >= end), None)
            if edge is None:
                return []
            out.setdefault(edge, []).append(text)
        return [" ".join(out[e]) if e in out else "" for e in edges]

    names = cells([(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(header)])
    rows = []
    for line, toks in zip(data, spans):
        vals = cells(toks)
        if not names or len(vals) != len(names):
            continue
        rows.append((line.split(None, 1)[0], {h: _cell(c) for h, c in zip(names, vals)}))
    return rows


def parse_pandas_tables(text: str) -> list[dict]:
    """Rows of every pre-0.1.10 ``summary:`` pandas-repr table in ``text``, in order."""
    rows: list[dict] = []
    lines = [_clean(line) for line in text.splitlines()]
    i, n = 0, len(lines)
    while i < n:
        if not _PANDAS_SUMMARY.search(lines[i]):
            i += 1
            continue
        i += 1
        merged: dict[str, dict] = {}
        while True:
            while i < n and not lines[i].strip():
                i += 1
            if i >= n or lines[i].startswith("Empty DataFrame"):
                break
            header = lines[i].rstrip()
            more = header.endswith("\\")
            if more:
                header = header[:-1].rstrip()
            i += 1
            data = []
            while i < n and _INDEX_ROW.match(lines[i]):
                data.append(lines[i].rstrip().rstrip("\\").rstrip())
                i += 1
            if not data:
                break
            for idx, row in _pandas_block(header, data):
                merged.setdefault(idx, {}).update(row)
            if not more:
                break
        rows.extend(merged.values())
    return rows


def _num(text: str) -> float | None:
    try:
        v = float(text.strip())
    except ValueError:
        return None
    return None if (math.isnan(v) or math.isinf(v)) else v


def parse_perf_lines(text: str) -> list[dict]:
    rows = []
    for raw in text.splitlines():
        if "[perf]" not in raw:
            continue
        line = strip_ansi(raw)
        m = _PERF.search(line)
        if not m:
            continue
        dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
        if len(dims) != 4:
            continue
        try:
            b, mm, n, k = (int(d) for d in dims)
        except ValueError:
            continue
        rows.append({
            "b": b, "m": mm, "n": n, "k": k,
            "dtype": m.group(2).strip(),
            "torch avg": _num(m.group(3)),
            "ck avg": _num(m.group(4)),
            "uplift": _num(m.group(5)),
        })
    return rows


def parse_bench_log(text: str, bench: BenchSpec) -> list[dict]:
    """Raw rows of an op_test log, per ``bench.output``."""
    if bench.output == "markdown":
        return parse_markdown_tables(text) + parse_pandas_tables(text)
    if bench.output == "perf_lines":
        return parse_perf_lines(text)
    if bench.output == "run_config":      # a tuner's own --run_config benchmark (parsing/runconfig.py)
        from .runconfig import parse_runconfig_rows
        return parse_runconfig_rows(text)
    if bench.output == "fhmoe_lines":     # the FHMoE tuner's --baseline-only lines (parsing/fhmoe.py)
        from .fhmoe import baseline_rows
        return baseline_rows(text)
    raise ValueError(f"unknown bench output style {bench.output!r}")


def _norm_key(col: str, value: Any) -> Any:
    if value is None:
        return None
    if col in DIM_KEYS:
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return value
    if col in DTYPE_KEYS:
        s = str(value).strip().strip("'\"")
        return _DTYPE_ALIASES.get(s, s if s.startswith("torch.") or "." in s else f"torch.{s}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _matches(row_value: Any, wanted: Any) -> bool:
    if row_value is None:
        return False
    if str(row_value) == str(wanted):
        return True
    try:
        return float(row_value) == float(wanted)
    except (TypeError, ValueError):
        return False


def bench_results(rows: Iterable[dict], bench: BenchSpec) -> list[dict]:
    """``[{"key": {...}, "value": float | None}]`` per distinct key (last row wins)."""
    out: dict[tuple, dict] = {}
    for row in rows:
        # a filter column the script does not print at all (older AITER) does not drop the row
        if any(col in row and not _matches(row[col], val) for col, val in bench.row_filter.items()):
            continue
        key = {}
        for out_col, key_col in bench.key_columns.items():
            if out_col not in row or row[out_col] is None:
                key = None
                break
            key[key_col] = _norm_key(key_col, row[out_col])
        if key is None:
            continue
        raw = row.get(bench.metric)
        value: float | None
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = None if (math.isnan(raw) or math.isinf(raw)) else float(raw)
        elif isinstance(raw, str):
            value = _num(raw)
        else:
            value = None
        out[tuple(key.items())] = {"key": key, "value": value}
    return list(out.values())
