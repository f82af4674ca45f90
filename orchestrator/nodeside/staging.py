"""Staging, promotion and rollback of tuned tables (node side, stdlib only, Python >= 3.8).

The tuner writes a staging copy of the live table inside the job's directory; the live table (the file
AITER reads at runtime) changes only here, after a backup, by writing a complete new file and renaming
it over the old one (a reader never sees half a file). The live JIT module compiled from the old table
is moved aside (rename, never rewritten in place: a running server keeps its mapped inode), so the next
fresh process builds it from the new table. Every change is recorded in ``<backup_dir>/promotion.json``
so promote and rollback are idempotent and rollback restores byte for byte. A later promotion of the
same job (``promote JOB --rows all`` after the proven rows) promotes the keys asked for that are not
promoted yet, as a new round with its own backup of the live table as it is then; the record keeps the
first promotion's backup and modules, so a rollback restores the live table as it was before the job's
first promotion, whatever rounds followed.
"""

import csv
import glob
import io
import json
import os
import shutil

from .common import HelperError, epoch_s
from .files import backup_name, copy_preserving, atomic_write
from ..shapelib.tablekey import GPU_COLUMNS, table_key
from ..shapelib.text import key_text

RECORD = "promotion.json"


def live_jit_dir(package_dir, env_jit_dir):
    """Where AITER keeps built modules (aiter/jit/core.py get_user_jit_dir, aiter-formats.md §5.2)."""
    if env_jit_dir:
        return env_jit_dir
    here = os.path.join(package_dir or "", "jit")
    if package_dir and os.access(here, os.W_OK):
        return here
    return os.path.expanduser("~/.aiter/jit")


def op_stage(req):
    """Copy the live table to the staging path (same bytes) so the tuner skips what is tuned already.

    ``offer`` (optional): {"key_columns": [lower], "rows": [{column: value}]}: rows of the team's store
    (issue 39), added to the staging table as if the tuner had written them, so that the benchmarks measure
    them and promotion judges them like the tuned ones; a key the staging table holds already (the live
    table's own row) keeps that row. Idempotent (a re-run adds nothing twice): ``offered`` / ``kept``."""
    live, staging = req.get("live"), req.get("staging")
    if not live or not staging:
        raise HelperError("stage: live and staging paths are required")
    if os.path.isfile(staging):
        out = {"staged": True, "existed": True}
    elif os.path.isfile(live):
        copy_preserving(live, staging)
        out = {"staged": True, "existed": False}
    else:
        os.makedirs(os.path.dirname(staging), exist_ok=True)
        out = {"staged": False, "existed": False}
    offer = req.get("offer")
    if offer and offer.get("rows"):
        out.update(_offer(staging, offer.get("key_columns") or [], offer["rows"]))
    return out


def _offer(staging, key_columns, rows):
    header, body = _read(staging) if os.path.isfile(staging) else ([], [])
    if not header:
        header = list(rows[0])
    low = [h.lower() for h in header]
    cols, key_of = _keyer(header, key_columns)
    have = set(key_of(r) for r in body)
    added, kept = [], 0
    for row in rows:
        by = dict((str(k).lower(), "" if v is None else str(v)) for k, v in row.items())
        cells = [by.get(c, "") for c in low]
        k = key_of(cells)
        if k in have:
            kept += 1
            continue
        have.add(k)
        added.append(cells)
    if added:       # appended to the staging bytes as they are (the live table's rows are not rewritten)
        old = b""
        if os.path.isfile(staging):
            with open(staging, "rb") as fh:
                old = fh.read()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if not old.strip():
            old = b""
            w.writerow(header)
        elif not old.endswith(b"\n"):
            old += b"\n"
        w.writerows(added)
        atomic_write(staging, old + buf.getvalue().encode("utf-8"))
    return {"offered": len(added), "kept": kept}


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return [], []
    return [h.strip() for h in rows[0]], [r for r in rows[1:] if any(c.strip() for c in r)]


def _keyer(header, key_columns):
    """The table's key (shapelib/tablekey: gfx/cu_num only where the header has them, the variant's shape
    columns in any case), in lower case, and a row -> key text function."""
    low = [h.lower() for h in header]
    cols = [c.lower() for c in table_key(header, ())] + [c for c in key_columns if c not in GPU_COLUMNS]
    missing = [c for c in cols if c not in low]
    if missing:
        raise HelperError("table header %s lacks key columns %s" % (",".join(header), ",".join(missing)))
    idx = [low.index(c) for c in cols]
    return cols, lambda row: tuple(key_text(row[i] if i < len(row) else "") for i in idx)


def _common(key, cols, other_cols):
    """`key` (over `cols`) on the key columns `other_cols` has too: a table without a gfx column (an older
    AITER's, or one shipped that way) keys its rows by cu_num only, so a staging row with a gfx matches it
    there; without this a promoted key already in such a live table would be appended as a duplicate."""
    return tuple(v for c, v in zip(cols, key) if c in other_cols)


def _us_index(header):
    low = [h.strip().lower() for h in header]
    return low.index("us") if "us" in low else None


def _merge_winner(rows):
    """The (file, us) a resolving merge keeps of one key's rows, in merge order: the lowest us, the first on
    ties (upstream's test_config_merge_fallback.py); None when a us is missing or not a number (it raises)."""
    best = None
    for f, us in rows:
        try:
            v = float(us)
        except (TypeError, ValueError):
            return None
        if v != v:
            return None
        if best is None or v < best[2]:
            best = (f, us, v)
    return best[:2]


def _read_record(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def move_aside(path, dest_dir):
    """Rename a built module out of the way (never rewrite it: a server may have it mapped)."""
    if not os.path.isfile(path):
        return None
    os.makedirs(dest_dir, exist_ok=True)
    dst = backup_name(dest_dir, path)
    try:
        os.rename(path, dst)
    except OSError:  # another file system: copy, then unlink (the mapped inode stays valid)
        shutil.copy2(path, dst)
        os.unlink(path)
    return dst


def op_promote(req):
    """Merge the staging rows of the given keys into the live table, after a backup.

    request: {"live", "staging", "backup_dir", "key_columns": [lower], "keys": [[text]], "gfx", "cu_num",
              "others": [glob of tables AITER merges with this one], "modules": [module names],
              "package_dir", "jit_dir_env", "mode" (kept in the round, for the report),
              "merge_rule" (the node's probed duplicate-key rule: "resolve" promotes a key another table holds
              and says which row the merge keeps, ``shadowed``/``overrides``; else such keys are skipped),
              "built_dir" (optional: the after arm's JIT dir, whose modules are reused when the promoted
              table equals the staging table)}
    An unrolled-back record of this backup_dir: the keys asked for that it does not hold yet are
    promoted as its next round (``promoted_now``); none: ``already`` and nothing changes.
    """
    live, staging, bdir = req.get("live"), req.get("staging"), req.get("backup_dir")
    if not live or not staging or not bdir:
        raise HelperError("promote: live, staging and backup_dir are required")
    rec_path = os.path.join(bdir, RECORD)
    old = _read_record(rec_path)
    if old is not None and old.get("rolled_back"):
        old = None                      # promoted, rolled back: this is a first promotion again
    key_columns = [c.lower() for c in req.get("key_columns") or []]
    done_before = set(tuple(k) for k in (old or {}).get("promoted") or [])
    if old is not None and _asked(req, done_before):
        return dict(old, already=True)  # every key asked for is promoted already: nothing to do
    if not os.path.isfile(staging):
        raise HelperError("promote: the staging table %s is gone" % staging,
                          hint="the job directory on the node was cleaned; nothing was changed")
    s_head, s_rows = _read(staging)
    s_cols, s_key = _keyer(s_head, key_columns)
    gfx, cu_num = req.get("gfx"), req.get("cu_num")
    prefix = tuple(v for c, v in (("gfx", gfx), ("cu_num", cu_num)) if c in s_cols)
    wanted = set(prefix + tuple(key_text(v) for v in k) for k in req.get("keys") or [])
    # keys another table already covers: where the node's merge raises on a duplicate key (v0.1.12+, probed)
    # they are skipped; where it resolves them (merge_rule "resolve") they are promoted and said shadowed or not
    resolve = req.get("merge_rule") == "resolve"
    taken = []          # (file, the key columns shared with it, {its key on them: its us text})
    others = []
    for pattern in req.get("others") or []:     # the merge's order: the live table first, then these in order
        for p in sorted(glob.glob(pattern)):
            if p not in others:
                others.append(p)
    for other in others:
        if "untuned" in os.path.basename(other) or os.path.realpath(other) == os.path.realpath(live) or not os.path.isfile(other):
            continue
        o_head, o_rows = _read(other)
        try:
            o_cols, o_key = _keyer(o_head, key_columns)
        except HelperError:
            continue
        common = [c for c in s_cols if c in o_cols]
        o_us = _us_index(o_head)
        held = {}
        for r in o_rows:
            held.setdefault(_common(o_key(r), o_cols, common), r[o_us] if o_us is not None and o_us < len(r) else "")
        taken.append((other, common, held))
    s_us = _us_index(s_head)
    chosen, skipped, shadowed, overrides = {}, [], [], []
    for r in s_rows:
        k = s_key(r)
        if k in wanted and k not in done_before:    # a later promotion adds the rows not promoted yet
            clash = [(f, held[_common(k, s_cols, common)]) for f, common, held in taken
                     if _common(k, s_cols, common) in held]
            if clash and not resolve:
                skipped.append(list(k))
                continue
            if clash:
                ours = r[s_us] if s_us is not None and s_us < len(r) else ""
                winner = _merge_winner([(live, ours)] + clash)
                if winner is None:          # a missing or non-numeric us: that merge raises too
                    skipped.append(list(k))
                    continue
                shadowed[:] = [x for x in shadowed if x["key"] != list(k)]
                overrides[:] = [x for x in overrides if x["key"] != list(k)]
                if winner[0] == live:
                    overrides.append({"key": list(k), "us": ours, "over": [{"file": f, "us": u} for f, u in clash]})
                else:
                    shadowed.append({"key": list(k), "us": ours, "by": winner[0], "by_us": winner[1]})
            chosen[k] = r  # the newest staging row of a key wins, as in AITER's sortResults
    if not chosen and old is not None:     # the rest is covered by other tables, or has no row
        return dict(old, already=True)
    if not chosen:  # nothing to change: the live table and modules stay exactly as they are
        return {"live": live, "promoted": [], "skipped_duplicates": skipped, "already": False, "nothing": True,
                "merge_rule": req.get("merge_rule")}
    existed = os.path.isfile(live)
    if existed:
        l_head, l_rows = _read(live)
        l_cols, l_key = _keyer(l_head, key_columns)
    else:
        l_head, l_rows, l_cols, l_key = s_head, [], s_cols, s_key
    common = [c for c in s_cols if c in l_cols]
    by_live = {_common(k, s_cols, common): k for k in chosen}
    pos = {h.lower(): i for i, h in enumerate(s_head)}

    def as_live(row):
        return [row[pos[h.lower()]] if h.lower() in pos and pos[h.lower()] < len(row) else "" for h in l_head]

    out, replaced, done = [], 0, set()
    for r in l_rows:
        k = by_live.get(_common(l_key(r), l_cols, common))
        if k is not None and k not in done:
            out.append(as_live(chosen[k]))
            done.add(k)
            replaced += 1
        elif k is not None:
            continue            # a second live row of a promoted key: the promoted row replaced the first
        else:
            out.append(r)
    added = [k for k in chosen if k not in done]
    out.extend(as_live(chosen[k]) for k in added)
    backup = backup_name(bdir, live) if existed else None
    if backup:
        copy_preserving(live, backup)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([l_head] + out)
    mode = (os.stat(live).st_mode & 0o7777) if existed else None
    atomic_write(live, buf.getvalue().encode("utf-8"), mode)
    modules = {}
    jit_dir = live_jit_dir(req.get("package_dir"), req.get("jit_dir_env"))
    for name in req.get("modules") or []:
        so = os.path.join(jit_dir, name + ".so")
        modules[so] = move_aside(so, os.path.join(bdir, "jit"))
    reused = _reuse_built(req, live, staging, jit_dir)
    now = [list(k) for k in chosen]
    this = {"time": epoch_s(), "mode": req.get("mode"), "backup": backup, "existed": existed, "promoted": now,
            "replaced": replaced, "added": len(added), "skipped_duplicates": skipped, "modules": modules,
            "reused_modules": reused, "shadowed": shadowed, "overrides": overrides}
    if old is None:
        record = {"live": live, "backup": backup, "existed": existed, "promoted": now, "replaced": replaced,
                  "added": len(added), "skipped_duplicates": skipped, "modules": modules, "time": this["time"],
                  "rolled_back": False, "rounds": [this], "merge_rule": req.get("merge_rule"),
                  "shadowed": shadowed, "overrides": overrides}
    else:
        # a later promotion of the same job: the record keeps the FIRST backup and the modules as they were
        # before the first promotion (what rollback restores); this one's backup and moves are in its round
        record = dict(old, promoted=old.get("promoted", []) + now, replaced=old.get("replaced", 0) + replaced,
                      added=old.get("added", 0) + len(added), skipped_duplicates=skipped,
                      rounds=_rounds(old) + [this], merge_rule=req.get("merge_rule"),
                      shadowed=(old.get("shadowed") or []) + shadowed,
                      overrides=(old.get("overrides") or []) + overrides)
    atomic_write(rec_path, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    return dict(record, already=False, promoted_now=now)


def _reuse_built(req, live, staging, jit_dir):
    """The modules the after arm built from the staging table (``built_dir``) ARE the promoted table's when
    the two tables hold the same rows (order aside: a module compiles the set of its rows): copied into the live JIT dir (tmp + rename, mtime now so they are
    newer than the table) instead of being rebuilt by the next process (issue 26). Else nothing."""
    built = req.get("built_dir")
    if not built:
        return []
    (l_head, l_rows), (s_head, s_rows) = _read(live), _read(staging)
    if l_head != s_head or sorted(map(tuple, l_rows)) != sorted(map(tuple, s_rows)):
        return []
    out = []
    for name in req.get("modules") or []:
        src, dst = os.path.join(built, name + ".so"), os.path.join(jit_dir, name + ".so")
        if os.path.isfile(src):
            copy_preserving(src, dst)
            os.utime(dst)
            out.append(dst)
    return out


def _rounds(rec):
    """The promotions a record holds, oldest first (a record from before later promotions is one)."""
    if rec.get("rounds"):
        return list(rec["rounds"])
    return [{k: rec.get(k) for k in ("time", "backup", "existed", "promoted", "replaced", "added",
                                     "skipped_duplicates", "modules")}]


def _asked(req, done):
    """Every key of the request (with this GPU's gfx/cu_num prefix, either form) is in ``done``."""
    gfx, cu_num = req.get("gfx"), req.get("cu_num")
    pref = [p for p in ((gfx, cu_num), (cu_num,), ()) if all(v is not None for v in p)]
    for k in req.get("keys") or []:
        key = tuple(key_text(v) for v in k)
        if not any(tuple(key_text(v) for v in p) + key in done for p in pref):
            return False
    return True


def op_rollback(req):
    """Restore the live table (byte for byte) and the live module(s) as they were before the job's FIRST
    promotion: every later promotion of the job (``rounds``) is undone with it."""
    bdir = req.get("backup_dir")
    if not bdir:
        raise HelperError("rollback: backup_dir is required")
    rec_path = os.path.join(bdir, RECORD)
    rec = _read_record(rec_path)
    if rec is None:
        raise HelperError("rollback: this job never promoted anything on the node (%s missing)" % rec_path,
                          hint="nothing to undo; the live table was not changed by this job")
    if rec.get("rolled_back"):
        return dict(rec, already=True)
    live = rec["live"]
    # the record's top-level backup and modules are the first promotion's (later ones only add rounds)
    if rec.get("backup"):
        copy_preserving(rec["backup"], live)
    elif os.path.isfile(live):
        os.unlink(live)  # the table did not exist before this job
    for so, saved in (rec.get("modules") or {}).items():
        if saved and os.path.isfile(saved):
            copy_preserving(saved, so)   # new inode renamed in place: a mapped old one stays valid
        elif not saved and os.path.isfile(so):
            os.unlink(so)                 # built from the promoted table; the next process rebuilds it
    rec.update(rolled_back=True, rolled_back_at=epoch_s(), rounds_undone=len(_rounds(rec)))
    atomic_write(rec_path, (json.dumps(rec, indent=1) + "\n").encode("utf-8"))
    return dict(rec, already=False)
