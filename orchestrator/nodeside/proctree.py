"""/proc primitives of the helper: a process's stat, environ (the job marker, its run dir), liveness,
the pids there are. Read-only; used by procs.py (launch), runstate.py, killing.py (cancel) and longpoll.py."""

import os

from .common import read_file_bytes, boot_id

MARKER_VAR = "TUNE_REMOTE_JOB"
RUN_DIR_VAR = "TUNE_REMOTE_RUN_DIR"


def proc_stat(pid):
    """(state, ppid, pgrp, session, starttime) from /proc/<pid>/stat, or None if gone."""
    data = read_file_bytes("/proc/%d/stat" % int(pid))
    if not data:
        return None
    try:
        rest = data[data.rindex(b")") + 2:].split()
        return (rest[0].decode("ascii", "replace"), int(rest[1]), int(rest[2]), int(rest[3]),
                int(rest[19]))
    except (ValueError, IndexError):
        return None


def proc_starttime(pid):
    st = proc_stat(pid)
    return None if st is None else st[4]


def environ_has_marker(pid, marker):
    """True / False, or None when /proc/<pid>/environ cannot be read (other user, gone)."""
    data = read_file_bytes("/proc/%d/environ" % int(pid))
    if data is None:
        return None
    if not data:  # zombies and kernel threads have an empty environ
        return False
    want = ("%s=%s" % (MARKER_VAR, marker)).encode("utf-8", "surrogateescape")
    return want in data.split(b"\0")


def environ_run_dir(pid):
    data = read_file_bytes("/proc/%d/environ" % int(pid)) or b""
    prefix = (RUN_DIR_VAR + "=").encode()
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "surrogateescape")
    return None


def pid_alive(pid, starttime=None, marker=None, recorded_boot_id=None):
    """Alive = exists, not a zombie, same starttime, carries the marker (if readable), same boot."""
    if not pid:
        return False
    if recorded_boot_id and boot_id() and recorded_boot_id != boot_id():
        return False
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X", "x"):
        return False
    if starttime is not None and st[4] != int(starttime):
        return False
    if marker:
        has = environ_has_marker(pid, marker)
        if has is False:
            return False
    return True


def list_pids():
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            out.append(int(name))
    return out


SERVER_ENV = ("VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_LINEAR", "VLLM_ROCM_USE_AITER_MOE", "SGLANG_USE_AITER")


def _server_kind(argv):
    """'vllm' / 'sglang' for an inference server's main process (``vllm serve``, vLLM's api_server module,
    ``sglang.launch_server``), else None."""
    text = " ".join(argv)
    if "sglang.launch_server" in text or "sglang/launch_server" in text:
        return "sglang"
    if "vllm" in text and ("api_server" in text or "serve" in argv[1:4] or " serve " in " %s " % text):
        return "vllm"
    return None


def servers(limit=8):
    """The vLLM / SGLang servers running here: [{"pid", "kind", "env": {the AITER switches it was started
    with: SERVER_ENV and every AITER_* it sets}}], read from /proc (what the server really has, not the
    environment this helper was started with)."""
    out = []
    for pid in sorted(list_pids()):
        raw = read_file_bytes("/proc/%d/cmdline" % pid)
        if not raw:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        kind = _server_kind(argv)
        if kind is None:
            continue
        env = {}
        for item in (read_file_bytes("/proc/%d/environ" % pid) or b"").split(b"\0"):
            key, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep and (key in SERVER_ENV or key.startswith("AITER_")):
                env[key] = value
        out.append({"pid": pid, "kind": kind, "env": env})
        if len(out) >= limit:
            break
    return out
