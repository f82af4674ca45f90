"""op ``run``: one short command in the container, its output in the answer (no exec channel of its own).

For the laptop's short checks that are not jobs (the engaged-at-runtime benchmark after promotion): the
command runs in its own session and, when it outlives ``timeout_s`` or the op is stopped (the helper's
deadline, a dropped channel), its whole process group is killed before the op answers: nothing stays
behind (R-04). Long work is a detached job (``launch``), never this.
"""

import os
import signal
import subprocess

from .common import HelperError

MAX_OUTPUT = 64 << 20


def _killpg(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def op_run(req):
    """request: {"argv": [..], "cwd": str|null, "env": {..} (added to the helper's), "timeout_s": s}
    answer: {"exit": int, "stdout": text, "stderr": text} (utf-8, undecodable bytes replaced);
    past timeout_s: {"exit": null, "timed_out": true} with the group killed."""
    argv = req.get("argv") or []
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise HelperError("run: argv must be a non-empty list of strings")
    env = dict(os.environ)
    env.update(dict((str(k), str(v)) for k, v in (req.get("env") or {}).items()))
    timeout = float(req.get("timeout_s") or 3600)
    proc = subprocess.Popen(argv, cwd=req.get("cwd") or None, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:     # an answer, not a failure: a batch goes on (the caller judges)
        _killpg(proc)
        return {"exit": None, "timed_out": True, "stdout": "",
                "stderr": "%s did not finish within %gs (killed)" % (os.path.basename(argv[0]), timeout)}
    finally:
        if proc.poll() is None:   # the op itself was stopped (deadline, channel gone): no orphan
            _killpg(proc)
    return {"exit": proc.returncode, "stdout": out[-MAX_OUTPUT:].decode("utf-8", "replace"),
            "stderr": err[-MAX_OUTPUT:].decode("utf-8", "replace")}
