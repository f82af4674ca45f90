"""The persistent helper channel (remote/channel.py) over a local process: a new channel's first request goes
out before the helper's hello comes back (one round trip fewer per CLI command), and a helper that could not
start (not pushed yet) is pushed and sent the request again."""

from orchestrator.remote.detached import NodeHelper
from orchestrator.remote.local import LocalTransport


class _Recording(LocalTransport):
    def __init__(self):
        super().__init__()
        self.events = []

    def open_stream(self, cmd):
        stream = super().open_stream(cmd)
        events = self.events
        send, recv = stream.send, stream.recv

        def sending(data):
            events.append(("send", data[:40]))
            send(data)

        def receiving(timeout):
            chunk = recv(timeout)
            if chunk:
                events.append(("recv", chunk[:40]))
            return chunk
        stream.send, stream.recv = sending, receiving
        events.append(("open", None))
        return stream


def test_the_first_request_of_a_new_channel_is_sent_before_the_hello_is_read(tmp_path):
    t = _Recording()
    helper = NodeHelper(t, base_dir=str(tmp_path / "helpers"))
    try:
        assert helper.call("version")["ok"]          # not pushed yet: the first helper exits, push, again
        assert helper.helpers_started == 1 and helper.channel.requests == 1
        opens = [i for i, e in enumerate(t.events) if e[0] == "open"]
        assert len(opens) == 2
        last = t.events[opens[-1]:]
        kinds = [k for k, _ in last]
        assert kinds[:2] == ["open", "send"], kinds              # the request went out at once
        assert b'"hello"' in b"".join(d for k, d in last if k == "recv")
        t.events.clear()
        assert helper.call("version")["ok"]                      # the open channel: one send, no hello
        assert [k for k, _ in t.events][0] == "send" and helper.channel.requests == 2
    finally:
        helper.close()


def test_a_shared_base_dir_owned_by_someone_else_still_gets_the_persistent_channel():
    """An audit found that when /tmp/tune-remote belonged to another user, the helper's refusal was read as
    "cannot run persistently": every op went by exec (~144 ms a poll instead of ~1 ms) and every new CLI
    process started over. The refusal now moves the channel to /tmp/tune-remote-<uid> at once."""
    import json as _json

    from orchestrator.remote.detached import NodeHelper
    from orchestrator.remote.transport import CommandResult, TransportBase
    refusal = _json.dumps({"ok": False, "untrusted": True, "uid": 1000, "error": "refusing"}).encode() + b"\n"

    class Stream:
        def __init__(self, data):
            self.data = [data, b""]

        def send(self, b):
            pass

        def recv(self, t):
            return self.data.pop(0) if self.data else b""

        def stderr(self):
            return b""

        def exit_code(self):
            return 0

        def close(self):
            pass

    class T(TransportBase):
        label = "fake/ctr"
        streams = True

        def __init__(self):
            self.opened, self.execs, self.pushed = [], 0, []

        def open_stream(self, cmd):
            argv = " ".join(cmd.argv)
            self.opened.append(argv)
            if "/tmp/tune-remote/" in argv:
                return Stream(refusal)
            return Stream(_json.dumps({"id": 0, "ok": True, "hello": True}).encode() + b"\n"
                          + _json.dumps({"id": 1, "ok": True, "version": "x"}).encode() + b"\n")

        def run(self, cmd, stdin=None, timeout=None, check=True):
            self.execs += 1
            self.pushed.append(cmd.argv[-1])
            return CommandResult(cmd, 0, b"", b"")

    t = T()
    h = NodeHelper(t)
    assert h.call("version")["version"] == "x"
    assert h.base_dir == "/tmp/tune-remote-1000" and h.helpers_started == 1
    assert len(t.opened) == 2 and "/tmp/tune-remote-1000/" in t.opened[1]
    assert t.execs == 1 and t.pushed == [f"/tmp/tune-remote-1000/helper-{h.version}"]     # the push only


_SERVE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from orchestrator.nodeside import channel
def run_op(op, req, timeout_s):
    return {"ok": True, "op": op}
def preload():
    import os
    with open(sys.argv[2] + ".tmp", "w") as fh:
        fh.write("preloaded")
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])   # the test waits for the name: never half-written
channel.serve(run_op, {"id": 0, "ok": True, "hello": True}, 30, preload=preload)
"""


def _serve(tmp_path, stdin_text: str):
    import subprocess
    import sys
    from pathlib import Path

    import orchestrator
    marker = tmp_path / "preloaded"
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, str(Path(orchestrator.__file__).parents[1]), str(marker)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdin.write(stdin_text.encode())
    proc.stdin.flush()
    return proc, marker


def test_a_helper_started_ahead_of_its_first_request_preloads_while_it_waits(tmp_path):
    import json
    import time
    proc, marker = _serve(tmp_path, "")
    try:
        assert json.loads(proc.stdout.readline())["hello"]
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)        # polls a condition (the marker), bounded: not a synchronising sleep
        assert marker.read_text() == "preloaded"
        proc.stdin.write(b'{"id": 1, "op": "version", "req": {}}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"ok": True, "op": "version", "id": 1}
    finally:
        proc.kill()
        proc.wait()


def test_a_request_sent_with_the_start_is_answered_as_before(tmp_path):
    import json
    proc, _ = _serve(tmp_path, '{"id": 7, "op": "status", "req": {}}\n')
    try:
        assert json.loads(proc.stdout.readline())["hello"]
        assert json.loads(proc.stdout.readline()) == {"ok": True, "op": "status", "id": 7}
    finally:
        proc.kill()
        proc.wait()
