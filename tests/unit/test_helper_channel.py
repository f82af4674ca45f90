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
