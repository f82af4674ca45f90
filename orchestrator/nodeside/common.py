"""Shared by every helper module: the version, the handled-error type, small file readers."""

import json
import os
import shutil
import subprocess
import time

HELPER_VERSION = "1.0.0"


class HelperError(Exception):
    """A handled problem: becomes {"ok": false, "error", "hint"} and exit status 0."""

    def __init__(self, error, hint=None, **extra):
        Exception.__init__(self, error)
        self.error = error
        self.hint = hint
        self.extra = extra


def epoch_s():
    return time.time()


def read_file_bytes(path, limit=None):
    try:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:
        return None


def read_file_text(path):
    data = read_file_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def read_json_file(path):
    data = read_file_bytes(path)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return {"_unreadable": True}
    return value if isinstance(value, dict) else {"_unreadable": True}


def boot_id():
    text = read_file_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def which_tool(tool):
    found = shutil.which(tool)
    if found:
        return found
    for base in ("/opt/rocm/bin", "/opt/rocm/sbin"):
        cand = os.path.join(base, tool)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def run_tool(argv, timeout=30.0, env=None):
    """Run a tool and return (stdout text or None, problem string or None)."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "%s failed: %s" % (os.path.basename(argv[0]), exc)
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return out, "%s exited %d%s" % (os.path.basename(argv[0]), proc.returncode,
                                         (": " + err[-1]) if err else "")
    return out, None
