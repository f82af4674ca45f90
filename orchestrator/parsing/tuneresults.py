"""The tuner's per-shape result lines, for the live tuning table (review P-11; aiter-formats.md §4 item 6, §5).

GEMM tuners (GemmCommonTuner.result_to_df), printed only when a batch gave exactly one best row (``--batch 1``
or one shape per batch)::

    Tuning result for 'gfx': 'gfx950', 'cu_num': 256, 'M': 16, 'N': 1536, 'K': 7168 is kernelId=8 NAME splitK=0,
    4.8294us, err_ratio=0.0, tflops=2.61 TFLOPS, bw=1304.22 GB/s

(``M`` may render as ``np.int64(16)`` under numpy >= 2.) FmoeTuner::

    Tuning result for ('gfx950', 256, 64, 7168, ...) is (32, 'k1', 'k2', 0.0, 0.0, False) 12.3 us, 45.6 TFLOPS, 7.8 GB/s

and, for a shape no candidate passed: ``No kernel can be used for (...)``. Lines are matched leniently:
anything unreadable is skipped (node output is never trusted to be well-formed).
"""

from __future__ import annotations

import re

from ..shapelib.text import strip_ansi

_GEMM = re.compile(r"Tuning result for (?P<key>.+?) is kernelId=(?P<id>-?\d+) (?P<name>\S+) splitK=(?P<splitk>-?\d+),"
                   r" (?P<us>[-\w.+]+) ?us, err_ratio=(?P<err>[-\w.+]+), tflops=(?P<tflops>[-\w.+]+) TFLOPS")
_MOE = re.compile(r"Tuning result for \((?P<key>[^)]*)\) is \((?P<best>[^)]*)\) (?P<us>[-\w.+]+) us, "
                  r"(?P<tflops>[-\w.+]+) TFLOPS")
_NONE = re.compile(r"No kernel can be used for (?P<key>.+?)\s*$")
_PAIR = re.compile(r"'(\w+)': (?:np\.\w+\()?'?([^',)]*)'?\)?")


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _key(text: str) -> str:
    """A readable key: ``M=16 N=1536 K=7168`` for a GEMM dict, the tuple's values for MoE."""
    pairs = _PAIR.findall(text)
    if pairs:
        return " ".join(f"{k}={v}" for k, v in pairs if k not in ("gfx", "cu_num"))
    vals = [v.strip().strip("'\"") for v in text.strip("() ").split(",") if v.strip()]
    if vals and vals[0].startswith("gfx"):
        vals = vals[2:]            # (gfx, cu_num, ...): the GPU, not the shape
    return ",".join(vals)


def parse_line(line: str) -> dict | None:
    line = strip_ansi(line)
    if "Tuning result for" in line:
        m = _GEMM.search(line)
        if m:
            return {"shape": _key(m["key"]), "kernel": m["name"], "splitk": int(m["splitk"]),
                    "us": _num(m["us"]), "err_ratio": _num(m["err"]), "tflops": _num(m["tflops"])}
        m = _MOE.search(line)
        if m:
            best = [b.strip().strip("'\"") for b in m["best"].split(",")]
            names = [b for b in best[1:3] if b]
            return {"shape": _key(m["key"]), "kernel": " + ".join(names) or "?", "splitk": None,
                    "us": _num(m["us"]), "err_ratio": None, "tflops": _num(m["tflops"])}
        return None
    if "No kernel can be used for" in line:
        m = _NONE.search(line)
        if m:
            return {"shape": _key(m["key"]), "kernel": None, "splitk": None, "us": None, "err_ratio": None,
                    "tflops": None}
    return None


def feed(pending: str, chunk: str) -> tuple[list[dict], str]:
    """Results in ``pending + chunk``'s complete lines, and the incomplete last line to keep (<= 4 KiB)."""
    text = pending + chunk
    cut = text.rfind("\n")
    if cut < 0:
        return [], text[-4096:]
    out = []
    for line in text[:cut].split("\n"):
        if "Tuning result for" in line or "No kernel can be used" in line:
            r = parse_line(line)
            if r is not None:
                out.append(r)
    return out, text[cut + 1:][-4096:]
