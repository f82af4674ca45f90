"""`tune-remote` leaves without the interpreter's teardown (issue 9: ~0.3 s with pandas loaded), but
nothing a normal exit does is lost: the exit code, buffered output, exit handlers, a working thread."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TUNE_REMOTE_WORKSPACE": str(tmp_path / "ws")})


def test_the_exit_code_buffered_output_and_exit_handlers_survive(tmp_path):
    mark = tmp_path / "atexit"
    cp = _run("import atexit, sys\n"
              "from orchestrator.cli import console_main\n"
              f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
              "sys.stdout.write('unflushed before ')\n"
              "sys.argv = ['tune-remote', 'status', 'no-such-job']\n"
              "console_main()\n"
              "print('not reached')\n", tmp_path)
    assert cp.returncode == 2, cp.stderr          # a usage error's code, not 0 and not the teardown's
    assert cp.stdout == "unflushed before "
    assert "no-such-job" in cp.stderr
    assert mark.read_text() == "ran"


def test_a_non_daemon_thread_still_at_work_is_waited_for(tmp_path):
    done = tmp_path / "done"
    cp = _run("import sys, threading, time\n"
              "from orchestrator.cli import console_main\n"
              f"threading.Thread(target=lambda: (time.sleep(0.5), open({str(done)!r}, 'w').write('x'))).start()\n"
              "sys.argv = ['tune-remote', '--version']\n"
              "console_main()\n", tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert done.read_text() == "x"
