"""remote/transport.get_file: a file's bytes to a writer as they arrive (fetch's copy, issue 9)."""

import os

from orchestrator.remote.local import LocalTransport
from orchestrator.remote.transport import get_file


class _NoStreams:
    """A transport without open_stream (one run)."""

    def __init__(self):
        self.inner = LocalTransport()
        self.label = "no-streams"

    def run(self, cmd, **kw):
        return self.inner.run(cmd, **kw)


def test_a_big_file_arrives_in_pieces_over_a_stream_and_whole_over_run(tmp_path):
    src = tmp_path / "big.bin"
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    for transport, many in ((LocalTransport(), True), (_NoStreams(), False)):
        pieces = []
        err = get_file(transport, str(src), pieces.append)
        assert err == b""
        assert b"".join(pieces) == data
        assert (len(pieces) > 1) is many       # a stream never holds the whole file


def test_a_missing_file_writes_nothing_and_returns_why(tmp_path):
    for transport in (LocalTransport(), _NoStreams()):
        pieces = []
        err = get_file(transport, str(tmp_path / "gone.csv"), pieces.append)
        assert b"".join(pieces) == b""
        assert b"gone.csv" in err and b"No such file" in err
