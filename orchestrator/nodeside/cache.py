"""The node helper's small answer cache (``cache/`` of the pushed helper): answers that cost a process start
(a tuner's ``--help``, the merge rule's pandas run) kept under a key of their inputs' path, size, mtime and
inode, and read again while those are unchanged. Best effort: a cache that cannot be written only costs the
next call the work again."""

import hashlib
import json
import os
import shutil

from .common import read_file_text


def stat_key(path):
    """A file as a cache key part: [realpath, size, mtime, inode], None when it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [os.path.realpath(path), st.st_size, getattr(st, "st_mtime_ns", st.st_mtime), st.st_ino]


def interpreter(python):
    """The interpreter's file (a bare name is looked up on PATH)."""
    return python if os.path.sep in python else (shutil.which(python) or python)


def key_of(parts):
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def read(cache_dir, name):
    """The kept text of ``name``, or None (no cache, nothing kept)."""
    return read_file_text(os.path.join(cache_dir, name)) if cache_dir else None


def keep(cache_dir, name, text):
    from . import files  # noqa: PLC0415
    if not cache_dir:
        return
    try:
        if not os.path.isdir(cache_dir):
            os.makedirs(cache_dir, 0o700)
        files.atomic_write(os.path.join(cache_dir, name), text.encode("utf-8"))
    except OSError:
        pass
