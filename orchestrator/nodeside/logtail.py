"""``log_tail``: the new bytes of growing server logs, mined where they lie (``tune-remote watch``).

Request ``{"logs": [{"path", "inode", "offset"}], "variant": str or null, "facts": bool}``: each log is read
from ``offset`` when it is still the same file (same inode, size >= offset); a log that was rotated or
truncated (another inode, or smaller than the offset) is read from its start. Only complete lines are read:
the answer's ``offset`` stops after the last newline, so a line being written is read whole next time.
The bytes go through the shape-log scanner (grep-style dense/sparse blocks, shapescan.py), never to the
laptop. Answer: ``{"logs": [{"path", "inode", "size", "start", "offset", "rotated", "missing", "bytes"}],
"shapes": {variant: [shape]}, "counts": {variant: [n]}, "misses", "hits", "lines", "bytes", "warnings",
"facts": {"aiter_version", "rocm_version", "gfx", "miss_log_once", "capture_csv"} (with ``facts``)}``, and
``workers`` (per shape the processes that logged it). A capture CSV of AITER's (``*_untuned_*.csv`` with a
header, AITER_TUNE_GEMM=1) is read like a log: the rows appended since the last offset, through its header;
a directory stands for the capture CSVs in it (each answered as its own log; ``within`` in the directory's
spec gives their inodes/offsets).
Stdlib only, Python >= 3.8.
"""

import os

import io

from ..shapelib.shapecsv import capture_name, looks_like_capture, parse_capture
from ..shapelib.shaperecords import RecordParser
from ..shapelib.shapescan import LineScanner

CHUNK_BYTES = 1 << 20
TAIL_PROBE = 1 << 16       # the last newline is looked for in the last bytes first


def _last_newline_end(f, start, size):
    """The offset just past the last newline in [start, size), or ``start`` when there is none."""
    end = size
    while end > start:
        lo = max(start, end - TAIL_PROBE)
        f.seek(lo)
        block = f.read(end - lo)
        cut = block.rfind(b"\n")
        if cut >= 0:
            return lo + cut + 1
        end = lo
    return start


def tail_one(spec, scanner):
    """One log: where to read from, what was read (fed to ``scanner``), where the next read starts."""
    path = spec.get("path")
    out = {"path": path, "missing": False, "rotated": False, "inode": None, "size": 0,
           "start": 0, "offset": 0, "bytes": 0}
    try:
        f = open(path, "rb")
    except (OSError, TypeError):
        out["missing"] = True
        return out
    with f:
        st = os.fstat(f.fileno())
        prev_inode, prev_off = spec.get("inode"), int(spec.get("offset") or 0)
        start = prev_off
        if prev_inode is not None and prev_inode != st.st_ino or st.st_size < prev_off:
            out["rotated"], start = True, 0
        out.update(inode=st.st_ino, size=st.st_size, start=start)
        end = _last_newline_end(f, start, st.st_size)
        header = b""
        if capture_name(path) is not None:
            f.seek(0)
            header = f.readline(1 << 16)
        if header.endswith(b"\n") and looks_like_capture(path, header):
            # AITER's own capture CSV (AITER_TUNE_GEMM=1, issue 36): the header names the columns of every
            # row, so it is read each time; the rows appended since are added (a partial last row waits)
            start = max(start, len(header))
            if end > start:
                f.seek(start)
                parse_capture(io.BytesIO(header + f.read(end - start)), path, scanner.p)
                scanner.p.r.lines -= 1
                scanner.p.r.bytes -= len(header)
                scanner.p.reset_file()
            end = max(end, start)
        elif end > start:
            f.seek(start)
            scanner.file(f, CHUNK_BYTES, limit=end - start)
            scanner.p.reset_file()
        out["offset"], out["bytes"] = end, end - start
    return out


def facts():
    """What an upgrade changes, read without importing aiter: the AITER distribution's version, ROCm's
    ``.info/version``, the first GPU's gfx name (rocminfo)."""
    import re

    from . import discovery
    from . import gpus
    from .common import run_tool, which_tool
    out = {"aiter_version": None, "rocm_version": None, "gfx": None}
    for norm, dist in discovery._dist_candidates()[0]:
        info = discovery._dist_info(norm, dist)
        if discovery._is_amd_aiter_pkg(info["package_dir"]):
            out["aiter_version"] = info["version"]
            # issue 36: how the runtime logs a miss (once per shape per process?), read in its source
            from .probe import miss_log_facts
            out.update(miss_log_facts(os.path.dirname(info["package_dir"])))
            break
    tool = which_tool("rocminfo")
    if tool is not None:
        text, _problem = run_tool([tool], timeout=30.0)
        agents = gpus.rocminfo_gpus(text)
        names = [a["gfx"] for a in agents if a["gfx"]]
        g = re.search(r"\b(gfx\w+)\b", text or "")
        out["gfx"] = names[0] if names else (g.group(1) if g else None)
        out["rocm_version"] = gpus.rocm_version(tool)
    return out


def capture_dir_specs(spec):
    """A watched directory (AITER_TUNE_GEMM_DIR, issue 36) stands for the capture CSVs in it, sorted, each read
    from where ``spec["within"]`` (path -> inode/offset) says the last cycle stopped; a file that appeared
    since is read from its start. None when ``spec`` is not a directory."""
    path = spec.get("path")
    if not isinstance(path, str) or not os.path.isdir(path):
        return None
    within = spec.get("within") or {}
    names = sorted(n for n in os.listdir(path) if capture_name(n) is not None
                   and os.path.isfile(os.path.join(path, n)))
    return [dict(within.get(os.path.join(path, n)) or {}, path=os.path.join(path, n)) for n in names]


def op_log_tail(req):
    specs = []
    for s in req.get("logs") or []:
        s = s if isinstance(s, dict) else {"path": s}
        inside = capture_dir_specs(s)
        specs.extend([s] if inside is None else inside)
    parser = RecordParser(req.get("variant"), False)
    scanner = LineScanner(parser)
    logs = [tail_one(s, scanner) for s in specs]
    result = parser.finish()
    answer = {"logs": logs, "shapes": result.shapes, "counts": getattr(result, "counts", {}),
              "workers": dict(getattr(result, "workers", {})),      # processes per shape (issue 36: once-per-process logs)
              "misses": result.misses, "hits": result.hits, "lines": result.lines,
              "bytes": sum(entry["bytes"] for entry in logs), "warnings": list(result.warnings)}
    if req.get("facts"):
        answer["facts"] = facts()
    return answer
