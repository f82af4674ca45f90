#!/usr/bin/env python3
"""tune-remote node helper: the entry point (protocol + dispatch) of the helper package.

Pushed into the container with its sibling modules (``common``, ``text``, ``files``, ``discovery``,
``argpatch``, ``procs``, ``shapelog``) and run as ``python3 node_helper.py <op>`` with one JSON
request on stdin. Stdlib only, Python >= 3.8. The protocol is pinned in docs/internals.md
("Node helper protocol").

Every answer is ONE line of JSON: ``{"ok": true, ...}`` or ``{"ok": false, "error", "hint"}``.
Handled problems exit 0; an unexpected exception still prints an ``ok: false`` line (with
``"internal": true`` and a traceback) but exits 1, because that is a bug in the helper.

To add ops: write a module beside this file whose ``op_<name>(request) -> dict`` functions raise
``common.HelperError`` for handled problems, import it below and add one line per op to ``OPS``
(and the file name to ``HELPER_FILES`` in ``orchestrator/remote/detached.py``).
"""

import json
import os
import platform
import sys
import traceback

# `_supervise` runs as `python -I -S node_helper.py`: -I leaves this directory off sys.path
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import argpatch  # noqa: E402
import discovery  # noqa: E402
import files  # noqa: E402
import killing  # noqa: E402
import procs  # noqa: E402
import runlog  # noqa: E402
import staging  # noqa: E402
import tables  # noqa: E402
from common import HELPER_VERSION, HelperError  # noqa: E402

INTERNAL_SUPERVISE = procs.INTERNAL_SUPERVISE


# ------------------------------------------------------------------------------------------------
# ops: version, shapes (the rest live in the sibling modules)
# ------------------------------------------------------------------------------------------------


def op_version(req):
    return {"version": HELPER_VERSION, "python": platform.python_version(),
            "executable": sys.executable, "ops": sorted(k for k in OPS if not k.startswith("_"))}


def op_shapes(req):
    logs = req.get("logs") or []
    if isinstance(logs, str):
        logs = [logs]
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
# dispatch: op name -> function(request dict) -> answer dict
# ------------------------------------------------------------------------------------------------


OPS = {
    "version": op_version,
    "shapes": op_shapes,
    "discover": discovery.op_discover,
    "probe": discovery.op_probe,
    "write_files": files.op_write_files,
    "backup": files.op_backup,
    "tuned_keys": files.op_tuned_keys,
    "manifest": files.op_manifest,
    "stage": staging.op_stage,
    "promote": staging.op_promote,
    "rollback": staging.op_rollback,
    "bench_prepare": argpatch.op_bench_prepare,
    "launch": procs.op_launch,
    "status": runlog.op_status,
    "cancel": killing.op_cancel,
    "table_check": tables.op_table_check,
    INTERNAL_SUPERVISE: procs.op_supervise,
}
def _emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=True, default=str) + "\n")
    sys.stdout.flush()


INTERNAL_WATCH = "_watch"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0] not in OPS and argv[0] != INTERNAL_WATCH):
        _emit({"ok": False, "error": "unknown op %r" % (argv[0] if argv else None,),
               "hint": "ops: %s" % ", ".join(sorted(k for k in OPS if not k.startswith("_"))),
               "version": HELPER_VERSION})
        return 0
    op = argv[0]
    if op == INTERNAL_WATCH:
        import watch  # noqa: PLC0415 - the stalled-tuner watchdog wraps the tune step (argv, not JSON)
        return watch.main(argv[1:])
    if op == INTERNAL_SUPERVISE:
        procs.op_supervise(None)
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
