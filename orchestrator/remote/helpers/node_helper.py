#!/usr/bin/env python3
"""tune-remote node helper: one JSON request on stdin, one JSON answer on stdout, per call.

Pushed into the container next to ``shapelog.py`` and run as ``python3 node_helper.py <op>``.
Stdlib only, Python >= 3.8. The protocol is pinned in docs/internals.md ("Node helper protocol").

Every answer is ONE line of JSON: ``{"ok": true, ...}`` or ``{"ok": false, "error", "hint"}``.
Handled problems exit 0; an unexpected exception still prints an ``ok: false`` line (with
``"internal": true`` and a traceback) but exits 1, because that is a bug in the helper.

Detached jobs (``launch``/``status``/``cancel``) keep their truth in a run directory:
``command.json`` (exclusive, written before anything starts), ``record.json`` (written by the
supervising wrapper once the job runs), ``rc`` (exit status, written by the wrapper when the job
ends: the code, or 128+N for signal N) and ``cancelled`` (written by ``cancel``). Every file is
written tmp + rename. The wrapper is this script in the internal op ``_supervise``: it is the
session and process-group leader (setsid after a double fork), it runs the job as its child in the
same group with stdin /dev/null and stdout+stderr appended to the log, and it writes ``rc``.
"""

from __future__ import annotations

import ast
import base64
import csv
import errno
import glob
import hashlib
import io
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tokenize
import traceback

HELPER_VERSION = "1.0.0"

MARKER_VAR = "TUNE_REMOTE_JOB"
RUN_DIR_VAR = "TUNE_REMOTE_RUN_DIR"
INTERNAL_SUPERVISE = "_supervise"

DEFAULT_MAX_BYTES = 64 * 1024
MAX_MAX_BYTES = 16 * 1024 * 1024
PROGRESS_CHUNK = 256 * 1024
PROGRESS_SCAN_LIMIT = 4 * 1024 * 1024
LAST_LINE_WINDOW = 64 * 1024
LAST_LINE_MAX = 300
LAUNCH_TIMEOUT_S = 60.0
HASH_CHUNK = 1024 * 1024

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
PROGRESS_RE = re.compile(
    r"processed (\d+) batches of (\d+)(?:, Processing Status ====> ([0-9.]+)% tuned in (\S+))?"
)
SMI_USE_RE = re.compile(r"GPU\[(\d+)\]\s*:\s*GPU use \(%\):\s*(\d+)")
GFX_RE = re.compile(r"\b(gfx\w+)\b")


class HelperError(Exception):
    """A handled problem: becomes {"ok": false, "error", "hint"} and exit status 0."""

    def __init__(self, error, hint=None, **extra):
        Exception.__init__(self, error)
        self.error = error
        self.hint = hint
        self.extra = extra


# ------------------------------------------------------------------------------------------------
# small utilities
# ------------------------------------------------------------------------------------------------


def _now():
    return time.time()


def _read_bytes(path, limit=None):
    try:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:
        return None


def _read_text(path):
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def _read_json(path):
    data = _read_bytes(path)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return {"_unreadable": True}
    return value if isinstance(value, dict) else {"_unreadable": True}


def _default_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _write_temp(path, data, mode=None):
    """Complete, fsynced content in a temp file beside path; returns the temp file's name."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode() if mode is None else mode)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return tmp


def atomic_write(path, data, mode=None):
    """Write bytes to path via a temp file in the same directory + fsync + os.replace."""
    tmp = _write_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def exclusive_write(path, data):
    """Create path with complete content, or return False if it already exists (tmp + link)."""
    tmp = _write_temp(path, data)
    try:
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:  # file systems without hard links
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            try:
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _default_mode())
            except FileExistsError:
                return False
            with os.fdopen(out, "wb") as f:
                f.write(data)
            return True
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _json_bytes(obj):
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode("utf-8")


def sha256_file(path):
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(HASH_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            h.update(chunk)
    return size, h.hexdigest()


def strip_ansi(text):
    return ANSI_RE.sub("", text)


def _timestamp():
    t = _now()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def _backup_name(backup_dir, path):
    base = os.path.basename(path.rstrip("/")) or "root"
    candidate = os.path.join(backup_dir, "%s.%s" % (base, _timestamp()))
    n = 1
    final = candidate
    while os.path.lexists(final):
        final = "%s.%d" % (candidate, n)
        n += 1
    return final


def _copy_preserving(src, dst):
    """Copy src to dst (tmp + rename) keeping the mode and times."""
    directory = os.path.dirname(os.path.abspath(dst))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(dst) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def boot_id():
    text = _read_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def _which(tool):
    found = shutil.which(tool)
    if found:
        return found
    for base in ("/opt/rocm/bin", "/opt/rocm/sbin"):
        cand = os.path.join(base, tool)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _run_tool(argv, timeout=30.0):
    """Run a tool and return (stdout text or None, problem string or None)."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "%s failed: %s" % (os.path.basename(argv[0]), exc)
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return out, "%s exited %d%s" % (os.path.basename(argv[0]), proc.returncode,
                                         (": " + err[-1]) if err else "")
    return out, None


# ------------------------------------------------------------------------------------------------
# /proc: liveness without kill -0 (zombies, pid reuse, boot id, marker)
# ------------------------------------------------------------------------------------------------


def proc_stat(pid):
    """(state, ppid, pgrp, session, starttime) from /proc/<pid>/stat, or None if gone."""
    data = _read_bytes("/proc/%d/stat" % int(pid))
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
    data = _read_bytes("/proc/%d/environ" % int(pid))
    if data is None:
        return None
    if not data:  # zombies and kernel threads have an empty environ
        return False
    want = ("%s=%s" % (MARKER_VAR, marker)).encode("utf-8", "surrogateescape")
    return want in data.split(b"\0")


def _environ_run_dir(pid):
    data = _read_bytes("/proc/%d/environ" % int(pid)) or b""
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


# ------------------------------------------------------------------------------------------------
# op: version
# ------------------------------------------------------------------------------------------------


def op_version(req):
    return {"version": HELPER_VERSION, "python": platform.python_version(),
            "executable": sys.executable, "ops": sorted(k for k in OPS if not k.startswith("_"))}


# ------------------------------------------------------------------------------------------------
# op: discover
# ------------------------------------------------------------------------------------------------


def _norm_name(name):
    return re.sub(r"[-_.]+", "-", (name or "")).lower()


def _is_amd_aiter_pkg(package_dir):
    return bool(package_dir) and (os.path.isdir(os.path.join(package_dir, "configs"))
                                  or os.path.isdir(os.path.join(package_dir, "jit")))


def _realpath(p):
    return os.path.realpath(p) if p else None


def _dist_candidates():
    """Installed distributions named amd-aiter or aiter (importlib.metadata, nothing imported)."""
    try:
        from importlib import metadata as md
    except ImportError:  # pragma: no cover - Python < 3.8
        return [], ["importlib.metadata unavailable (Python < 3.8)"]
    found = []
    seen = set()
    try:
        dists = list(md.distributions())
    except Exception as exc:  # noqa: BLE001 - a broken site-packages must not crash discover
        return [], ["cannot list installed distributions: %s" % exc]
    for dist in dists:
        try:
            name = dist.metadata["Name"]
        except Exception:  # noqa: BLE001
            continue
        norm = _norm_name(name)
        if norm not in ("amd-aiter", "aiter"):
            continue
        key = (norm, str(getattr(dist, "_path", id(dist))))
        if key in seen:
            continue
        seen.add(key)
        found.append((norm, dist))
    # amd-aiter first, then aiter; keep sys.path order within a name
    found.sort(key=lambda item: 0 if item[0] == "amd-aiter" else 1)
    return found, []


def _dist_info(norm, dist):
    """What a distribution says about its aiter package: dir, editable, direct_url."""
    info = {"pip_name": norm, "version": None, "package_dir": None, "editable": False,
            "project_dir": None, "location": None}
    try:
        info["version"] = dist.version
    except Exception:  # noqa: BLE001
        pass
    try:
        base = dist.locate_file("")
        info["location"] = str(base)
    except Exception:  # noqa: BLE001
        base = None
    direct = None
    try:
        text = dist.read_text("direct_url.json")
        direct = json.loads(text) if text else None
    except Exception:  # noqa: BLE001
        direct = None
    if isinstance(direct, dict) and (direct.get("dir_info") or {}).get("editable"):
        url = direct.get("url") or ""
        if url.startswith("file://"):
            from urllib.parse import unquote, urlparse
            project = unquote(urlparse(url).path)
            info["editable"] = True
            info["project_dir"] = project
            cand = os.path.join(project, "aiter")
            if os.path.isdir(cand):
                info["package_dir"] = cand
    if info["package_dir"] is None:
        files = None
        try:
            files = dist.files
        except Exception:  # noqa: BLE001
            files = None
        owns = False
        for f in files or ():
            parts = getattr(f, "parts", ())
            if parts and parts[0] == "aiter":
                owns = True
                break
        if owns and base is not None:
            info["package_dir"] = os.path.join(str(base), "aiter")
        elif base is not None and os.path.isdir(os.path.join(str(base), "aiter")):
            # `setup.py develop` egg-info in the checkout (files unknown): the package beside it
            info["package_dir"] = os.path.join(str(base), "aiter")
            if str(getattr(dist, "_path", "")).endswith(".egg-info"):
                info["editable"] = True
                info["project_dir"] = str(base)
    return info


def _find_spec_dir():
    """Directory of the `aiter` package that `import aiter` would load, without executing it."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("aiter")
    except (ImportError, ValueError) as exc:
        return None, "importlib.util.find_spec('aiter') failed: %s" % exc
    if spec is None:
        return None, None
    locations = list(spec.submodule_search_locations or [])
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen") and os.path.isfile(spec.origin):
        return os.path.dirname(spec.origin), None
    for loc in locations:
        if _is_amd_aiter_pkg(loc):
            return loc, None
    return (locations[0] if locations else None), None


def _package_from_path(path):
    """Validate a user-given aiter_path: a checkout/site dir holding aiter/, or the package dir."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise HelperError("aiter_path %s does not exist or is not a directory" % path,
                          hint="fix aiter_path for this container in inventory.yaml")
    inner = os.path.join(path, "aiter")
    if os.path.isfile(os.path.join(inner, "__init__.py")) and _is_amd_aiter_pkg(inner):
        return inner
    if os.path.basename(path) == "aiter" and os.path.isfile(os.path.join(path, "__init__.py")) \
            and _is_amd_aiter_pkg(path):
        return path
    raise HelperError(
        "aiter_path %s is not an AITER checkout or site-packages dir (no aiter/__init__.py with "
        "configs/ or jit/)" % path,
        hint="point aiter_path at the aiter repo root (develop mode) or the site-packages dir")


def _gpu_facts(problems, busy_threshold):
    facts = {"gfx": None, "cu_num": None, "gpu_count": None, "gpu_name": None,
             "gpu_use": {}, "free_gpus": None}
    tool = _which("rocminfo")
    if tool is None:
        problems.append("rocminfo not found on PATH or in /opt/rocm/bin: gfx, cu_num, gpu_count unknown")
    else:
        out, problem = _run_tool([tool])
        if problem:
            problems.append(problem)
        if out:
            cus, gfxs, names = [], [], []
            for block in re.split(r"Agent\s*\d+", out):
                dev = re.search(r"Device Type:\s*(\w+)", block)
                if not dev or "GPU" not in dev.group(1):
                    continue
                cu = re.search(r"Compute Unit\s*:\s*(\d+)", block)
                if cu:
                    cus.append(int(cu.group(1)))
                g = GFX_RE.search(block)
                if g:
                    gfxs.append(g.group(1))
                name = re.search(r"Marketing Name:\s*(.+)", block)
                if name:
                    names.append(name.group(1).strip())
            facts["gpu_count"] = len([b for b in re.split(r"Agent\s*\d+", out)
                                      if re.search(r"Device Type:\s*GPU", b)])
            if gfxs:
                facts["gfx"] = gfxs[0]
            else:
                g = GFX_RE.search(out)  # aiter's get_gfx_runtime: first gfx name anywhere
                facts["gfx"] = g.group(1) if g else None
            if cus:
                facts["cu_num"] = cus[0]
                if len(set(cus)) > 1:
                    facts["cu_nums"] = cus
                    problems.append("GPUs report different Compute Unit counts %s (partition mode?); "
                                    "aiter asserts they are equal" % sorted(set(cus)))
            if names:
                facts["gpu_name"] = names[0]
            if not facts["gpu_count"]:
                problems.append("rocminfo lists no GPU agent")
    smi = _which("rocm-smi")
    if smi is None:
        problems.append("rocm-smi not found: GPU use unknown, free_gpus not computed")
    else:
        out, problem = _run_tool([smi, "--showuse"])
        if problem:
            problems.append(problem)
        use = {}
        for m in SMI_USE_RE.finditer(out or ""):
            use[m.group(1)] = int(m.group(2))
        facts["gpu_use"] = use
        if use:
            facts["free_gpus"] = sorted(int(k) for k, v in use.items() if v < busy_threshold)
        elif out is not None:
            problems.append("rocm-smi --showuse printed no 'GPU[i] : GPU use (%)' line")
    return facts


def op_discover(req):
    problems = []
    threshold = req.get("busy_threshold", req.get("free_below_pct", 10))
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise HelperError("busy_threshold must be a number (percent), got %r" % (threshold,))
    res = {"pip_name": None, "version": None, "install_mode": None, "editable": None,
           "aiter_root": None, "package_dir": None, "meta_root": None, "has_csrc": False,
           "has_configs": False, "git_describe": None}

    cands, probs = _dist_candidates()
    problems.extend(probs)
    infos = []
    for norm, dist in cands:
        info = _dist_info(norm, dist)
        if not _is_amd_aiter_pkg(info["package_dir"]):
            problems.append(
                "ignored distribution %s %s at %s: it has no aiter/configs or aiter/jit (not AMD AITER; "
                "PyPI's 'aiter' is an unrelated async library)" % (norm, info["version"], info["location"]))
            continue
        infos.append(info)

    if req.get("aiter_path"):
        package_dir = _package_from_path(req["aiter_path"])
        res["source"] = "aiter_path"
    else:
        package_dir, problem = _find_spec_dir()
        if problem:
            problems.append(problem)
        res["source"] = "import"
        if package_dir and not _is_amd_aiter_pkg(package_dir):
            problems.append("`import aiter` resolves to %s, which is not AMD AITER (no configs/ or jit/)"
                            % package_dir)
            package_dir = None
        if package_dir is None and infos:
            package_dir = infos[0]["package_dir"]
            problems.append("`import aiter` does not resolve for %s; using the installed distribution "
                            "%s at %s" % (sys.executable, infos[0]["pip_name"], package_dir))

    if package_dir is None:
        problems.append("AMD AITER not found for %s (no amd-aiter/aiter distribution, `import aiter` "
                        "does not resolve); pass aiter_path" % sys.executable)
    else:
        chosen = None
        for info in infos:
            if _realpath(info["package_dir"]) == _realpath(package_dir):
                chosen = info
                break
        if chosen is None and infos and not req.get("aiter_path"):
            problems.append("`import aiter` loads %s but pip's %s lives at %s"
                            % (package_dir, infos[0]["pip_name"], infos[0]["package_dir"]))
        if chosen is not None:
            res["pip_name"] = chosen["pip_name"]
            res["version"] = chosen["version"]
            res["editable"] = chosen["editable"]
        mode_text = _read_text(os.path.join(package_dir, "install_mode"))
        if mode_text is None:
            mode = "develop"  # aiter/jit/core.py: missing file => develop ("pip install -e")
        else:
            mode = mode_text.strip() or "develop"
            if mode not in ("develop", "install"):
                problems.append("unrecognised aiter/install_mode content %r; treating as develop" % mode)
                mode = "develop"
        root = os.path.dirname(os.path.abspath(package_dir))
        meta = root if mode == "develop" else os.path.join(root, "aiter_meta")
        if os.environ.get("AITER_META_DIR"):
            meta = os.path.abspath(os.environ["AITER_META_DIR"])
        res.update({
            "install_mode": mode, "package_dir": os.path.abspath(package_dir), "aiter_root": root,
            "meta_root": meta, "has_csrc": os.path.isdir(os.path.join(meta, "csrc")),
            "has_configs": os.path.isdir(os.path.join(package_dir, "configs")),
        })
        if mode == "develop":
            git = shutil.which("git")
            if git is None:
                problems.append("git not found: no git describe for the develop checkout")
            elif os.path.exists(os.path.join(root, ".git")):
                out, problem = _run_tool([git, "-c", "safe.directory=*", "-C", root, "describe",
                                          "--tags", "--always"], timeout=15.0)
                if problem:
                    problems.append(problem)
                elif out and out.strip():
                    res["git_describe"] = out.strip()
        if res["version"] is None and res["git_describe"]:
            res["version"] = res["git_describe"]
        if not res["has_csrc"]:
            problems.append("no csrc/ under meta_root %s: tune scripts are not available" % meta)

    res.update(_gpu_facts(problems, threshold))
    env = {}
    for key, value in os.environ.items():
        if key.startswith("AITER_") or key in ("CU_NUM", "GPU_ARCHS"):
            env[key] = value
    res["env"] = env
    res["visible_devices"] = {k: os.environ[k] for k in
                              ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
                              if k in os.environ}
    res["hostname"] = socket.gethostname()
    res["boot_id"] = boot_id()
    res["python"] = sys.executable
    res["python_version"] = platform.python_version()
    res["busy_threshold"] = threshold
    res["problems"] = problems
    return res


# ------------------------------------------------------------------------------------------------
# op: shapes
# ------------------------------------------------------------------------------------------------


def op_shapes(req):
    logs = req.get("logs") or []
    if isinstance(logs, str):
        logs = [logs]
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import shapelog  # noqa: PLC0415 - lazy: only this op needs it
    except ImportError as exc:
        raise HelperError("shapelog.py is missing beside the node helper (%s)" % exc,
                          hint="re-push the helper bundle (node_helper.py + shapelog.py)")
    paths, missing = [], []
    for p in logs:
        if not isinstance(p, str):
            missing.append(p)
        elif os.path.isfile(p):
            paths.append(p)
        elif os.path.isdir(p):
            inside = sorted(os.path.join(p, n) for n in os.listdir(p)
                            if os.path.isfile(os.path.join(p, n)))
            paths.extend(inside)
        else:
            missing.append(p)
    result = shapelog.parse_files(paths, variant=req.get("variant"))
    return {"shapes": result.shapes, "hits": result.hits, "misses": result.misses,
            "warnings": list(result.warnings), "lines": result.lines, "bytes": result.bytes,
            "missing": missing, "files": paths}


# ------------------------------------------------------------------------------------------------
# ops: write_files, backup, manifest
# ------------------------------------------------------------------------------------------------


def op_write_files(req):
    out = []
    for spec in req.get("files") or []:
        path = spec.get("path")
        if not path:
            raise HelperError("write_files: every file needs a path")
        if "content_b64" in spec and spec["content_b64"] is not None:
            data = base64.b64decode(spec["content_b64"])
        elif isinstance(spec.get("content"), str):
            data = spec["content"].encode("utf-8")
        else:
            raise HelperError("write_files: %s has no content (give content or content_b64)" % path)
        digest = hashlib.sha256(data).hexdigest()
        backup = None
        mode = spec.get("mode")
        existed = os.path.isfile(path)
        changed = True
        if existed:
            if mode is None:
                mode = stat.S_IMODE(os.stat(path).st_mode)
            _, old = sha256_file(path)
            changed = old != digest
            if changed and spec.get("backup_dir"):
                backup = _backup_name(spec["backup_dir"], path)
                _copy_preserving(path, backup)
        if changed:
            atomic_write(path, data, mode)
        out.append({"path": path, "sha256": digest, "backup": backup, "changed": changed,
                    "size": len(data)})
    return {"files": out}


def op_backup(req):
    backup_dir = req.get("backup_dir")
    if not backup_dir:
        raise HelperError("backup: backup_dir is required")
    result = {}
    for path in req.get("paths") or []:
        if os.path.isfile(path):
            dst = _backup_name(backup_dir, path)
            _copy_preserving(path, dst)
            result[path] = dst
        elif os.path.isdir(path):
            dst = _backup_name(backup_dir, path)
            shutil.copytree(path, dst, symlinks=True)
            result[path] = dst
        else:
            result[path] = None
    return {"backups": result}


def _key_value(v):
    v = (v or "").strip()
    try:
        f = float(v)
        if f.is_integer():
            return str(int(f))
    except ValueError:
        pass
    return v


def op_tuned_keys(req):
    """Key tuples of tuned CSVs (by header name, any case) for one GPU: which shapes already have rows.

    request: {"patterns": [glob], "exclude": [path], "key_columns": [lower-case], "cu_num": int|null,
              "gfx": str|null}; files whose name contains "untuned" are skipped.
    """
    cols = [c.lower() for c in req.get("key_columns") or []]
    cu_num = None if req.get("cu_num") is None else str(req["cu_num"])
    gfx = req.get("gfx")
    exclude = {os.path.realpath(p) for p in req.get("exclude") or []}
    files = {}
    for pattern in req.get("patterns") or []:
        for path in sorted(glob.glob(pattern)):
            if "untuned" in os.path.basename(path) or os.path.realpath(path) in exclude:
                continue
            keys = []
            with open(path, newline="", encoding="utf-8", errors="replace") as fh:
                reader = csv.reader(fh)
                header = [h.strip().lower() for h in next(reader, [])]
                if not all(c in header for c in cols):
                    continue
                idx = [header.index(c) for c in cols]
                cu_i = header.index("cu_num") if "cu_num" in header else None
                gfx_i = header.index("gfx") if "gfx" in header else None
                for row in reader:
                    if len(row) < len(header):
                        continue
                    if cu_num is not None and cu_i is not None and _key_value(row[cu_i]) != cu_num:
                        continue
                    if gfx and gfx_i is not None and row[gfx_i].strip() != gfx:
                        continue
                    keys.append([_key_value(row[i]) for i in idx])
            files[path] = keys
    return {"files": files}


def op_manifest(req):
    files, dirs = {}, {}
    recursive = req.get("recursive", True)
    for path in req.get("paths") or []:
        if os.path.isfile(path):
            size, digest = sha256_file(path)
            files[path] = {"size": size, "sha256": digest, "mtime": os.stat(path).st_mtime}
        elif os.path.isdir(path):
            listed = []
            for root, dnames, fnames in os.walk(path):
                dnames.sort()
                for name in sorted(fnames):
                    full = os.path.join(root, name)
                    if not os.path.isfile(full):
                        continue
                    size, digest = sha256_file(full)
                    files[full] = {"size": size, "sha256": digest, "mtime": os.stat(full).st_mtime}
                    listed.append(os.path.relpath(full, path))
                if not recursive:
                    break
            dirs[path] = listed
        else:
            files[path] = None
    return {"files": files, "dirs": dirs}


# ------------------------------------------------------------------------------------------------
# op: bench_prepare (drop argparse choices= that reject our values, in a copy)
# ------------------------------------------------------------------------------------------------


_NOT_EVALUABLE = object()


def _eval_choices(node, names):
    """Evaluate a choices= expression safely: literals, range(), list/tuple/set/sorted of those,
    and module-level names bound to such values. Returns _NOT_EVALUABLE otherwise."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fname = node.func.id
        if fname == "range" and 1 <= len(node.args) <= 3:
            vals = []
            for a in node.args:
                v = _eval_choices(a, names)
                if not isinstance(v, int) or isinstance(v, bool):
                    return _NOT_EVALUABLE
                vals.append(v)
            return range(*vals)
        if fname in ("list", "tuple", "set", "frozenset", "sorted") and len(node.args) == 1:
            inner = _eval_choices(node.args[0], names)
            if inner is _NOT_EVALUABLE:
                return _NOT_EVALUABLE
            try:
                return list(inner)
            except TypeError:
                return _NOT_EVALUABLE
    return _NOT_EVALUABLE


def _module_literals(tree):
    names = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            val = _eval_choices(stmt.value, names)
            if val is not _NOT_EVALUABLE:
                names[stmt.targets[0].id] = val
    return names


def _value_accepted(value, choices, type_name):
    if isinstance(choices, range) or (type_name == "int"):
        try:
            iv = int(value)
        except (TypeError, ValueError):
            iv = None
        if iv is not None:
            try:
                if iv in choices:
                    return True
            except TypeError:
                pass
    if type_name == "float":
        try:
            if float(value) in choices:
                return True
        except (TypeError, ValueError):
            pass
    try:
        if value in choices:
            return True
    except TypeError:
        pass
    if isinstance(choices, range):
        return False
    return any(str(c) == str(value) for c in choices)


def _line_offsets(source):
    offsets = [0]
    for line in source.splitlines(True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _ast_pos_to_index(lines, offsets, lineno, col_bytes):
    line = lines[lineno - 1] if lineno - 1 < len(lines) else ""
    col = len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))
    return offsets[lineno - 1] + col


def _choices_removal_spans(source, tokens, offsets, value_start):
    """Character spans to delete so that `choices=<value>` disappears with one separating comma."""
    def idx(pos):
        return offsets[pos[0] - 1] + pos[1]

    sig = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE,
                                               tokenize.INDENT, tokenize.DEDENT)]
    # the `choices` NAME followed by `=` that comes last before the value
    k = None
    for i in range(len(sig) - 1):
        t = sig[i]
        if t.type == tokenize.NAME and t.string == "choices" and sig[i + 1].string == "=" \
                and idx(sig[i + 1].end) <= value_start:
            k = i
    if k is None:
        return None
    kw_start = idx(sig[k].start)
    depth = 0
    j = k + 2
    last_value_end = None
    while j < len(sig):
        t = sig[j]
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            if depth == 0:
                break  # closing paren of the call: no trailing comma
            depth -= 1
        elif t.type == tokenize.OP and t.string == "," and depth == 0:
            return [(kw_start, idx(t.end))]
        last_value_end = idx(t.end)
        j += 1
    if last_value_end is None:
        return None
    prev = sig[k - 1]
    if prev.type == tokenize.OP and prev.string == ",":
        return [(idx(prev.start), idx(prev.end)), (kw_start, last_value_end)]
    return [(kw_start, last_value_end)]


def _option_strings(call):
    out = []
    for a in call.args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            out.append(a.value)
        elif hasattr(ast, "Str") and isinstance(a, getattr(ast, "Str")):  # Python 3.7 AST nodes
            out.append(a.s)
    return out


def _imports_sibling(tree, orig_dir, script_name):
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.level or 0) == 0 and node.module:
            names = [node.module]
        for n in names:
            first = n.split(".")[0]
            if first + ".py" == script_name:
                continue
            if os.path.isfile(os.path.join(orig_dir, first + ".py")) or \
                    os.path.isdir(os.path.join(orig_dir, first)):
                return True
    return False


def _uses_file(tree):
    return any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(tree))


def op_bench_prepare(req):
    script = req.get("script")
    patched_dir = req.get("patched_dir")
    wanted = req.get("args") or {}
    if not script or not os.path.isfile(script):
        raise HelperError("bench script %s not found" % script,
                          hint="check meta_root/aiter_root from discover; op_tests/ lives in the checkout")
    with open(script, "rb") as f:
        raw = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    source = raw.decode(encoding)
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError as exc:
        raise HelperError("cannot parse %s: %s" % (script, exc),
                          hint="this python cannot parse the script; is it the container's python3?")
    literals = _module_literals(tree)
    lines = source.splitlines(True)
    offsets = _line_offsets(source)

    flags_seen = set()
    to_remove = []   # (flag, value node)
    removed, unverified, checked = [], [], {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            fname = func.attr
        else:
            fname = func.id if isinstance(func, ast.Name) else None
        if fname != "add_argument":
            continue
        opts = _option_strings(node)
        for flag, values in wanted.items():
            if flag not in opts:
                continue
            flags_seen.add(flag)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if "choices" not in kw:
                continue
            if not isinstance(values, (list, tuple)):
                values = [values]
            choices = _eval_choices(kw["choices"], literals)
            if choices is _NOT_EVALUABLE:
                unverified.append(flag)
                continue
            tnode = kw.get("type")
            type_name = tnode.id if isinstance(tnode, ast.Name) else None
            rejected = [v for v in values if not _value_accepted(v, choices, type_name)]
            checked[flag] = {"rejected": [str(v) for v in rejected]}
            if rejected:
                to_remove.append((flag, kw["choices"]))
    unknown = sorted(f for f in wanted if f not in flags_seen)

    result = {"script": os.path.abspath(script), "patched": False, "removed_choices": [],
              "unverified_choices": sorted(set(unverified)), "unknown_flags": unknown, "checked": checked}
    if not to_remove:
        return result
    if not patched_dir:
        raise HelperError("bench_prepare: %s rejects our values for %s but no patched_dir was given"
                          % (script, sorted({f for f, _ in to_remove})))
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    spans = []
    for flag, value_node in to_remove:
        start = _ast_pos_to_index(lines, offsets, value_node.lineno, value_node.col_offset)
        got = _choices_removal_spans(source, tokens, offsets, start)
        if got is None:
            raise HelperError("bench_prepare: could not locate choices= of %s in %s" % (flag, script))
        spans.extend(got)
        if flag not in removed:
            removed.append(flag)
    new = source
    for a, b in sorted(set(spans), reverse=True):
        new = new[:a] + new[b:]

    orig_dir = os.path.dirname(os.path.abspath(script))
    name = os.path.basename(script)
    need_path = _imports_sibling(tree, orig_dir, name)
    need_file = _uses_file(tree)
    prelude = None
    if need_path or need_file:
        parts = ["import sys as _tune_remote_sys"]
        if need_path:
            parts.append("_tune_remote_sys.path.insert(1, %r)" % orig_dir)
        if need_file:
            parts.append("__file__ = %r" % os.path.abspath(script))
        parts.append("del _tune_remote_sys")
        prelude = "; ".join(parts) + "  # added by tune-remote bench_prepare\n"
        new = _insert_prelude(new, prelude)
    try:
        compile(new, os.path.join(patched_dir, name), "exec")
    except SyntaxError as exc:
        raise HelperError("bench_prepare produced invalid Python for %s: %s" % (script, exc),
                          hint="report this script to tune-remote; run the bench without patching")
    out_path = os.path.join(os.path.abspath(patched_dir), name)
    if os.path.abspath(out_path) == os.path.abspath(script):
        raise HelperError("patched_dir must differ from the script's directory (never edit the original)")
    atomic_write(out_path, new.encode(encoding), stat.S_IMODE(os.stat(script).st_mode))
    result.update({"script": out_path, "patched": True, "removed_choices": removed,
                   "original": os.path.abspath(script), "prelude": prelude is not None})
    return result


def _insert_prelude(source, prelude):
    """Insert one line before the first statement that is not the docstring or a __future__ import."""
    tree = ast.parse(source)
    body = tree.body
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        i += 1
    lines = source.splitlines(True)
    if i >= len(body):
        if lines and not lines[-1].endswith(("\n", "\r")):
            return source + "\n" + prelude
        return source + prelude
    stmt = body[i]
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    if stmt.col_offset != 0 or (i > 0 and body[i - 1].end_lineno == first):
        # statement shares a line with the previous one: put the prelude on its own line before it
        return source  # pragma: no cover - exotic layout; sys.path fix skipped
    return "".join(lines[:first - 1]) + prelude + "".join(lines[first - 1:])


# ------------------------------------------------------------------------------------------------
# ops: launch + the internal supervising wrapper
# ------------------------------------------------------------------------------------------------


def _run_paths(run_dir):
    return {
        "command": os.path.join(run_dir, "command.json"),
        "record": os.path.join(run_dir, "record.json"),
        "rc": os.path.join(run_dir, "rc"),
        "cancelled": os.path.join(run_dir, "cancelled"),
    }


def _open_fds():
    try:
        return [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def op_launch(req):
    for key in ("job_id", "step", "run_dir", "argv"):
        if not req.get(key):
            raise HelperError("launch: %s is required" % key)
    argv = req["argv"]
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise HelperError("launch: argv must be a list of strings")
    run_dir = os.path.abspath(req["run_dir"])
    paths = _run_paths(run_dir)
    marker = "%s:%s" % (req["job_id"], req["step"])
    cwd = os.path.abspath(req.get("cwd") or run_dir)
    log_path = os.path.abspath(req.get("log_path") or os.path.join(run_dir, "job.log"))
    env = req.get("env") or {}
    if not isinstance(env, dict):
        raise HelperError("launch: env must be an object")

    existing = _existing_launch(paths)
    if existing is not None:
        return existing
    if not os.path.isdir(cwd):
        raise HelperError("launch: cwd %s does not exist" % cwd, hint="discover the aiter root first")
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))  # fail before command.json
    command = {
        "argv": argv, "cwd": cwd, "env_names": sorted(env), "log_path": log_path,
        "job_id": req["job_id"], "step": req["step"], "created": _now(), "marker": marker,
        "run_dir": run_dir, "helper_version": HELPER_VERSION,
    }
    if not exclusive_write(paths["command"], _json_bytes(command)):
        existing = _existing_launch(paths)
        if existing is not None:
            return existing
    spec = {"argv": argv, "cwd": cwd, "env": env, "log_path": log_path, "marker": marker,
            "run_dir": run_dir, "job_id": req["job_id"], "step": req["step"]}
    record = _spawn_supervisor(spec)
    return {"launched": True, "record": record}


def _existing_launch(paths):
    if os.path.exists(paths["record"]):
        return {"launched": False, "record": _read_json(paths["record"])}
    if os.path.exists(paths["command"]):
        return {"launched": False, "record": None, "command": _read_json(paths["command"])}
    return None


def _spawn_supervisor(spec):
    """Double fork + setsid; the session leader execs this script as `_supervise`.

    The launcher gets the record back through a pipe (the wrapper writes it after record.json
    exists), so no sleeping and no polling. Every fd the launcher holds (notably docker exec's
    stdout) is closed in the daemon, so `docker exec` returns as soon as this process exits."""
    helper = os.path.abspath(__file__)
    wrapper_env = dict(os.environ)
    wrapper_env[MARKER_VAR] = spec["marker"]
    wrapper_env[RUN_DIR_VAR] = spec["run_dir"]
    argv = [sys.executable, "-I", "-S", helper, INTERNAL_SUPERVISE]
    r_spec, w_spec = os.pipe()
    r_res, w_res = os.pipe()
    log_fd = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # first child
        res_fd = w_res
        try:
            os.close(w_spec)
            os.close(r_res)
            if os.fork() != 0:
                os._exit(0)
            # grandchild: new session, becomes the job's process-group leader
            os.setsid()
            os.dup2(r_spec, 0)
            os.dup2(w_res, 1)
            res_fd = 1
            os.dup2(log_fd, 2)
            for fd in _open_fds():
                if fd > 2:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            os.chdir("/")
            os.execve(argv[0], argv, wrapper_env)
        except BaseException as exc:  # noqa: BLE001
            try:
                msg = json.dumps({"error": "cannot start the supervising wrapper: %r" % (exc,)})
                os.write(res_fd, msg.encode())
            except BaseException:  # noqa: BLE001
                pass
            os._exit(127)
    os.close(r_spec)
    os.close(w_res)
    os.close(log_fd)
    try:
        try:
            os.write(w_spec, json.dumps(spec).encode("utf-8"))
        except OSError:
            pass
        os.close(w_spec)
        os.waitpid(pid, 0)
        data = b""
        deadline = _now() + LAUNCH_TIMEOUT_S
        while True:
            left = deadline - _now()
            if left <= 0:
                raise HelperError("launch: the supervising wrapper did not report within %ds"
                                  % LAUNCH_TIMEOUT_S,
                                  hint="check %s and the run dir %s" % (spec["log_path"], spec["run_dir"]))
            ready, _, _ = select.select([r_res], [], [], left)
            if not ready:
                continue
            chunk = os.read(r_res, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r_res)
    try:
        answer = json.loads(data.decode("utf-8", "replace")) if data else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        record = _read_json(os.path.join(spec["run_dir"], "record.json"))
        if record:
            return record
        raise HelperError("launch: the supervising wrapper exited without a record",
                          hint="see %s" % spec["log_path"])
    if "error" in answer and "pid" not in answer:
        raise HelperError("launch: %s" % answer["error"], hint="see %s" % spec["log_path"])
    return answer


def op_supervise(_req_unused):
    """Internal: session leader of a job. stdin = spec pipe, stdout = result pipe, stderr = log."""
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup; inherited by the job on purpose
    term = {"signal": None}

    def on_term(signum, _frame):
        term["signal"] = signum  # keep waiting: the group got the same signal; we still write rc

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, on_term)
    run_dir = spec["run_dir"]
    paths = _run_paths(run_dir)
    log_fd = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    env = dict(os.environ)
    for k, v in (spec.get("env") or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    env["PYTHONUNBUFFERED"] = "1"
    env[MARKER_VAR] = spec["marker"]
    env[RUN_DIR_VAR] = run_dir
    me = os.getpid()
    record = {
        "pid": me, "pgid": os.getpgid(0), "sid": os.getsid(0), "starttime": proc_starttime(me),
        "boot_id": boot_id(), "marker": spec["marker"], "started_at": _now(), "job_id": spec["job_id"],
        "step": spec["step"], "log_path": spec["log_path"], "argv": spec["argv"], "cwd": spec["cwd"],
        "run_dir": run_dir, "hostname": socket.gethostname(), "helper_version": HELPER_VERSION,
        "child_pid": None, "child_starttime": None,
    }
    proc = None
    try:
        proc = subprocess.Popen(spec["argv"], stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                                cwd=spec["cwd"], env=env, close_fds=True)
    except OSError as exc:
        rc = 126 if isinstance(exc, PermissionError) else 127
        os.write(log_fd, ("[tune-remote] cannot start %r: %s\n" % (spec["argv"], exc)).encode())
        record["error"] = str(exc)
    if proc is not None:
        record["child_pid"] = proc.pid
        record["child_starttime"] = proc_starttime(proc.pid)
    atomic_write(paths["record"], _json_bytes(record))
    try:
        os.write(1, json.dumps(record).encode("utf-8"))
    except OSError:
        pass
    os.dup2(devnull, 1)  # release the launcher: it returns when this pipe closes
    if proc is not None:
        rc = proc.wait()
        if rc < 0:
            rc = 128 - rc
    atomic_write(paths["rc"], ("%d\n" % rc).encode())
    return None


# ------------------------------------------------------------------------------------------------
# op: status
# ------------------------------------------------------------------------------------------------


def _read_rc(path):
    text = _read_text(path)
    if text is None:
        return None, False
    try:
        return int(text.strip().split()[0]), True
    except (ValueError, IndexError):
        return None, True


def run_state(run_dir):
    """The node's truth about one run: state, rc, liveness. Never signals anything."""
    paths = _run_paths(run_dir)
    record = _read_json(paths["record"])
    command = _read_json(paths["command"])
    rc, has_rc = _read_rc(paths["rc"])
    cancelled = os.path.exists(paths["cancelled"])
    out = {"record": record, "command": command, "rc": rc, "cancel_requested": cancelled,
           "pid": None, "child_pid": None, "alive": False, "wrapper_alive": False, "child_alive": False,
           "reason": None}
    if record is None and command is None:
        out["state"] = "unknown"
        out["reason"] = "no command.json or record.json in %s" % run_dir
        return out
    rec = record or {}
    marker = rec.get("marker") or (command or {}).get("marker")
    if record is not None and not record.get("_unreadable"):
        out["pid"] = rec.get("pid")
        out["child_pid"] = rec.get("child_pid")
        rb = rec.get("boot_id")
        out["wrapper_alive"] = pid_alive(rec.get("pid"), rec.get("starttime"), marker, rb)
        out["child_alive"] = pid_alive(rec.get("child_pid"), rec.get("child_starttime"), marker, rb)
        if rb and boot_id() and rb != boot_id():
            out["reason"] = "the node rebooted since launch (boot_id changed)"
    out["alive"] = bool(out["wrapper_alive"] or out["child_alive"])
    if has_rc and not out["alive"]:
        out["state"] = "cancelled" if cancelled else ("succeeded" if rc == 0 else "failed")
    elif out["alive"]:
        out["state"] = "running"
    elif record is None:
        age = _now() - float((command or {}).get("created") or 0)
        if age < LAUNCH_TIMEOUT_S and not cancelled:
            out["state"] = "starting"
        else:
            out["state"] = "cancelled" if cancelled else "lost"
            out["reason"] = out["reason"] or "command.json exists but the job never recorded a start"
    else:
        out["state"] = "cancelled" if cancelled else "lost"
        if not cancelled and not out["reason"]:
            out["reason"] = ("no rc file and the process is gone (killed by SIGKILL/OOM, or the "
                             "container restarted)")
    return out


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


def _progress(f, size):
    """Last `processed X batches of Y` line, scanning backwards from the end in 256 KiB chunks."""
    end = size
    scanned = 0
    carry = b""
    while end > 0 and scanned < PROGRESS_SCAN_LIMIT:
        start = max(0, end - PROGRESS_CHUNK)
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
                 "progress": None, "last_line": None, "started_at": rec.get("started_at")}
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
    return {"runs": runs, "files": files, "boot_id": boot_id(), "now": _now()}


def _read_log(log_path, offset, limit):
    """Size, age, bytes from offset (base64), last line and tuner progress of one log file."""
    out = {}
    try:
        with open(log_path, "rb") as f:
            fst = os.fstat(f.fileno())
            size = fst.st_size
            out["log_size"] = size
            out["log_age_s"] = round(max(0.0, _now() - fst.st_mtime), 3)
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
            out["progress"] = _progress(f, size)
    except FileNotFoundError:
        pass
    except OSError as exc:
        out["log_error"] = str(exc)
    return out


# ------------------------------------------------------------------------------------------------
# op: cancel
# ------------------------------------------------------------------------------------------------


def _job_processes(pgid, marker, run_dir, leader_ok):
    """Live (non-zombie) processes of the job: group members and marker carriers.

    Returns (group_members, marker_only): group members are ours when the leader is verified
    (group membership is inherited, and the pgid cannot be reused while the group exists);
    otherwise only processes that carry the marker are taken."""
    me = os.getpid()
    group, swept = [], []
    for pid in list_pids():
        if pid == me:
            continue
        st = proc_stat(pid)
        if st is None or st[0] in ("Z", "X", "x"):
            continue
        has = environ_has_marker(pid, marker) if marker else None
        if has:
            other_dir = _environ_run_dir(pid)
            if other_dir and other_dir != run_dir:
                has = False
        in_group = bool(pgid) and st[2] == int(pgid)
        if in_group and (leader_ok or has):
            group.append(pid)
        elif has:
            swept.append(pid)
    return group, swept


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def op_cancel(req):
    run_dir = os.path.abspath(req.get("run_dir") or "")
    grace = float(req.get("grace_s", 10) if req.get("grace_s") is not None else 10)
    paths = _run_paths(run_dir)
    st = run_state(run_dir)
    if st["state"] == "unknown":
        raise HelperError("cancel: %s is not a run directory (no command.json/record.json)" % run_dir,
                          hint="check the job id; `tune-remote list` shows known jobs")
    rec = st["record"] or {}
    marker = rec.get("marker") or (st["command"] or {}).get("marker")
    finished = st["state"] in ("succeeded", "failed", "cancelled") and not st["alive"]
    if finished:
        _, strays = _job_processes(None, marker, run_dir, False)
        if not strays:
            return {"state": st["state"], "signalled": [], "killed": [], "remaining": [],
                    "already_finished": True, "rc": st["rc"]}
    elif not os.path.exists(paths["cancelled"]):
        atomic_write(paths["cancelled"], _json_bytes({"at": _now(), "grace_s": grace}))
    pgid = rec.get("pgid") or rec.get("pid")
    leader_ok = pid_alive(rec.get("pid"), rec.get("starttime"), marker, rec.get("boot_id"))
    signalled, killed = [], []

    def term_round():
        group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
        if group and leader_ok:
            try:
                os.killpg(int(pgid), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            for p in group:
                if p not in signalled:
                    signalled.append(p)
        else:
            swept = group + swept
        for p in swept:
            if p not in signalled and _signal(p, signal.SIGTERM):
                signalled.append(p)
        return group + swept

    live = term_round()
    deadline = _now() + max(0.0, grace)
    while live and _now() < deadline:
        time.sleep(0.05)
        live = term_round()  # also catches processes forked after the first signal
    if live:
        group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
        if group and leader_ok:
            try:
                os.killpg(int(pgid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed.extend(group)
        else:
            swept = group + swept
        for p in swept:
            if _signal(p, signal.SIGKILL):
                killed.append(p)
        end = _now() + 5.0
        while _now() < end:
            group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
            live = group + swept
            if not live:
                break
            for p in live:
                _signal(p, signal.SIGKILL)
                if p not in killed:
                    killed.append(p)
            time.sleep(0.05)
    group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
    final = run_state(run_dir)
    return {"state": final["state"], "signalled": sorted(signalled), "killed": sorted(set(killed)),
            "remaining": sorted(group + swept), "rc": final["rc"], "already_finished": finished}


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------


OPS = {
    "version": op_version,
    "discover": op_discover,
    "shapes": op_shapes,
    "write_files": op_write_files,
    "backup": op_backup,
    "bench_prepare": op_bench_prepare,
    "launch": op_launch,
    "status": op_status,
    "tuned_keys": op_tuned_keys,
    "cancel": op_cancel,
    "manifest": op_manifest,
    INTERNAL_SUPERVISE: op_supervise,
}


def _emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=True, default=str) + "\n")
    sys.stdout.flush()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in OPS:
        _emit({"ok": False, "error": "unknown op %r" % (argv[0] if argv else None,),
               "hint": "ops: %s" % ", ".join(sorted(k for k in OPS if not k.startswith("_"))),
               "version": HELPER_VERSION})
        return 0
    op = argv[0]
    if op == INTERNAL_SUPERVISE:
        op_supervise(None)
        return 0
    try:
        raw = sys.stdin.buffer.read()
        req = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        if not isinstance(req, dict):
            raise HelperError("the request must be a JSON object", hint="send {} for no arguments")
    except ValueError as exc:
        _emit({"ok": False, "error": "bad JSON request: %s" % exc, "hint": "send one JSON object on stdin",
               "version": HELPER_VERSION})
        return 0
    except HelperError as exc:
        _emit({"ok": False, "error": exc.error, "hint": exc.hint, "version": HELPER_VERSION})
        return 0
    try:
        answer = OPS[op](req) or {}
    except HelperError as exc:
        out = {"ok": False, "error": exc.error, "hint": exc.hint, "version": HELPER_VERSION}
        out.update(exc.extra)
        _emit(out)
        return 0
    except OSError as exc:
        _emit({"ok": False, "error": "%s: %s" % (op, exc),
               "hint": "check paths and permissions in the container", "version": HELPER_VERSION})
        return 0
    except Exception as exc:  # noqa: BLE001 - a helper bug: report it, exit non-zero
        _emit({"ok": False, "error": "node helper bug in %s: %r" % (op, exc), "internal": True,
               "hint": "report this with the traceback", "traceback": traceback.format_exc(),
               "version": HELPER_VERSION})
        return 1
    out = {"ok": True}
    out.update(answer)
    _emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
