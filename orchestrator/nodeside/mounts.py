"""Where a file of the container lives on its host: /proc/self/mountinfo, read on both sides.

Stdlib only, Python >= 3.8; imported by the helper (``manifest`` with ``"sources": true``) and by the laptop
(fetch reads a big file of a bind-mounted directory on the host, past ``docker exec``). A guess is never
trusted: fetch verifies what it read against the sha256 the helper computed inside the container.
"""

import os
import re

_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field):
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse(text):
    """mountinfo text -> [{"dev": "maj:min", "root": path in its filesystem, "point": mount point, "fstype"}],
    in mount order (a later mount over the same point hides an earlier one)."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            out.append({"dev": fields[2], "root": _unescape(fields[3]), "point": _unescape(fields[4]),
                        "fstype": fields[sep + 1]})
        except (ValueError, IndexError):
            continue
    return out


def _under(path, top):
    """``path`` relative to the directory ``top`` ("" when equal), or None when it is not below it."""
    if top == "/":
        return path.lstrip("/")
    if path == top:
        return ""
    if path.startswith(top.rstrip("/") + "/"):
        return path[len(top.rstrip("/")) + 1:]
    return None


def source_of(path, mounts):
    """The file's device and its path inside that device's filesystem: {"dev", "path", "fstype"}; None on
    the container's own root filesystem (the mount at "/", whatever its storage driver: reading it from the
    host would mean reaching into docker's storage), when no mount holds it, or for a path JSON cannot carry."""
    real = os.path.realpath(path)
    best = None
    for m in mounts:   # the deepest mount point wins; among equal ones, the last mounted
        rel = _under(real, m["point"])
        if rel is not None and (best is None or len(m["point"]) >= len(best[0]["point"])):
            best = (m, rel)
    if best is None or best[0]["point"] == "/":
        return None
    m, rel = best
    found = os.path.join(m["root"], rel) if rel else m["root"]
    try:
        found.encode("utf-8")
    except UnicodeEncodeError:     # undecodable bytes in a mount path (surrogateescape)
        return None
    return {"dev": m["dev"], "path": found, "fstype": m["fstype"]}


def host_path(source, mounts):
    """Where the host (``mounts`` = its mountinfo) sees ``source``: the host mount of the same device whose
    root holds the path most closely, or None."""
    path = source.get("path")
    if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path:
        return None                # only a plain absolute path ("..", "//" or "." parts are refused)
    best = None
    for m in mounts:
        if m["dev"] != source.get("dev"):
            continue
        rel = _under(path, m["root"])
        if rel is not None and (best is None or len(m["root"]) > len(best[0]["root"])):
            best = (m, rel)
    if best is None:
        return None
    m, rel = best
    return os.path.join(m["point"], rel) if rel else m["point"]


def inside(path, sources):
    """True when ``path`` (a host path) lies in one of ``sources`` (the host directories docker mounted into
    the container, ``docker inspect`` .Mounts[].Source): the host route reads only what the container was
    given, whatever a helper in it claims."""
    for top in sources:
        if isinstance(top, str) and top.startswith("/") and _under(path, os.path.normpath(top)) is not None:
            return True
    return False


def read_self():
    """This process's mounts; paths that are not UTF-8 keep their bytes (surrogateescape)."""
    with open("/proc/self/mountinfo", "rb") as f:
        return parse(f.read().decode("utf-8", "surrogateescape"))
