"""helper op ``run`` (nodeside/runcmd.py): output in the answer; past its timeout the whole group is killed."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HELPER = Path(__file__).resolve().parents[2] / "orchestrator" / "nodeside" / "node_helper.py"


def _run(req, timeout=60):
    proc = subprocess.run([sys.executable, str(HELPER), "run"], input=json.dumps(req).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return json.loads(proc.stdout)


def test_run_answers_exit_and_output_with_env_and_cwd(tmp_path):
    a = _run({"argv": ["sh", "-c", "echo out $X; pwd; echo err >&2; exit 3"], "env": {"X": "x y"},
              "cwd": str(tmp_path)})
    assert a["ok"] and a["exit"] == 3
    assert a["stdout"].splitlines() == ["out x y", str(tmp_path)] and a["stderr"].strip() == "err"


def test_run_past_its_timeout_kills_the_whole_group_and_answers(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    t = time.monotonic()
    a = _run({"argv": ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], "timeout_s": 0.5})
    assert a["ok"] and a["timed_out"] is True and a["exit"] is None
    assert time.monotonic() - t < 30
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
        alive = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except ProcessLookupError:
        alive = False
    assert not alive, "the background child of the timed-out command is still running"


def test_run_refuses_a_bad_argv():
    a = _run({"argv": "echo hi"})
    assert a["ok"] is False and "argv" in a["error"]
