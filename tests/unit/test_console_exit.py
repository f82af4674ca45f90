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


def test_sigpipe_never_ends_the_process_and_a_closed_stdout_ends_it_quietly(tmp_path):
    """SIGPIPE was set to SIG_DFL: a write to an ssh client that had just exited (the user's OpenSSH master
    ended mid-job) killed the job's driver outright (exit -13, seen in CI). It stays ignored: such a write is an
    error its transport handles; stdout closed by `| head` still ends the command quietly (click: exit 1)."""
    import signal
    import subprocess
    import sys

    from orchestrator.state import JobState, Workspace
    ws = Workspace(tmp_path / "ws")
    for i in range(400):                       # `status --json` of them: more than a pipe's 64 KiB buffer
        ws.save(JobState(job_id=f"j{i:03d}", node="n1", container="c1", variant="a8w8_blockscale", created=0.0,
                         request={}, state="succeeded", error="x" * 2000))
    code = ("import signal, sys; from orchestrator.cli.base import main; rc = main(sys.argv[1:]); "
            "sys.stderr.write('SIGPIPE %s\\n' % (signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)); sys.exit(rc)")
    p = subprocess.Popen([sys.executable, "-c", code, "--workspace", str(ws.root), "status", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()                           # the reader went away, as `| head -c 10` does
    err = p.stderr.read().decode()
    assert p.wait() in (0, 1), err            # never -13 (killed by SIGPIPE)
    assert "SIGPIPE True" in err and "internal error" not in err and "Traceback" not in err
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
