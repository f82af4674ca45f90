"""The ``status`` op: each run's state (runstate.run_state) plus the new bytes, last line and tuner progress of
its log and of any other files asked for. One round trip per poll; never signals anything."""

import base64
import os
import re

from .common import epoch_s, boot_id
from .runstate import run_state
from ..shapelib.text import strip_ansi

DEFAULT_MAX_BYTES = 64 * 1024
MAX_MAX_BYTES = 16 * 1024 * 1024
PROGRESS_CHUNK = 256 * 1024
PROGRESS_SCAN_LIMIT = 4 * 1024 * 1024
LAST_LINE_WINDOW = 64 * 1024
LAST_LINE_MAX = 300

PROGRESS_RE = re.compile(
    r"processed (\d+) batches of (\d+)(?:, Processing Status ====> ([0-9.]+)% tuned in (\S+))?"
)


def _tail_bytes(f, size, window):
    start = max(0, size - window)
    f.seek(start)
    return start, f.read(size - start)


def _last_line(f, size):
    if size <= 0:
        return None
    _, data = _tail_bytes(f, size, LAST_LINE_WINDOW)
    text = data.decode("utf-8", "replace")
    for line in reversed(text.split("\n")):
        for seg in reversed(line.split("\r")):
            seg = strip_ansi(seg).strip()
            if seg:
                return seg[:LAST_LINE_MAX]
    return None


_SCANNED = {}    # (path, inode) -> (bytes scanned, progress): a persistent helper reads only new bytes
SCAN_OVERLAP = 4096   # re-read before the old end: a progress line that was half written is seen whole


def _progress_cached(f, size, path):
    try:
        key = (path, os.fstat(f.fileno()).st_ino)
    except OSError:
        return _progress(f, size)
    prev = _SCANNED.get(key)
    if prev is not None and prev[0] <= size:
        found = _progress(f, size, floor=max(0, prev[0] - SCAN_OVERLAP)) if size > prev[0] else None
        result = found or prev[1]
    else:
        result = _progress(f, size)
    if len(_SCANNED) > 256:
        _SCANNED.clear()
    _SCANNED[key] = (size, result)
    return result


def _progress(f, size, floor=0):
    """Last `processed X batches of Y` line, scanning backwards from the end in 256 KiB chunks (not
    below ``floor``)."""
    end = size
    scanned = 0
    carry = b""
    while end > floor and scanned < PROGRESS_SCAN_LIMIT:
        start = max(floor, end - PROGRESS_CHUNK)
        f.seek(start)
        chunk = f.read(end - start) + carry
        scanned += end - start
        text = strip_ansi(chunk.decode("utf-8", "replace"))
        last = None
        for m in PROGRESS_RE.finditer(text):
            last = m
        if last is not None:
            done, total = int(last.group(1)), int(last.group(2))
            pct = round(done * 100.0 / total, 1) if total else None
            return {"done": done, "total": total, "pct": pct, "tuner": last.group(4)}
        # keep the partial first line so a match split across chunks is seen next round
        nl = chunk.find(b"\n")
        carry = chunk[:nl] if nl >= 0 else chunk
        if len(carry) > PROGRESS_CHUNK:
            carry = carry[:PROGRESS_CHUNK]
        end = start
    return None


def op_status(req):
    max_bytes = req.get("max_bytes")
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    max_bytes = max(0, min(max_bytes, MAX_MAX_BYTES))
    runs = []
    for item in req.get("runs") or []:
        if isinstance(item, str):
            item = {"run_dir": item}
        run_dir = os.path.abspath(item.get("run_dir") or "")
        st = run_state(run_dir)
        rec = st["record"] or {}
        cmd = st["command"] or {}
        log_path = rec.get("log_path") or cmd.get("log_path")
        entry = {"run_dir": run_dir, "state": st["state"], "rc": st["rc"], "pid": st["pid"],
                 "child_pid": st["child_pid"], "alive": st["alive"], "wrapper_alive": st["wrapper_alive"],
                 "child_alive": st["child_alive"], "cancel_requested": st["cancel_requested"],
                 "reason": st["reason"], "log_path": log_path, "log_size": None, "log_age_s": None,
                 "data_b64": "", "offset": None, "next_offset": None, "eof": True, "reset": False,
                 "progress": None, "last_line": None, "started_at": rec.get("started_at"),
                 "waiting_for": st.get("waiting_for")}
        offset = item.get("offset")
        offset = 0 if offset is None else int(offset)
        per_run_max = item.get("max_bytes")
        limit = max_bytes if per_run_max is None else max(0, min(int(per_run_max), MAX_MAX_BYTES))
        entry["offset"] = offset
        entry["next_offset"] = offset
        if log_path:
            entry.update(_read_log(log_path, offset, limit))
        runs.append(entry)
    files = []
    for item in req.get("files") or []:
        path = item.get("path") or ""
        entry = {"path": path, "size": None, "age_s": None, "data_b64": "", "offset": 0,
                 "next_offset": int(item.get("offset") or 0), "eof": True, "reset": False,
                 "progress": None, "last_line": None}
        entry.update(_read_log(path, int(item.get("offset") or 0), max_bytes))
        if "log_size" in entry:
            entry["size"] = entry.pop("log_size")
            entry["age_s"] = entry.pop("log_age_s")
        files.append(entry)
    return {"runs": runs, "files": files, "boot_id": boot_id(), "now": epoch_s()}


def _read_log(log_path, offset, limit):
    """Size, age, bytes from offset (base64), last line and tuner progress of one log file."""
    out = {}
    try:
        with open(log_path, "rb") as f:
            fst = os.fstat(f.fileno())
            size = fst.st_size
            out["log_size"] = size
            out["log_age_s"] = round(max(0.0, epoch_s() - fst.st_mtime), 3)
            if offset > size:  # truncated or replaced: start over, and say so
                out["reset"] = True
                offset = 0
            out["offset"] = offset
            f.seek(offset)
            data = f.read(min(limit, size - offset)) if limit else b""
            out["data_b64"] = base64.b64encode(data).decode("ascii")
            out["next_offset"] = offset + len(data)
            out["eof"] = out["next_offset"] >= size
            out["last_line"] = _last_line(f, size)
            out["progress"] = _progress_cached(f, size, log_path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        out["log_error"] = str(exc)
    return out


def op_prefix_sha(req):
    """{"path", "length"} -> {"sha256" of the first `length` bytes, "size" now}: a copy of a log that grew
    while it was copied is verified as an exact prefix of it (C-05)."""
    import hashlib
    path, length = req.get("path") or "", int(req.get("length") or 0)
    h, left = hashlib.sha256(), length
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while left > 0:
            block = f.read(min(left, 1 << 20))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return {"sha256": h.hexdigest() if left == 0 else None, "size": size}
