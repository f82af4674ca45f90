"""remote/transport.get_file: a file's bytes to a writer as they arrive (fetch's copy, issue 9)."""

import os
import shutil

from orchestrator.remote.local import LocalTransport
from orchestrator.remote.transport import TransportBase, get_file


class _NoStreams(TransportBase):
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


def _text(n):
    """A log-like text of about n bytes (what fetch copies most: logs, CSVs)."""
    line = b"[aiter] shape is M:%d, N:7168, K:2048, not found tuned config in /x/a8w8_blockscale_tuned_gemm.csv\n"
    out, size = [], 0
    while size < n:
        out.append(line % len(out))
        size += len(out[-1])
    return b"".join(out)


class _Shell(TransportBase):
    """A transport whose commands run in a shell with a given PATH (no gzip on it, say)."""

    def __init__(self, path):
        self.inner, self.path, self.label = LocalTransport(), path, "shell"

    def run(self, cmd, **kw):
        from orchestrator.remote.shell import Cmd
        return self.inner.run(Cmd(cmd.argv, env={"PATH": self.path}), **kw)


def test_compressed_the_writer_still_gets_the_files_own_bytes(tmp_path):
    src = tmp_path / "step.log"
    data = _text(3 << 20)
    src.write_bytes(data)
    for transport in (LocalTransport(), _NoStreams()):
        for regular_only in (False, True):
            pieces = []
            assert get_file(transport, str(src), pieces.append, compress=True, regular_only=regular_only) == b""
            assert b"".join(pieces) == data


def test_compressed_a_node_without_gzip_or_a_broken_stream_says_so(tmp_path):
    src = tmp_path / "step.log"
    src.write_bytes(_text(1 << 16))
    pieces = []
    from orchestrator.remote.transport import NO_GZIP
    bare = tmp_path / "bare-bin"                            # sh and cat, no gzip nor pigz
    bare.mkdir()
    for tool in ("sh", "cat"):
        (bare / tool).symlink_to(shutil.which(tool))
    err = get_file(_Shell(str(bare)), str(src), pieces.append, compress=True)
    assert NO_GZIP.encode() in err and b"".join(pieces) == b""

    class Garbage(_NoStreams):
        def run(self, cmd, **kw):
            from orchestrator.remote.transport import CommandResult
            return CommandResult(cmd, 0, b"\x1f\x8b not gzip at all", b"")

    err = get_file(Garbage(), str(src), pieces.append, compress=True)
    assert b"gzip stream" in err

    class Cut(_NoStreams):              # a stream that stops half way (the connection, a killed gzip)
        def run(self, cmd, **kw):
            res = self.inner.run(cmd, **kw)
            from orchestrator.remote.transport import CommandResult
            return CommandResult(cmd, 0, res.stdout[: len(res.stdout) // 2], b"")

    assert b"ended early" in get_file(Cut(), str(src), lambda b: None, compress=True)


def test_compressed_pigz_is_used_where_installed(tmp_path):
    """pigz compresses on every core of the node (gzip on one): same stream format, preferred when present."""
    src = tmp_path / "step.log"
    data = _text(1 << 20)
    src.write_bytes(data)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "pigz-ran"
    (bin_dir / "pigz").write_text(f"#!/bin/sh\ntouch {marker}\nexec gzip \"$@\"\n")
    (bin_dir / "pigz").chmod(0o755)
    pieces = []
    assert get_file(_Shell(f"{bin_dir}:/usr/bin:/bin"), str(src), pieces.append, compress=True) == b""
    assert b"".join(pieces) == data and marker.exists()


class _Gz(_NoStreams):
    """A node whose gzip stream is made up (hostile, or broken)."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def run(self, cmd, **kw):
        from orchestrator.remote.transport import CommandResult
        return CommandResult(cmd, 0, self.stream, b"")


def test_compressed_a_small_stream_never_inflates_to_more_than_a_step_at_a_time(tmp_path):
    import gzip

    from orchestrator.remote.transport import INFLATE_STEP
    bomb = gzip.compress(b"\0" * (64 << 20), 9)            # ~64 KB on the wire, 64 MiB inflated
    biggest, total = [0], [0]

    def write(b):
        biggest[0] = max(biggest[0], len(b))
        total[0] += len(b)

    assert get_file(_Gz(bomb), "/x", write, compress=True) == b""
    assert total[0] == 64 << 20 and biggest[0] <= INFLATE_STEP


def test_compressed_data_after_the_stream_or_a_second_member_is_an_error(tmp_path):
    import gzip
    one = gzip.compress(b"first\n")
    for stream in (one + gzip.compress(b"second\n"), one + b"trailing junk"):
        assert b"after the end" in get_file(_Gz(stream), "/x", lambda b: None, compress=True)


def test_compressed_gzip_options_in_the_environment_add_no_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("GZIP", "-9")                        # gzip >= 1.10 warns that GZIP is obsolescent
    src = tmp_path / "step.log"
    src.write_bytes(_text(1 << 16))
    pieces = []
    assert get_file(LocalTransport(), str(src), pieces.append, compress=True) == b""
    assert b"".join(pieces) == src.read_bytes()


def test_an_inline_zlibbed_file_is_taken_only_at_the_size_the_manifest_gives():
    import base64
    import zlib

    from orchestrator.steps.fetch import _inline
    data = _text(100000)
    z = base64.b64encode(zlib.compress(data, 1)).decode()
    assert _inline({"size": len(data), "data_z64": z}) == data
    assert _inline({"size": len(data) - 1, "data_z64": z}) is None      # inflates past the size: not taken
    assert _inline({"size": len(data) + 1, "data_z64": z}) is None
    assert _inline({"size": 3, "data_b64": base64.b64encode(b"abc").decode()}) == b"abc"
