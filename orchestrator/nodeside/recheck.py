"""Recheck of promoted rows (node side, stdlib only, Python >= 3.8): the live table without given rows.

``recheck_tables`` writes, for the benchmark's "without" arm, a copy of the live table without the rows
under recheck (what AITER serves then: a padded-M row or its default kernel) and answers the live rows
(kernel names) it found. ``demote`` removes rows from the live table with promotion's guarantees: a backup
first, a complete new file renamed over the old one (a reader never sees half a file), the live JIT
module compiled from the old table moved aside (renamed, never rewritten), and a record
``<backup_dir>/promotion.json`` in the promotion record's form, so the ``rollback`` op undoes it byte for
byte. Keys are dicts {lower-case column: text}; a row matches when every column of the key that its
table has holds the same value (numbers compared as numbers).
"""

import csv
import json
import os

from .common import HelperError, epoch_s
from .files import backup_name, copy_preserving, atomic_write
from .staging import RECORD, move_aside, live_jit_dir
from ..shapelib.text import key_text


def _matcher(header, keys):
    """row -> the index of the first key it matches, or None."""
    low = [h.strip().lower() for h in header]
    want = []
    for k in keys:
        cols = [(low.index(c), key_text(v)) for c, v in k.items() if c in low]
        if not cols:
            raise HelperError("table header %s has none of the key columns %s" % (",".join(header), ",".join(k)))
        want.append(cols)

    def match(row):
        for i, cols in enumerate(want):
            if all(key_text(row[j] if j < len(row) else "") == v for j, v in cols):
                return i
        return None
    return match


def _kernel(header, row):
    cells = dict(zip([h.strip() for h in header], row))
    names = [cells[c] for c in ("kernelName", "kernelName1", "kernelName2") if cells.get(c)]
    return " / ".join(names)


def _split(live, keys):
    """(header, (rows, rows dropped), kept lines, {key index: its first row}); the kept lines are the
    file's own bytes, so a table without some rows is otherwise byte-identical to the live one."""
    try:
        with open(live, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise HelperError("the live table %s is gone" % live,
                          hint="nothing to recheck there; the jobs that promoted into it were rolled back or "
                               "the table was removed")
    lines = data.splitlines(True)
    header = next(csv.reader([lines[0].decode("utf-8", "replace")]), []) if lines else []
    header = [h.strip() for h in header]
    if not header:
        raise HelperError("the live table %s is empty" % live, hint="restore it from a job's backup")
    match = _matcher(header, keys)
    found, kept, rows, dropped = {}, [lines[0]], 0, 0
    for line in lines[1:]:
        row = next(csv.reader([line.decode("utf-8", "replace")]), [])
        if not any(c.strip() for c in row):
            kept.append(line)
            continue
        rows += 1
        i = match(row)
        if i is None:
            kept.append(line)
            continue
        dropped += 1
        if i not in found:
            found[i] = row
        # a second row of a key goes with the first (AITER would serve the first)
    return header, (rows, dropped), kept, found


def op_recheck_tables(req):
    """{"live", "without", "keys": [{col: text}]} -> {"found": {index: kernel name}, "rows", "without_rows"}:
    ``without`` = the live table minus the rows of ``keys`` (same header, same order otherwise)."""
    live, without, keys = req.get("live"), req.get("without"), req.get("keys") or []
    if not live or not without or not keys:
        raise HelperError("recheck_tables: live, without and keys are required")
    header, (rows, dropped), kept, found = _split(live, keys)
    atomic_write(without, b"".join(kept))
    return {"found": dict((str(i), _kernel(header, r)) for i, r in found.items()), "rows": rows,
            "without_rows": rows - dropped}


def op_demote(req):
    """{"live", "backup_dir", "keys": [{col: text}], "modules": [names], "package_dir", "jit_dir_env"}:
    remove the rows of ``keys`` from the live table (backup, complete new file + rename, modules moved aside).
    A record of this backup_dir that is not rolled back: ``already`` (nothing changes again)."""
    live, bdir, keys = req.get("live"), req.get("backup_dir"), req.get("keys") or []
    if not live or not bdir or not keys:
        raise HelperError("demote: live, backup_dir and keys are required")
    rec_path = os.path.join(bdir, RECORD)
    try:
        with open(rec_path) as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        old = None
    if old is not None and not old.get("rolled_back"):
        return dict(old, already=True)
    _, (_, dropped), kept, found = _split(live, keys)
    if not found:
        return {"live": live, "removed": [], "nothing": True}
    backup = backup_name(bdir, live)
    copy_preserving(live, backup)
    mode = os.stat(live).st_mode & 0o7777
    atomic_write(live, b"".join(kept), mode)
    jit_dir = live_jit_dir(req.get("package_dir"), req.get("jit_dir_env"))
    modules = {}
    for name in req.get("modules") or []:
        so = os.path.join(jit_dir, name + ".so")
        modules[so] = move_aside(so, os.path.join(bdir, "jit"))
    removed = [keys[i] for i in sorted(found)]
    record = {"live": live, "backup": backup, "existed": True, "promoted": [], "demoted": removed,
              "removed_rows": dropped, "modules": modules, "time": epoch_s(), "rolled_back": False,
              "kind": "demotion"}
    atomic_write(rec_path, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    return dict(record, already=False)
