#!/usr/bin/env python3
"""tune-remote node helper: the entry point (protocol + dispatch) of the node-side package.

``orchestrator/nodeside/`` is pushed into the container as a package, with the shape library it imports
(``orchestrator/shapelib/``), into ``<base>/helper-<digest>/`` (remote/detached.py: the two package
directories as they are, nothing listed by hand). Stdlib only, Python >= 3.8 (this file checks the
version before importing anything else, and keeps to syntax older Pythons parse).
The protocol is pinned in docs/internals.md ("Node helper protocol"). Two ways to run it (as the module
``orchestrator.nodeside.node_helper`` with the pushed dir on sys.path, or by this file's path):

- ``python3 node_helper.py <op> [--timeout S]``: one JSON request on stdin, ONE line of JSON out:
  ``{"ok": true, ...}`` or ``{"ok": false, "error", "hint"}``. Handled problems exit 0; an unexpected
  exception still prints an ``ok: false`` line (``"internal": true`` + traceback) but exits 1.
- ``python3 -u node_helper.py --serve [--idle S]``: the persistent helper (``channel.py``).

To add ops: write a module beside this file whose ``op_<name>(request) -> dict`` functions raise
``common.HelperError`` for handled problems and add one line per op to ``OPS`` (it is pushed with the
package).
"""

import json
import os
import sys

if sys.version_info < (3, 8):
    sys.stdout.write(json.dumps({
        "ok": False, "too_old": True, "hello": True,
        "error": "python %d.%d is too old for the tune-remote node helper (needs >= 3.8)" % sys.version_info[:2],
        "hint": "set python: to a Python >= 3.8 interpreter for this container in inventory.yaml"}) + "\n")
    sys.stdout.flush()
    sys.exit(0)

PYTHON_VERSION = "%d.%d.%d" % sys.version_info[:3]   # as platform.python_version() says it, without its import

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))     # the pushed dir: orchestrator/{nodeside,shapelib}/ live in it
if __name__ == "__main__" and not __package__:
    # run by its path (`python3 <dir>/orchestrator/nodeside/node_helper.py`, `_supervise` as `python -I -S ...`):
    # the package from the dir it was pushed to, never a module of this directory imported flat (PEP 366)
    if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
        del sys.path[0]
    sys.path.insert(0, _ROOT)
    __package__ = "orchestrator.nodeside"
    __import__(__package__)

import importlib  # noqa: E402
from . import procs  # noqa: E402
from .channel import Deadline, deadline, emit, idle_from_argv, serve  # noqa: E402
from .common import HELPER_VERSION, HelperError  # noqa: E402

INTERNAL_SUPERVISE = procs.INTERNAL_SUPERVISE


# ------------------------------------------------------------------------------------------------
# ops: version, shapes, profile (the shape library's; the rest live in the sibling modules)
# ------------------------------------------------------------------------------------------------


def op_version(req):
    return {"version": HELPER_VERSION, "python": PYTHON_VERSION, "dir": _ROOT,
            "executable": sys.executable, "ops": sorted(k for k in OPS if not k.startswith("_"))}


def op_shapes(req):
    logs = req.get("logs") or []
    if isinstance(logs, str):
        logs = [logs]
    try:
        from ..shapelib import shapelog  # noqa: PLC0415 - lazy: only this op needs it
    except ImportError as exc:
        raise HelperError("orchestrator/shapelib/shapelog.py is missing in the node helper's dir (%s)" % exc,
                          hint="re-push the helper bundle (orchestrator/nodeside/ + orchestrator/shapelib/)")
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
    # meta: each shape's first sighting keeps "_meta" (the table AITER consulted, C-12)
    kw = {"keep_meta": True} if req.get("meta") else {}
    for key in ("procs", "min_range"):          # a big dense log is mined in several processes (shapepar)
        if isinstance(req.get(key), int) and req[key] > 0:
            kw[key] = req[key]
    result = shapelog.parse_files(paths, variant=req.get("variant"), **kw)
    return {"shapes": result.shapes, "counts": getattr(result, "counts", {}), "hits": result.hits, "misses": result.misses,
            "warnings": list(result.warnings), "lines": result.lines, "bytes": result.bytes,
            "missing": missing, "files": paths, "ranges": getattr(result, "ranges", None),
            # issue 36: per shape the processes that logged it (the weight where AITER logs once per process),
            # and the shapes AITER's own online tuner refused ('Fmoe tuning not support', aiter#3202)
            "workers": dict(getattr(result, "workers", {})),
            "unsupported": dict(getattr(result, "unsupported", {})), "refused": dict(getattr(result, "refused", {}))}


def op_profile(req):
    """``{"profiles": [path...], "variant"}`` -> the shape library's ``read_profiles`` answer; a ProfileError
    answers ``{"profile_error", "profile_hint"}`` in the reply (the laptop raises it as one line, exit 2)."""
    from ..shapelib import profread  # noqa: PLC0415 - lazy: only this op needs it
    paths = req.get("profiles") or []
    if isinstance(paths, str):
        paths = [paths]
    try:
        return profread.read_profiles([p for p in paths if isinstance(p, str)], req.get("variant"))
    except profread.ProfileError as exc:
        return {"profile_error": exc.error, "profile_hint": exc.hint}


# ------------------------------------------------------------------------------------------------
# dispatch: op name -> function(request dict) -> answer dict
# ------------------------------------------------------------------------------------------------


def op_batch(req):
    """Several ops in one round trip, in order: ``{"ops": [{"op", "req"}, ...]}`` -> ``{"answers": [...]}``,
    each answer as ``run_op`` gives it; the ops after a failed one are not run (each depends on the one
    before, as when they were sent one by one)."""
    ops = req.get("ops")
    if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
        raise HelperError("batch: ops must be a list of {op, req}")
    answers = []
    for item in ops:
        if item.get("op") == "batch":
            raise HelperError("batch: a batch cannot hold a batch")
        answer = run_op(item.get("op"), item.get("req") or {})
        answers.append(answer)
        if not answer.get("ok"):
            break
    return {"answers": answers}


# an op's module is imported when the op is first asked (a helper that only polls never loads argpatch & co.)
OPS = {
    "version": op_version,
    "batch": op_batch,
    "shapes": op_shapes,
    "profile": op_profile,               # a server profile streamed where it lives (issue 38)
    "log_tail": "logtail.op_log_tail",   # watch: the new bytes of growing logs, mined there
    "discover": "discovery.op_discover",
    "probe": "probe.op_probe",
    "write_files": "files.op_write_files",
    "backup": "files.op_backup",
    "tuned_keys": "files.op_tuned_keys",
    "manifest": "files.op_manifest",
    "stage": "staging.op_stage",
    "promote": "staging.op_promote",
    "rollback": "staging.op_rollback",
    "bench_prepare": "argpatch.op_bench_prepare",
    "launch": procs.op_launch,
    "status": "longpoll.op_status",   # runlog.op_status, answered when something changed (wait_s)
    "prefix_sha": "runlog.op_prefix_sha",
    "cancel": "killing.op_cancel",
    "table_check": "tables.op_table_check",
    "disk_free": "tables.op_disk_free",
    "jit_logs": "jitlogs.op_jit_logs",
    "run": "runcmd.op_run",
    "recheck_tables": "recheck.op_recheck_tables",
    "demote": "recheck.op_demote",
    "tuning_guards": "guards.op_tuning_guards",
    INTERNAL_SUPERVISE: procs.op_supervise,
}


def _op(op):
    func = OPS[op]
    if isinstance(func, str):
        module, name = func.split(".")
        if not os.path.isfile(os.path.join(_HERE, module + ".py")):
            raise HelperError("%s.py is missing beside the node helper in %s" % (module, _HERE),
                              hint="remove that directory: tune-remote pushes the helper again")
        func = OPS[op] = getattr(importlib.import_module("." + module, __package__), name)   # a failure: a helper bug
    return func


def run_op(op, req, timeout_s=None):
    """The answer dict of one request (never raises): ok true + the op's answer, or ok false."""
    if op not in OPS or op == INTERNAL_SUPERVISE:
        return {"ok": False, "error": "unknown op %r" % (op,),
                "hint": "ops: %s" % ", ".join(sorted(k for k in OPS if not k.startswith("_"))),
                "version": HELPER_VERSION}
    try:
        func = _op(op)          # imported before the deadline starts: SIGALRM never lands inside an import
        with deadline(timeout_s):
            answer = func(req) or {}
    except Deadline:   # its own timeout, or (timeout_s None: an op in a batch) the batch's
        within = "%ss" % timeout_s if timeout_s is not None else "the time of its batch"
        return {"ok": False, "timeout": True, "error": "%s did not finish within %s" % (op, within),
                "hint": "the helper stopped it; give it a longer timeout", "version": HELPER_VERSION}
    except HelperError as exc:
        out = {"ok": False, "error": exc.error, "hint": exc.hint, "version": HELPER_VERSION}
        out.update(exc.extra)
        return out
    except OSError as exc:
        return {"ok": False, "error": "%s: %s" % (op, exc),
                "hint": "check paths and permissions in the container", "version": HELPER_VERSION}
    except Exception as exc:  # noqa: BLE001 - a helper bug: report it
        return {"ok": False, "error": "node helper bug in %s: %r" % (op, exc), "internal": True,
                "hint": "report this with the traceback", "traceback": _traceback(),
                "version": HELPER_VERSION}
    out = {"ok": True}
    out.update(answer)
    return out


def _timeout_from_argv(argv):
    if "--timeout" in argv:
        try:
            return float(argv[argv.index("--timeout") + 1])
        except (IndexError, ValueError):
            pass
    return None


INTERNAL_STALL = "_stall"   # the stalled-tuner watchdog (stall.py) around the tune line


def _traceback():
    import traceback  # noqa: PLC0415 - ~10 ms at every helper start, needed only for a helper bug
    return traceback.format_exc()


def _preload():
    """A helper started before its first request (preconnect) is about to answer discover: its modules and
    importlib.metadata (~30-40 ms) load while the request is on its way."""
    import importlib.metadata  # noqa: F401,PLC0415
    for name in ("discovery", "gpus"):
        importlib.import_module("." + name, __package__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":
        hello = {"id": 0, "ok": True, "hello": True, "version": HELPER_VERSION, "pid": os.getpid(),
                 "python": PYTHON_VERSION, "dir": _ROOT}
        return serve(run_op, hello, idle_from_argv(argv), preload=_preload)
    if argv and argv[0] == INTERNAL_STALL:
        from . import stall  # noqa: PLC0415 - the stalled-tuner watchdog wraps the tune step (argv, not JSON)
        return stall.main(argv[1:])
    if argv and argv[0] == INTERNAL_SUPERVISE:
        procs.op_supervise(None)
        return 0
    op = argv[0] if argv else None
    if op not in OPS:
        emit(run_op(op, {}))
        return 0
    try:
        raw = sys.stdin.buffer.read()
        req = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        if not isinstance(req, dict):
            raise HelperError("the request must be a JSON object", hint="send {} for no arguments")
    except ValueError as exc:
        emit({"ok": False, "error": "bad JSON request: %s" % exc, "hint": "send one JSON object on stdin",
              "version": HELPER_VERSION})
        return 0
    except HelperError as exc:
        emit({"ok": False, "error": exc.error, "hint": exc.hint, "version": HELPER_VERSION})
        return 0
    answer = run_op(op, req, _timeout_from_argv(argv))
    emit(answer)
    return 1 if answer.get("internal") else 0


if __name__ == "__main__":
    sys.exit(main())
