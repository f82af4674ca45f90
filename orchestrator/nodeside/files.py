"""File ops: atomic and exclusive writes, write_files, backup, manifest, tuned_keys."""

import base64
import csv
import errno
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import zlib

from .common import HelperError, epoch_s
from . import mounts
from ..shapelib.text import key_text

HASH_CHUNK = 1024 * 1024


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


def json_bytes(obj):
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


def _timestamp():
    t = epoch_s()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def backup_name(backup_dir, path):
    base = os.path.basename(path.rstrip("/")) or "root"
    candidate = os.path.join(backup_dir, "%s.%s" % (base, _timestamp()))
    n = 1
    final = candidate
    while os.path.lexists(final):
        final = "%s.%d" % (candidate, n)
        n += 1
    return final


def copy_preserving(src, dst):
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
                backup = backup_name(spec["backup_dir"], path)
                copy_preserving(path, backup)
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
            dst = backup_name(backup_dir, path)
            copy_preserving(path, dst)
            result[path] = dst
        elif os.path.isdir(path):
            dst = backup_name(backup_dir, path)
            shutil.copytree(path, dst, symlinks=True)
            result[path] = dst
        else:
            result[path] = None
    return {"backups": result}


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
                    if cu_num is not None and cu_i is not None and key_text(row[cu_i]) != cu_num:
                        continue
                    if gfx and gfx_i is not None and row[gfx_i].strip() != gfx:
                        continue
                    keys.append([key_text(row[i]) for i in idx])
            files[path] = keys
    return {"files": files}


INLINE_TOTAL = 16 << 20   # bytes of file content one manifest answer may carry


def _read_small(path, cap):
    """The whole file if it has at most ``cap`` bytes, else None."""
    if cap <= 0 or os.path.getsize(path) > cap:
        return None
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    return data if len(data) <= cap else None


def _own_mounts():
    try:
        return mounts.read_self()
    except (OSError, ValueError):   # the host route is an optimisation: without it, files come as before
        return []


def _z_ratio(path, sample=256 << 10):
    """How small zlib's fastest level makes the file's first ``sample`` bytes (1.0: not at all, or unreadable):
    the laptop asks for a big file gzipped when it is well below 1 (logs, CSVs)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(sample)
    except OSError:
        return 1.0
    return round(len(zlib.compress(head, 1)) / float(len(head)), 3) if head else 1.0


def op_manifest(req):
    """size + sha256 of each path (dirs listed). With ``have`` ({path: sha256 the laptop holds}) and
    ``inline_max`` > 0, a file whose sha differs and that fits (<= inline_max, all together <= 16 MB)
    comes back with its content (``data_b64``), hashed from the very bytes sent: fetching small changed
    files is this one round trip. With ``sources``, a file to be copied says where it is stored
    (``source``: device + path in its filesystem, None on the container's own root fs; ``mounts.py``).
    With ``sizes`` ({path: size of the laptop's copy or null}), a file not sent inline whose size differs
    comes without its hash (``"sha256": null``): the laptop asks for it while the copy runs. With
    ``compress``, a small file that zlib shrinks comes as ``data_z64`` (zlib, then base64) and a file to be
    copied says how well its start compresses (``z``: compressed / raw size of its first 256 KiB)."""
    files, dirs = {}, {}
    recursive = req.get("recursive", True)
    have = req.get("have") or {}
    inline_max = int(req.get("inline_max") or 0)
    left = INLINE_TOTAL
    sources = _own_mounts() if req.get("sources") else None
    sizes = req.get("sizes") or {}
    for path in req.get("paths") or []:
        if os.path.isfile(path):
            data = _read_small(path, min(inline_max, left)) if path in have else None
            if data is None and path in sizes and os.path.getsize(path) != sizes[path]:
                size, digest = os.path.getsize(path), None   # differs for sure: hashed while it is copied
            elif data is None:
                size, digest = sha256_file(path)
            else:
                size, digest = len(data), hashlib.sha256(data).hexdigest()
            files[path] = {"size": size, "sha256": digest, "mtime": os.stat(path).st_mtime}
            if data is not None and digest != have.get(path):
                z = zlib.compress(data, 1) if req.get("compress") and len(data) > 4096 else None
                if z is not None and len(z) < 0.9 * len(data):      # a text log: a fraction on the wire
                    files[path]["data_z64"] = base64.b64encode(z).decode("ascii")
                else:
                    files[path]["data_b64"] = base64.b64encode(data).decode("ascii")
                left -= len(data)
            elif path in have and (digest is None or digest != have.get(path)):   # the laptop copies it
                if sources is not None:
                    files[path]["source"] = mounts.source_of(path, sources)
                if req.get("compress"):
                    files[path]["z"] = _z_ratio(path)
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
