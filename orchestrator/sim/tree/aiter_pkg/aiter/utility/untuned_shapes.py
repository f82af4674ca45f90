#@ if head
"""aiter/utility/untuned_shapes.py (simulated; ROCm/aiter #5268, aiter-december-2026.md "Shape capture by AITER
itself"): with ``AITER_TUNE_GEMM=1`` a lookup's miss is appended to ``<family>_untuned_<rest>.csv`` (the tuned
table's base name with ``_tuned_`` -> ``_untuned_``; without it, ``untuned_`` in front) in
``AITER_TUNE_GEMM_DIR`` (default: the package's configs/), in the tuner's input schema. A row is written once
per process (deduplicated here, never across processes: every worker appends its own copy), each row one
``O_APPEND`` write without a lock; the header is published through a temporary file and ``link`` so no reader
sees an empty file; the first row of a file logs ``[AITER_TUNE_GEMM] recording untuned shapes to {path}``.
Never raises: a failed write is logged and stays retryable."""

import os
import tempfile
import threading

from aiter import logger

_ENABLED = None
_LOCK = threading.Lock()
_SEEN = {}                 # path -> {"cols": [...], "rows": set of value tuples, "sep": needs a newline first}
_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def enabled():
    global _ENABLED
    if _ENABLED is None:
        _ENABLED = os.environ.get("AITER_TUNE_GEMM", "0") not in ("0", "", "false")
    return _ENABLED


def untuned_path_for(tuned_file):
    base = os.path.basename(tuned_file)
    base = base.replace("_tuned_", "_untuned_", 1) if "_tuned_" in base else "untuned_" + base
    return os.path.join(os.environ.get("AITER_TUNE_GEMM_DIR") or _CONFIGS, base)


def _header_state(path, cols):
    """Create the file with its header (atomically) or check the one there; -> it needs a newline first."""
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".",
                                   suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write((",".join(cols) + "\n").encode())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    with open(path, "rb") as fh:
        have = fh.readline().rstrip(b"\r\n").decode().split(",")
        if have != cols:
            raise ValueError(f"schema for {path} is {have}, expected {cols}; refusing to append")
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return False
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) not in (b"\n", b"\r")


def record(tuned_file, row):
    if not enabled():
        return
    try:
        path = untuned_path_for(tuned_file)
        cols = list(row.keys())
        key = tuple(str(v) for v in row.values())
        with _LOCK:
            state = _SEEN.get(path)
            if state is not None and key in state["rows"]:
                return
            if state is None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                state = _SEEN[path] = {"cols": cols, "rows": set(), "sep": _header_state(path, cols)}
                logger.info(f"[AITER_TUNE_GEMM] recording untuned shapes to {path}")
            elif state["cols"] != cols:
                raise ValueError(f"schema for {path} changed from {state['cols']} to {cols}")
            data = (("\n" if state["sep"] else "") + ",".join(key) + "\n").encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"short append to {path}")
            finally:
                os.close(fd)
            state["sep"] = False
            state["rows"].add(key)
    except Exception as e:  # noqa: BLE001 - telemetry never breaks a dispatch
        logger.warning(f"[AITER_TUNE_GEMM] could not record untuned shape: {e}")
#@ endif
