"""Tuned tables survive every fault: validate after the tune step and after a cancel, repair from the backup.

AITER rewrites its ``-o`` file whole, in place, after every batch (aiter-formats.md §1.4): a kill, a
cancel or a full disk in the middle leaves it truncated. ``check_table`` says whether the table is
parseable (a header with the key columns, every row as wide as the header, the last line complete) and a
superset of the backup's keys. ``repair`` writes backup rows + every complete row of the damaged file
(rows of this run win over the backup's for the same key), atomically, and keeps the damaged bytes
beside the job. Stdlib only, Python >= 3.8.
"""

import csv
import io
import os
import time

from .common import HelperError
from .files import atomic_write

TABLE_TAG = "[tune-remote] table:"


def _has(header, keys):
    low = [h.strip().lower() for h in header]
    return all(k.lower() in low for k in keys)


def _parse(data, keys):
    """(header, complete rows, problem or None). Rows are lists of cells; a torn last line is dropped."""
    text = data.decode("utf-8", "replace")
    torn = bool(text) and not text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        return None, [], "empty"
    header = [h.strip() for h in rows[0]]
    low = [h.lower() for h in header]
    missing = [k for k in keys if k.lower() not in low]
    if missing:
        return header, [], "no key column(s) %s in the header" % ", ".join(missing)
    body, problem = [], None
    for i, r in enumerate(rows[1:]):
        last = i == len(rows) - 2
        if len(r) != len(header) or (last and torn):
            problem = problem or ("a torn last line" if last else "a row of %d cells (header %d)" % (len(r), len(header)))
            continue
        body.append(r)
    return header, body, problem


def _keys_of(header, rows, keys):
    low = [h.strip().lower() for h in header]
    idx = [low.index(k.lower()) for k in keys]
    return [tuple(r[i].strip() for i in idx) for r in rows]


def _norm(key):
    out = []
    for v in key:
        try:
            f = float(v)
            out.append(repr(int(f)) if f.is_integer() else repr(f))
        except ValueError:
            out.append(v)
    return tuple(out)


def _effective_keys(data, bdata, keys):
    """The key columns this table really has (older AITER tables have no gfx column): those in the
    backup's header when there is a backup, else those in the table's own header."""
    for blob in (bdata, data):
        if blob:
            first = blob.decode("utf-8", "replace").split("\n", 1)[0]
            header = [h.strip() for h in next(csv.reader([first]), [])]
            have = [k for k in keys if _has(header, [k])]
            if have:
                return have
    return list(keys)


def check_table(table, backup, keys):
    """{"ok", "problem", "rows", "missing_keys"}: parseable and a superset of the backup's keys."""
    try:
        with open(table, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        data = None
    bdata = None
    if backup:
        try:
            with open(backup, "rb") as fh:
                bdata = fh.read()
        except FileNotFoundError:
            bdata = None
    keys = _effective_keys(data, bdata, keys)
    if data is None:
        if bdata:
            return {"ok": False, "problem": "the table is gone", "rows": 0, "missing_keys": None}
        return {"ok": True, "problem": None, "rows": 0, "missing_keys": 0}
    header, rows, problem = _parse(data, keys)
    missing = 0
    if bdata and header is not None and _has(header, keys):
        bheader, brows, _ = _parse(bdata, keys)
        if bheader is not None and _has(bheader, keys):
            have = set(_norm(k) for k in _keys_of(header, rows, keys))
            missing = len(set(_norm(k) for k in _keys_of(bheader, brows, keys)) - have)
    ok = problem is None and missing == 0
    if problem is None and missing:
        problem = "%d row(s) of the backup are missing" % missing
    return {"ok": ok, "problem": problem, "rows": len(rows), "missing_keys": missing}


def repair(table, backup, keys, keep_dir):
    """Backup rows + the damaged table's complete rows (newer wins per key), written atomically."""
    data = b""
    if os.path.exists(table):
        with open(table, "rb") as fh:
            data = fh.read()
    bdata = b""
    if backup and os.path.exists(backup):
        with open(backup, "rb") as fh:
            bdata = fh.read()
    keys = _effective_keys(data, bdata, keys)
    header, rows, _ = _parse(data, keys) if data else (None, [], None)
    bheader, brows, _ = _parse(bdata, keys) if bdata else (None, [], None)
    out_header = bheader or header
    if out_header is None:
        raise HelperError("table %s is damaged and there is no usable backup" % table,
                          hint="restore it by hand from a copy; the damaged bytes were kept")
    merged, order = {}, []

    def add(h, rs):
        if h is None or not _has(h, keys):
            return 0
        n = 0
        for r, key in zip(rs, _keys_of(h, rs, keys)):
            cells = dict(zip(h, r))
            key = _norm(key)
            if key not in merged:
                order.append(key)
            merged[key] = [cells.get(c, "") for c in out_header]
            n += 1
        return n

    restored = add(bheader, brows)
    kept = add(header, rows)
    damaged = None
    if data:
        os.makedirs(keep_dir, exist_ok=True)
        damaged = os.path.join(keep_dir, "%s.damaged-%d" % (os.path.basename(table), int(time.time())))
        atomic_write(damaged, data)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(out_header)
    for key in order:
        w.writerow(merged[key])
    atomic_write(table, buf.getvalue().encode("utf-8"))
    return {"rows": len(order), "from_backup": restored, "from_damaged": kept, "damaged_copy": damaged}


def check_and_repair(table, backup, keys, keep_dir):
    res = check_table(table, backup, keys)
    if res["ok"]:
        return res
    res["repair"] = repair(table, backup, keys, keep_dir)
    return res


def say(res, table):
    """One tagged line for the step log (the laptop turns it into a report note)."""
    if res.get("ok"):
        return None
    rep = res.get("repair") or {}
    return "%s %s was damaged (%s): repaired from the backup, %d row(s), damaged bytes kept in %s" % (
        TABLE_TAG, table, res.get("problem"), rep.get("rows", 0), rep.get("damaged_copy"))


def op_table_check(req):
    """Laptop-called check + repair (after a cancel): {table, backup, keys, keep_dir}."""
    table, keys = req.get("table"), req.get("keys") or []
    if not table or not keys:
        raise HelperError("table_check: table and keys are required")
    res = check_and_repair(table, req.get("backup"), keys, req.get("keep_dir") or os.path.dirname(table))
    res["line"] = say(res, table)
    res["sound"] = res.pop("ok")        # "ok" is the protocol's own key
    return res


def _existing(path):
    path = os.path.abspath(path)
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def op_disk_free(req):
    """{"paths": [..]} -> {"free": {path: {"free_bytes", "dev"}}} (statvfs of the nearest existing dir)."""
    out = {}
    for p in req.get("paths") or []:
        where = _existing(p)
        try:
            st = os.statvfs(where)
            out[p] = {"free_bytes": st.f_bavail * st.f_frsize, "dev": os.stat(where).st_dev, "checked": where}
        except OSError as exc:
            out[p] = {"free_bytes": None, "dev": None, "checked": where, "error": str(exc)}
    return {"free": out}
