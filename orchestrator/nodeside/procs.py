"""Detached jobs: launch (+ the supervising wrapper); their state is runstate.py, liveness from /proc (proctree.py).
(``status`` lives in runlog.py, ``cancel`` in killing.py.)

Detached jobs keep their truth in a run directory:
``command.json`` (exclusive, written before anything starts), ``record.json`` (written by the
supervising wrapper once the job runs), ``rc`` (exit status, written by the wrapper when the job
ends: the code, or 128+N for signal N) and ``cancelled`` (written by ``cancel``). Every file is
written tmp + rename. The wrapper is ``node_helper.py`` in the internal op ``_supervise``: it is the
session and process-group leader (setsid after a double fork), it runs the job as its child in the
same group with stdin /dev/null and stdout+stderr appended to the log, and it writes ``rc``.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys

from .common import HELPER_VERSION, HelperError, epoch_s, read_json_file, boot_id
from .files import json_bytes, atomic_write, exclusive_write
from .proctree import MARKER_VAR, RUN_DIR_VAR, proc_starttime
from .runstate import LAUNCH_TIMEOUT_S, run_paths

INTERNAL_SUPERVISE = "_supervise"
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_helper.py")



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
    paths = run_paths(run_dir)
    marker = "%s:%s" % (req["job_id"], req["step"])
    cwd = os.path.abspath(req.get("cwd") or run_dir)
    log_path = os.path.abspath(req.get("log_path") or os.path.join(run_dir, "job.log"))
    env = req.get("env") or {}
    if not isinstance(env, dict):
        raise HelperError("launch: env must be an object")

    existing = _existing_launch(paths)
    if existing is not None:
        return existing
    if req.get("must_exist"):   # the laptop launched this run already: never launch it again silently (C-06)
        raise HelperError("the job's run directory %s is gone from the node (the container was recreated or "
                          "its tune_logs cleaned): its pipeline was launched before and is not launched again"
                          % run_dir, hint="start a new run; rows it had promoted are in the live table")
    lock = req.get("lock")
    if lock:   # one running job per (container, variant), whichever laptop launched it
        from . import locks  # noqa: PLC0415
        work = lock.get("workdir") or os.path.join(lock["aiter_root"], "tune_logs")
        locks.acquire(locks.lock_path(work, lock["variant"]), lock["variant"], req["job_id"],
                      run_dir, lock.get("owner"))
        if lock.get("gpus") and req.get("after"):   # chained: the wrapper takes them once that run ended
            pass
        elif lock.get("gpus"):   # and the GPUs it tunes on: another variant's job does not pick them
            try:
                locks.acquire_gpus(work, lock["gpus"], lock["variant"], req["job_id"], run_dir, lock.get("owner"))
            except HelperError:
                locks.release(locks.lock_path(work, lock["variant"]), req["job_id"], run_dir)
                raise
    if not os.path.isdir(cwd):
        raise HelperError("launch: cwd %s does not exist" % cwd, hint="discover the aiter root first")
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))  # fail before command.json
    command = {
        "argv": argv, "cwd": cwd, "env_names": sorted(env), "log_path": log_path,
        "job_id": req["job_id"], "step": req["step"], "created": epoch_s(), "marker": marker,
        "run_dir": run_dir, "helper_version": HELPER_VERSION,
    }
    if not exclusive_write(paths["command"], json_bytes(command)):
        existing = _existing_launch(paths)
        if existing is not None:
            return existing
    spec = {"argv": argv, "cwd": cwd, "env": env, "log_path": log_path, "marker": marker,
            "run_dir": run_dir, "job_id": req["job_id"], "step": req["step"]}
    if req.get("after"):   # a campaign's next variant on this target: its wrapper waits for that run to end
        spec["after"] = {"run_dir": os.path.abspath(req["after"]), "lock": lock or {}}
    record = _spawn_supervisor(spec)
    return {"launched": True, "record": record}


def _existing_launch(paths):
    if os.path.exists(paths["record"]):
        return {"launched": False, "record": read_json_file(paths["record"])}
    if os.path.exists(paths["command"]):
        return {"launched": False, "record": None, "command": read_json_file(paths["command"])}
    return None


def _spawn_supervisor(spec):
    """Double fork + setsid; the session leader execs this script as `_supervise`.

    The launcher gets the record back through a pipe (the wrapper writes it after record.json
    exists), so no sleeping and no polling. Every fd the launcher holds (notably docker exec's
    stdout) is closed in the daemon, so `docker exec` returns as soon as this process exits."""
    helper = ENTRY
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
        deadline = epoch_s() + LAUNCH_TIMEOUT_S
        while True:
            left = deadline - epoch_s()
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
        record = read_json_file(os.path.join(spec["run_dir"], "record.json"))
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
    paths = run_paths(run_dir)
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
        "boot_id": boot_id(), "marker": spec["marker"], "started_at": epoch_s(), "job_id": spec["job_id"],
        "step": spec["step"], "log_path": spec["log_path"], "argv": spec["argv"], "cwd": spec["cwd"],
        "run_dir": run_dir, "hostname": socket.gethostname(), "helper_version": HELPER_VERSION,
        "child_pid": None, "child_starttime": None,
        "init_starttime": proc_starttime(1),   # PID 1 of the container: a restart changes it
    }
    proc = None
    after = spec.get("after")
    if after:   # chained: the launcher is released at once (record.json names the run it waits for)
        from . import locks  # noqa: PLC0415
        record["waiting_for"] = after["run_dir"]
        atomic_write(paths["record"], json_bytes(record))
        try:
            os.write(1, json.dumps(record).encode("utf-8"))
        except OSError:
            pass
        os.dup2(devnull, 1)
        rc = locks.chain_wait(after, spec, paths, term, log_fd)
        if rc is not None:
            record["waiting_for"] = None
            record["error"] = "did not start: rc %d" % rc
            atomic_write(paths["record"], json_bytes(record))
            atomic_write(paths["rc"], ("%d\n" % rc).encode())
            return None
        record["waiting_for"] = None
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
    atomic_write(paths["record"], json_bytes(record))
    if not after:
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
