"""The FHMoE tuner's own lines (op_tests/tuners/tune_fhmoe.py at ROCm/aiter eb326e45), in ms, never us.

- a tuned row: ``M=<token>: <before> ms -> <after> ms (<s1>, <s2>) -> (<b1>, <b2>)``: the incumbent row's
  kernels timed first, then the winner (the incumbent again when no candidate beat it by
  ``--min-improvement-pct``);
- ``--baseline-only``: ``M=<token>: baseline <x> ms (<s1>, <s2>)``: the rows of ``-i`` timed as they are (the
  benchmark of both arms: ``BenchSpec.output == "fhmoe_lines"``);
- ``M=<token>: sampled FP32 validation passed for <n> rows (relative L2=<e>)`` after each row; a failed one
  raises (the whole run fails, nothing written).
Times are ``triton.testing.do_bench`` milliseconds of the whole two-stage call.
"""

from __future__ import annotations

import re

_PREFIX = r"(?:^|\s|\])"
TUNED = re.compile(_PREFIX + r"M=(\d+): ([0-9.]+|inf|nan) ms -> ([0-9.]+|inf|nan) ms \(([^,()]+), ([^,()]+)\) -> "
                   r"\(([^,()]+), ([^,()]+)\)")
BASELINE = re.compile(_PREFIX + r"M=(\d+): baseline ([0-9.]+|inf|nan) ms \(([^,()]+), ([^,()]+)\)")
VALIDATED = re.compile(_PREFIX + r"M=(\d+): sampled FP32 validation passed for (\d+) rows \(relative L2=([0-9.]+)\)")


def _ms(text: str) -> float | None:
    v = float(text)
    return None if v != v or v == float("inf") else v


def tuned_lines(text: str) -> list[dict]:
    """Every tuned-row line: {"token", "before_ms", "after_ms", "incumbent": [s1, s2], "winner": [b1, b2],
    "changed", "validated"} in log order (the last line of a token wins where a run was repeated)."""
    checked = {int(m.group(1)) for m in VALIDATED.finditer(text)}
    out: dict[int, dict] = {}
    for m in TUNED.finditer(text):
        token = int(m.group(1))
        inc, win = [m.group(4).strip(), m.group(5).strip()], [m.group(6).strip(), m.group(7).strip()]
        out.pop(token, None)
        out[token] = {"token": token, "before_ms": _ms(m.group(2)), "after_ms": _ms(m.group(3)),
                      "incumbent": inc, "winner": win, "changed": inc != win, "validated": token in checked}
    return list(out.values())


def baseline_rows(text: str) -> list[dict]:
    """Rows in the bench parser's form: {"token": int, "ms": float|None, "kernelName1", "kernelName2"}."""
    return [{"token": int(m.group(1)), "ms": _ms(m.group(2)), "kernelName1": m.group(3).strip(),
             "kernelName2": m.group(4).strip()} for m in BASELINE.finditer(text)]
