"""remote/openssh.py: when a node's commands ride the user's OpenSSH master, and how (a fake `ssh` on PATH
records its argv; the master's socket is a real listening AF_UNIX socket)."""

from __future__ import annotations

import os
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from orchestrator.errors import CommandTimeout
from orchestrator.remote import openssh
from orchestrator.remote.openssh import MasterTransport, names_a_master, ssh_transport
from orchestrator.remote.shell import Cmd
from orchestrator.remote.sshtarget import SshTarget
from orchestrator.remote.transport import TransportError

# the fake ssh: `-G` prints $FAKE_SSH_G; a command logs its argv to $FAKE_SSH_LOG, then runs its last word
# locally in sh (exit status passed through), as ssh runs it on the node
FAKE_SSH = r"""#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_SSH_LOG"
for a in "$@"; do [ "$a" = "-G" ] && { printf '%s\n' "$FAKE_SSH_G"; exit 0; }; done
for a in "$@"; do last="$a"; done
[ -n "$FAKE_SSH_EXIT" ] && { echo "ssh: $FAKE_SSH_EXIT" >&2; exit 255; }
exec sh -c "$last"
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.delenv("FAKE_SSH_EXIT", raising=False)

    class Fake:
        def calls(self) -> list[str]:
            return log.read_text().splitlines() if log.exists() else []

        def g(self, **opts: str) -> None:
            monkeypatch.setenv("FAKE_SSH_G", "\n".join(f"{k} {v}" for k, v in opts.items()))
    return Fake()


@pytest.fixture
def listener():
    d = tempfile.mkdtemp(prefix="trcm", dir="/tmp")
    path = os.path.join(d, "cm-sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)
    yield s, path
    s.close()
    if os.path.exists(path):
        os.unlink(path)
    os.rmdir(d)


def _cfg(tmp_path: Path, text: str) -> str:
    p = tmp_path / "ssh_config"
    p.write_text(text)
    return str(p)


# -- does any ssh_config name a master ---------------------------------------------------------------
def test_a_config_without_controlpath_costs_no_subprocess(tmp_path, fake_ssh):
    cfg = _cfg(tmp_path, "Host n1\n  HostName 10.0.0.1\n  ControlMaster auto\n")
    assert not names_a_master(cfg)
    t = ssh_transport(SshTarget("n1", ssh_config_path=cfg))
    assert type(t).__name__ == "SshTransport"
    assert fake_ssh.calls() == []


def test_controlpath_found_in_the_file_or_an_include(tmp_path):
    assert names_a_master(_cfg(tmp_path, "Host *\n  controlpath ~/.ssh/cm-%C\n"))
    inc = tmp_path / "conf.d"
    inc.mkdir()
    (inc / "10-mux.conf").write_text("Host n*\n  ControlPath=/tmp/cm-%C\n")
    (inc / "20-other.conf").write_text("Host x\n  User y\n")
    assert names_a_master(_cfg(tmp_path, f"Include {inc}/*.conf\nHost n1\n  Port 2222\n"))
    (inc / "10-mux.conf").write_text("Host n*\n  User z\n")
    assert not names_a_master(_cfg(tmp_path, f"Include {inc}/*.conf\n"))


def test_an_include_that_includes_itself_ends(tmp_path):
    p = tmp_path / "loop.conf"
    p.write_text(f"Include {p}\n")
    assert not names_a_master(str(p))


# -- the choice ---------------------------------------------------------------------------------------
def _master(tmp_path) -> MasterTransport:
    return MasterTransport(SshTarget("n1", 2222, "me", "~/.ssh/id_x", _cfg(tmp_path, "ControlPath x\n")))


def test_a_live_master_is_ridden_and_every_value_reaches_ssh_quoted_once(tmp_path, fake_ssh, listener):
    _, path = listener
    fake_ssh.g(controlpath=path, controlmaster="auto", controlpersist="600")
    t = _master(tmp_path)
    res = t.run(Cmd(("printf", "%s|", "a b", "$HOME", "it's")), stdin=b"")
    assert res.stdout == b"a b|$HOME|it's|"
    assert t.via_master() and t.round_trips == 1 and t.fallback is None
    argv = fake_ssh.calls()[-1]
    assert "-F" in argv and "-p 2222" in argv and "-l me" in argv and os.path.expanduser("~/.ssh/id_x") in argv
    assert "ControlMaster=no" in argv and f"ControlPath={path}" in argv and "BatchMode=yes" in argv
    assert "-- n1 printf" in argv


def test_stdin_and_exit_status_pass_through(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1], controlmaster="auto")
    t = _master(tmp_path)
    res = t.run(Cmd(("sh", "-c", "cat; echo oops >&2; exit 3")), stdin=b"payload", check=False)
    assert (res.exit_code, res.stdout, res.stderr) == (3, b"payload", b"oops\n")


def test_a_percent_in_the_socket_path_is_not_a_token_again(tmp_path, fake_ssh):
    d = tempfile.mkdtemp(prefix="tr%cm", dir="/tmp")
    path = os.path.join(d, "s")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(4)
    try:
        fake_ssh.g(controlpath=path)
        t = _master(tmp_path)
        t.run(Cmd(("true",)))
        assert f"ControlPath={path.replace('%', '%%')}" in fake_ssh.calls()[-1]
    finally:
        s.close()
        os.unlink(path)
        os.rmdir(d)


@pytest.mark.parametrize("opts", [
    {"controlpath": "none"},                                              # ssh -G: no master for this host
    {},                                                                   # -G failed / printed nothing
    {"controlpath": "/nonexistent/cm", "controlmaster": "false"},         # none running, none to start
    {"controlpath": "/nonexistent/cm", "controlmaster": "auto", "controlpersist": "no"},   # would not persist
])
def test_no_master_to_ride_means_paramiko(tmp_path, fake_ssh, opts):
    fake_ssh.g(**opts)
    t = _master(tmp_path)
    assert not t.via_master()
    assert type(t.fallback).__name__ == "SshTransport"
    assert not any(" true" in c for c in fake_ssh.calls())              # no master was started


@pytest.mark.parametrize("mode", ["ask", "autoask"])
def test_a_master_that_asks_per_session_is_left_alone(tmp_path, fake_ssh, listener, mode):
    fake_ssh.g(controlpath=listener[1], controlmaster=mode, controlpersist="600")
    assert not _master(tmp_path).via_master()


def test_auto_with_controlpersist_starts_the_master_as_ssh_would(tmp_path, fake_ssh, listener, monkeypatch):
    """No master listens yet; `ssh ... true` (BatchMode, ControlMaster=auto) is what starts it: here the fake
    ssh's `true` is followed by a listener appearing, as the real master's would."""
    sock, path = listener
    sock.close()
    os.unlink(path)
    fake_ssh.g(controlpath=path, controlmaster="auto", controlpersist="600")
    started = []

    def fake_start(self):
        started.append(fake_ssh.calls())
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(4)
        started.append(s)
    monkeypatch.setattr(MasterTransport, "_start_master", fake_start)
    t = _master(tmp_path)
    try:
        assert t.via_master()
        assert len(started) == 2
    finally:
        started[1].close()


def test_the_start_argv_never_prompts_and_accepts_new_keys_only_when_asked(tmp_path, fake_ssh):
    fake_ssh.g(controlpath="/nonexistent/cm", controlmaster="auto", controlpersist="yes")
    for accept, want in ((False, False), (True, True)):
        t = MasterTransport(SshTarget("n1", ssh_config_path=_cfg(tmp_path, "ControlPath x\n")),
                            accept_new_host_key=accept)
        assert not t.via_master()                         # the fake `true` starts nothing: paramiko
        start = [c for c in fake_ssh.calls() if c.endswith("-- n1 true")][-1]
        assert "BatchMode=yes" in start and "ControlMaster=auto" in start
        assert ("StrictHostKeyChecking=accept-new" in start) is want


def test_a_master_that_went_away_hands_over_to_paramiko(tmp_path, fake_ssh, listener):
    sock, path = listener
    fake_ssh.g(controlpath=path, controlmaster="auto")
    t = _master(tmp_path)
    assert t.via_master()
    sock.close()                                          # ControlPersist ran out / ssh -O exit
    os.unlink(path)
    assert not t.via_master()
    assert type(t.fallback).__name__ == "SshTransport"


def test_ssh_failing_because_the_master_died_is_a_lost_connection(tmp_path, fake_ssh, listener, monkeypatch):
    sock, path = listener
    fake_ssh.g(controlpath=path)
    t = _master(tmp_path)
    assert t.via_master()
    monkeypatch.setenv("FAKE_SSH_EXIT", "mux_client_request_session: read from master failed")
    res = t.run(Cmd(("true",)), check=False)            # the master still listens: the command's own 255
    assert res.exit_code == 255
    answers = iter([True, False])                         # alive when chosen, gone when ssh failed
    monkeypatch.setattr(openssh, "_listening", lambda p: next(answers))
    with pytest.raises(TransportError, match="master went away"):
        t.run(Cmd(("true",)))


def test_a_command_past_its_timeout_on_a_live_master_is_a_timeout(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1])
    t = _master(tmp_path)
    with pytest.raises(CommandTimeout):
        t.run(Cmd(("sleep", "5")), timeout=0.3)


# -- streams --------------------------------------------------------------------------------------------
def test_a_stream_is_bytes_in_bytes_out_then_eof_exit_code_and_stderr(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1])
    t = _master(tmp_path)
    s = t.open_stream(Cmd((sys.executable, "-u", "-c",
                           "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"
                           "sys.stderr.write('bye'); sys.exit(4)")))
    s.send(b"hello\n")
    got = b""
    while not got.endswith(b"\n"):
        chunk = s.recv(5.0)
        assert chunk, "no answer"
        got += chunk
    assert got == b"HELLO\n"
    s.proc.stdin.close()                                # EOF to the command: it ends
    assert s.recv(5.0) == b""
    assert s.stderr() == b"bye"
    s.proc.wait(5)
    assert s.exit_code() == 4
    s.close()
    assert t._streams == set()


def test_close_ends_the_clients_of_this_process_only(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1])
    t = _master(tmp_path)
    streams = [t.open_stream(Cmd(("sleep", "30"))) for _ in range(2)]
    assert streams[0].recv(0.05) is None                 # nothing yet: a timeout, not EOF
    t.close()
    assert all(s.proc.poll() is not None for s in streams)
    assert os.path.exists(listener[1])                   # the master (the user's) is untouched
