"""JIT build records for the report's cold-build profile (seed 004): the ``.ninja_log`` of every module
built in a JIT dir (``{jit dir}/build/<module>/build/.ninja_log``, aiter-formats.md §6).

Op ``jit_logs``: ``{"dirs": [{"label", "jit_dir" or null, "package_dir", "jit_dir_env", "modules": [name] or
null}], "max_bytes"}``. A null ``jit_dir`` is the live one (what AITER's ``get_user_jit_dir`` picks); a
null ``modules`` means every module built there (with ``since``, a node time: those whose log changed
from then on). Answers ``{"logs": [{"label", "jit_dir", "module",
"path", "size", "mtime", "text", "truncated"}], "missing": [{"label", "jit_dir", "module"}]}``; a log
longer than ``max_bytes`` (default 256 KiB) is sent from its last whole line before the tail (the last
build is at the end). Read only. Stdlib only, Python >= 3.8.
"""

import glob
import os

from .common import HelperError
from .staging import live_jit_dir

MAX_BYTES = 256 * 1024
TOTAL_BYTES = 4 * 1024 * 1024


def _mtime(path):
    try:
        return os.path.getmtime(path)
    except OSError:
        return float("-inf")


def _tail(path, limit):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            if size > limit:
                fh.seek(size - limit)
                data = fh.read()
                data = data[data.find(b"\n") + 1:]
                return data, size, True
            return fh.read(), size, False
    except OSError:
        return None, None, False


def op_jit_logs(req):
    dirs = req.get("dirs")
    if not isinstance(dirs, list):
        raise HelperError("jit_logs: dirs must be a list", hint="send {\"dirs\": [{\"label\", \"jit_dir\"}]}")
    limit = int(req.get("max_bytes") or MAX_BYTES)
    logs, missing, total = [], [], 0
    for d in dirs:
        label = d.get("label") or ""
        jit_dir = d.get("jit_dir") or live_jit_dir(d.get("package_dir"), d.get("jit_dir_env"))
        modules = d.get("modules")
        if modules is None:
            found = sorted(glob.glob(os.path.join(glob.escape(jit_dir), "build", "*", "build", ".ninja_log")))
            since = d.get("since")
            if since is not None:     # only what was built from then on (a shared live dir holds more)
                found = [p for p in found if _mtime(p) >= float(since)]
            elif not found:
                missing.append({"label": label, "jit_dir": jit_dir, "module": None})
            names = [p.split(os.sep)[-3] for p in found]
        else:
            names = [str(m) for m in modules]
        for name in names:
            path = os.path.join(jit_dir, "build", name, "build", ".ninja_log")
            data, size, cut = _tail(path, limit)
            if data is None:
                missing.append({"label": label, "jit_dir": jit_dir, "module": name})
                continue
            total += len(data)
            if total > TOTAL_BYTES:
                missing.append({"label": label, "jit_dir": jit_dir, "module": name, "too_much": True})
                continue
            logs.append({"label": label, "jit_dir": jit_dir, "module": name, "path": path, "size": size,
                         "mtime": os.path.getmtime(path), "text": data.decode("utf-8", "replace"),
                         "truncated": cut})
    return {"logs": logs, "missing": missing}
