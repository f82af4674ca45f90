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

# the fake ssh (its settings in fake.conf beside it: a client gets no environment): `-G` prints $G; a command
# logs its argv to $LOG, then runs its last word locally in sh (exit status passed through), as ssh runs it on
# the node; with $EXIT set it fails as ssh does, its message in the -E log file
FAKE_SSH = r"""#!/bin/sh
. "$(dirname "$0")/fake.conf"
printf '%s\n' "$*" >> "$LOG"
elog=/dev/stderr; prev=
for a in "$@"; do [ "$a" = "-G" ] && { printf '%s\n' "$G"; exit 0; }; [ "$prev" = "-E" ] && elog="$a"; prev="$a"; done
for a in "$@"; do last="$a"; done
[ -n "$EXIT" ] && { echo "$EXIT" >> "$elog"; exit 255; }
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

    class Fake:
        settings = {"LOG": str(log), "G": "", "EXIT": ""}

        def _write(self) -> None:
            (bindir / "fake.conf").write_text("".join(f"{k}='{v}'\n" for k, v in self.settings.items()))

        def calls(self) -> list[str]:
            return log.read_text().splitlines() if log.exists() else []

        def g(self, **opts: str) -> None:
            self.settings["G"] = "\n".join(f"{k} {v}" for k, v in opts.items())
            self._write()

        def fail(self, message: str) -> None:
            self.settings["EXIT"] = message
            self._write()
    fake = Fake()
    fake._write()
    return fake


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
    assert "ControlMaster=no" in argv and f"-S {path}" in argv and "BatchMode=yes" in argv
    assert "ProxyCommand=false" in argv and "RemoteCommand=none" in argv   # never a connection of its own
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
        assert f"-S {path.replace('%', '%%')}" in fake_ssh.calls()[-1]
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


@pytest.mark.parametrize("accept,strict,want", [(False, "true", False), (True, "true", True),
                                                 (False, "false", True), (False, "ask", False)])
def test_the_start_never_prompts_and_never_accepts_a_changed_key(tmp_path, fake_ssh, accept, strict, want):
    """StrictHostKeyChecking no (ssh -G: false) would let ssh log in past a CHANGED key: accept-new instead,
    which takes an unknown key (and says so) and refuses a changed one, as the paramiko path does."""
    fake_ssh.g(controlpath="/nonexistent/cm", controlmaster="auto", controlpersist="yes",
               stricthostkeychecking=strict)
    t = MasterTransport(SshTarget("n1", ssh_config_path=_cfg(tmp_path, "ControlPath x\n")),
                        accept_new_host_key=accept)
    assert not t.via_master()                             # the fake `true` starts nothing: paramiko
    start = [c for c in fake_ssh.calls() if c.endswith("-- n1 true")][-1]
    assert "BatchMode=yes" in start and "ControlMaster=auto" in start
    assert ("StrictHostKeyChecking=accept-new" in start) is want
    assert "StrictHostKeyChecking=no" not in start


def test_the_start_shows_ssh_adding_a_host_key(tmp_path, fake_ssh, capsys):
    fake_ssh.g(controlpath="/nonexistent/cm", controlmaster="auto", controlpersist="yes")
    fake_ssh.fail("Warning: Permanently added [127.0.0.1]:2222 (ED25519) to the list of known hosts.")
    MasterTransport(SshTarget("n1", ssh_config_path=_cfg(tmp_path, "ControlPath x\n")),
                    accept_new_host_key=True).via_master()
    assert "tune-remote: warning: ssh: Warning: Permanently added [127.0.0.1]:2222 (ED25519)" in capsys.readouterr().err


def test_a_master_that_went_away_hands_over_to_paramiko(tmp_path, fake_ssh, listener):
    sock, path = listener
    fake_ssh.g(controlpath=path, controlmaster="false")   # a master the user starts by hand
    t = _master(tmp_path)
    assert t.via_master()
    sock.close()                                          # ssh -O exit
    os.unlink(path)
    assert not t.via_master()
    assert type(t.fallback).__name__ == "SshTransport"
    assert not any(c.endswith(" true") for c in fake_ssh.calls())     # none started: the config says no


def test_under_controlpersist_a_master_that_went_away_is_started_again_as_ssh_would(tmp_path, fake_ssh, listener,
                                                                                  monkeypatch):
    sock, path = listener
    fake_ssh.g(controlpath=path, controlmaster="auto", controlpersist="60")
    t = _master(tmp_path)
    assert t.via_master()
    sock.close()                                          # ControlPersist ran out
    os.unlink(path)
    new = []

    def start(self):
        s2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s2.bind(path)
        s2.listen(4)
        new.append(s2)
    monkeypatch.setattr(MasterTransport, "_start_master", start)
    try:
        assert t.via_master() and len(new) == 1 and t.fallback is None
    finally:
        new[0].close()


def test_a_client_sends_no_environment(tmp_path, fake_ssh, listener, monkeypatch):
    """SendEnv (Debian's LANG LC_*) finds nothing: the node's tools see what they saw over paramiko."""
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("MY_TOKEN", "s3cret")
    fake_ssh.g(controlpath=listener[1])
    out = _master(tmp_path).run(Cmd(("env",))).stdout.decode()
    names = {line.split("=", 1)[0] for line in out.splitlines()}
    assert "LC_ALL" not in names and "MY_TOKEN" not in names and "PATH" in names


def test_past_max_sessions_on_one_master_the_rest_use_the_own_connection(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1])
    a, b = _master(tmp_path), _master(tmp_path)           # two targets of a campaign on one node
    streams = [(a if i % 2 else b).open_stream(Cmd(("sleep", "30"))) for i in range(openssh.MAX_SESSIONS)]
    try:
        assert not a.via_master() and not b.via_master()  # sshd would refuse the 11th session
        streams.pop().close()
        assert a.via_master()
    finally:
        for st in streams:
            st.close()
    assert openssh._sessions[listener[1]] == 0


def test_a_silent_path_under_the_master_leaves_it_for_the_own_connection(tmp_path, fake_ssh, listener):
    fake_ssh.g(controlpath=listener[1])
    t = _master(tmp_path)
    t.path_silent()                                       # a session still answers: the master stays
    assert t.via_master()
    fake_ssh.fail("Timeout, server not responding.")
    t.path_silent()
    assert not t.via_master() and type(t.fallback).__name__ == "SshTransport"
    assert os.path.exists(listener[1])                    # the user's master is theirs to end


def test_a_stream_ended_by_ssh_itself_is_a_lost_connection_not_eof(tmp_path, fake_ssh, listener):
    """The master died mid-copy: ssh exits 255 with its log; a copy cut there must not look whole."""
    fake_ssh.g(controlpath=listener[1])
    fake_ssh.fail("Control master terminated unexpectedly")
    s = _master(tmp_path).open_stream(Cmd(("cat",)))
    with pytest.raises(TransportError, match="terminated unexpectedly"):
        while s.recv(5.0):
            pass
    s.close()


def test_a_relative_include_is_read_from_dot_ssh_at_any_depth(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh" / "conf.d").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (home / ".ssh" / "conf.d" / "a.conf").write_text("Include conf.d/b.conf\n")
    (home / ".ssh" / "conf.d" / "b.conf").write_text("Host *\n  ControlPath ~/.ssh/cm-%C\n")
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (elsewhere / "cfg").write_text("Include conf.d/a.conf\n")
    assert names_a_master(str(elsewhere / "cfg"))


def test_ssh_failing_because_the_master_died_is_a_lost_connection(tmp_path, fake_ssh, listener, monkeypatch):
    sock, path = listener
    fake_ssh.g(controlpath=path)
    t = _master(tmp_path)
    assert t.via_master()
    res = t.run(Cmd(("sh", "-c", "exit 255")), check=False)  # the master listens, no ssh log: the command's 255
    assert res.exit_code == 255
    fake_ssh.fail("mux_client_request_session: session request failed: Session open refused by peer")
    with pytest.raises(TransportError, match="Session open refused"):
        t.run(Cmd(("true",)))                              # ssh's own failure, said by its -E log
    fake_ssh.fail("")
    answers = iter([True, False])                         # alive when chosen, gone once the client ended
    monkeypatch.setattr(openssh, "_listening", lambda p: next(answers))
    with pytest.raises(TransportError, match="went away"):
        t.run(Cmd(("sh", "-c", "exit 255")))


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
                           ("import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"
                            "sys.stderr.write('bye'); sys.exit(4)"))))
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


def test_a_silent_path_drops_the_own_connection_too(tmp_path, fake_ssh):
    """The fallback carries the node when there is no master: a black hole drops its connection (the next
    command reconnects), as the pool did for paramiko alone."""
    fake_ssh.g(controlpath="/nonexistent/cm", controlmaster="false")
    t = _master(tmp_path)
    assert not t.via_master()
    dropped = []
    t.fallback.conn = object()
    t.fallback._drop = dropped.append
    t.path_silent()
    assert dropped == [t.fallback.conn]


def test_a_refused_session_is_an_answer_and_a_new_master_is_taken_again(tmp_path, fake_ssh, listener):
    sock, path = listener
    fake_ssh.g(controlpath=path)
    t = _master(tmp_path)
    fake_ssh.fail("mux_client_request_session: session request failed: Session open refused by peer")
    t.path_silent()                                       # sshd answered (MaxSessions): the master lives
    assert t.via_master()
    fake_ssh.fail("Timeout, server not responding.")
    t.path_silent()
    assert not t.via_master()                             # left while that socket is there
    fake_ssh.fail("")
    sock.close()
    os.unlink(path)                                       # the user starts a new master at the same path
    s2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s2.bind(path)
    s2.listen(4)
    try:
        assert t.via_master()
    finally:
        s2.close()


def test_a_failed_start_is_not_tried_again_by_every_thread(tmp_path, fake_ssh, monkeypatch):
    fake_ssh.g(controlpath="/nonexistent/cm", controlmaster="auto", controlpersist="60")
    starts = []
    monkeypatch.setattr(MasterTransport, "_start_master", lambda self: starts.append(1))
    t = _master(tmp_path)
    for _ in range(5):
        assert not t.via_master()
    assert starts == [1]                                   # one start, then START_AGAIN_S of paramiko


def test_a_timed_out_command_probes_once(tmp_path, fake_ssh, listener, monkeypatch):
    fake_ssh.g(controlpath=listener[1])
    t = _master(tmp_path)
    probes = []
    monkeypatch.setattr(MasterTransport, "_probe", lambda self, p: probes.append(p) and False)
    with pytest.raises(TransportError, match="no answer"):
        t.run(Cmd(("sleep", "5")), timeout=0.3)
    assert probes == [listener[1]]
    assert not t.via_master()                              # left: its connection is a black hole


def test_client_logs_live_in_a_dir_of_the_process_and_a_killed_processs_dir_is_swept(tmp_path, monkeypatch):
    """A process killed outright (SIGKILL) leaves its clients' -E logs: the next one removes them, and only
    those whose process is gone: judged by the dir's lock, which its living process holds (a pid check would
    misjudge a process in another pid namespace sharing /tmp)."""
    import subprocess as sp

    from orchestrator.remote import pipestream
    stale = tmp_path / "tune-remote-ssh-111-abc"          # its process was killed: nobody holds the lock
    stale.mkdir()
    (stale / ".lock").write_text("")
    (stale / "x.log").write_text("left by a killed run")
    alive = tmp_path / "tune-remote-ssh-222-def"          # held by a living process (any pid, any namespace)
    alive.mkdir()
    (alive / ".lock").write_text("")
    holder = sp.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1]); "
                       "fcntl.flock(f, fcntl.LOCK_EX); print(1, flush=True); time.sleep(60)", str(alive / ".lock")],
                      stdout=sp.PIPE)
    try:
        assert holder.stdout.readline() == b"1\n"
        other = tmp_path / "tune-remote-ssh-nolock"          # not made by tune-remote: no lock, left alone
        other.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        monkeypatch.setattr(pipestream, "_log_dir", [])
        log = pipestream.new_log()
        assert not stale.exists() and alive.is_dir() and other.is_dir()
        mine = os.path.dirname(log)
        assert mine.startswith(str(tmp_path / f"tune-remote-ssh-{os.getpid()}-"))
        assert os.path.dirname(pipestream.new_log()) == mine      # one dir per process
        assert pipestream.read_log(log) == "" and not os.path.exists(log)
        pipestream._sweep(str(tmp_path))                            # our own dir: its lock is held by us
        assert os.path.isdir(mine)
    finally:
        holder.kill()
        holder.wait()
