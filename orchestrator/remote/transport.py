"""The one transport protocol: run a Cmd (bytes in, bytes out), put bytes, get bytes, close; and every
optional ability the code uses, declared (``Transport``) with its default (``TransportBase``): nothing probes
a transport for what it can do."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Callable, Protocol

from ..errors import CommandTimeout, ConnectionLost, RemoteCommandError
from . import trace
from .shell import Cmd, display, sh


@dataclass(frozen=True)
class CommandResult:
    cmd: Cmd
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class TransportError(ConnectionLost):
    """The transport (not the command) failed: connection dropped, a dead path, EOF."""


class PathSilent(TransportError):
    """Nothing came back within the pings' budget on a connection that still looks open (a black hole)."""


class Stream(Protocol):
    """A long-lived remote process on one channel: bytes in, bytes out (the persistent helper)."""

    def send(self, data: bytes) -> None: ...

    def recv(self, timeout: float) -> bytes | None:
        """Some stdout bytes; None if none came within ``timeout``; b"" at EOF."""

    def stderr(self) -> bytes: ...

    def exit_code(self) -> int | None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What every transport offers. Wrapping transports (docker exec, srun, a pool's view) hold another
    transport (``inner``). The optional abilities are capabilities with defaults (``TransportBase``)."""

    label: str
    streams: bool               # open_stream works; else the node helper runs one exec per op
    shared: bool                # a pool's view of a connection others use too (remote/pool.py)
    round_trips: int            # channels opened and commands run over it (a job's round trips)
    inner: "Transport | None"   # the transport it wraps, if it wraps one
    container: str | None       # the docker container it runs commands in, if it is a docker exec

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult: ...

    def open_stream(self, cmd: Cmd) -> Stream: ...     # NotImplementedError unless ``streams``

    def connect(self) -> None: ...      # connect now (a refused connection: an error before any state)

    def path_silent(self) -> None: ...  # nothing comes back on a connection that looks open: let it go

    def drop(self) -> None: ...         # a shared one's path went silent: close it as it is now, for all

    def close(self) -> None: ...


class TransportBase:
    """The defaults of ``Transport``'s optional abilities: no streams, not shared, connects on first use."""

    label = ""
    streams = False
    shared = False
    round_trips = 0
    inner: "Transport | None" = None
    container: str | None = None

    def open_stream(self, cmd: Cmd) -> Stream:
        raise NotImplementedError(f"{self.label} has no long-lived channels")

    def connect(self) -> None:
        pass

    def path_silent(self) -> None:
        self.close()

    def drop(self) -> None:
        self.path_silent()

    def close(self) -> None:
        pass


def check_result(result: CommandResult) -> CommandResult:
    if not result.ok:
        tail = (result.err_text or result.text).strip().splitlines()[-3:]
        raise RemoteCommandError(
            f"remote command failed (exit {result.exit_code}): {display(result.cmd)[:200]}"
            + (f": {' | '.join(tail)}" if tail else ""),
            result=result,
        )
    return result


_PUT_SCRIPT = 'set -e; d=$(dirname "$1"); mkdir -p "$d"; t="$1.tr-tmp.$$"; cat > "$t"; ' \
              'chmod "$2" "$t"; mv -f "$t" "$1"'


def put_bytes(transport: Transport, data: bytes, remote_path: str, mode: str = "644",
              timeout: float | None = 120) -> None:
    """Write a file atomically (temp name + rename) through any transport."""
    transport.run(sh(_PUT_SCRIPT, remote_path, mode), stdin=data, timeout=timeout)


_REGULAR = '[ -f "$1" ] && [ ! -L "$1" ] || { echo "not a regular file: $1" >&2; exit 1; }; '
NO_GZIP = "@@tune-remote: no gzip@@"
# zlib's fastest level: a text log shrinks ~5-10x at ~250 MB/s a core; pigz (where installed) on every core.
# Fed by cat: gzip reading the file itself warns on stderr when a log grows meanwhile; GZIP (env) would add
# a deprecation warning
_GZIP = ('unset GZIP; z=gzip; command -v pigz >/dev/null 2>&1 && z=pigz; '
         'command -v "$z" >/dev/null 2>&1 || { echo "' + NO_GZIP + '" >&2; exit 127; }; cat -- "$1" | "$z" -1 -c')
INFLATE_STEP = 1 << 20     # inflated per call: a chunk of a hostile stream never becomes gigabytes at once


_GZIP_STREAM = "gzip stream"


class _GzipStreamError(Exception):
    pass


def get_file(transport: Transport, remote_path: str, write: Callable[[bytes], object], timeout: float = 600,
             *, regular_only: bool = False, compress: bool = False) -> bytes:
    """A remote file's bytes to ``write`` as they arrive (``cat`` on a stream: nothing held in memory; one
    ``run`` where the transport has no streams); returns what ``cat`` said on stderr (why it stopped
    early, if it did). The caller verifies what it got (fetch: sha256 against the node's manifest).
    ``regular_only``: refuse (stderr) anything but a regular file that is not a symlink (a FIFO, a device).
    ``compress``: ``gzip -1`` on the node (pigz where installed), inflated here at most INFLATE_STEP bytes at
    a time (``write`` still gets the file's own bytes); a node without gzip, or a stream that does not
    inflate whole (one gzip member, nothing after it), says so in the returned stderr (``gzip_failed``)."""
    if compress:
        cmd = sh((_REGULAR if regular_only else "") + _GZIP, remote_path)
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

        def sink(chunk: bytes) -> None:
            while chunk:
                if inflate.eof:
                    raise _GzipStreamError("data after the end of the gzip stream")
                write(inflate.decompress(chunk, INFLATE_STEP))
                chunk = inflate.unconsumed_tail
            if inflate.unused_data:
                raise _GzipStreamError("data after the end of the gzip stream")
    else:
        cmd = sh(_REGULAR + 'exec cat -- "$1"', remote_path) if regular_only else Cmd(("cat", "--", remote_path))
        sink = write
    opener = transport.open_stream if transport.streams else None
    with trace.span(transport.label, "stream " + trace.argv_head(cmd.argv)):
        if not compress:
            return _get_file(transport, cmd, opener, sink, timeout)
        try:
            err = _get_file(transport, cmd, opener, sink, timeout)
            if not err:
                write(inflate.flush())
                if not inflate.eof:
                    raise _GzipStreamError("it ended early")
        except (zlib.error, _GzipStreamError) as exc:
            return f"{_GZIP_STREAM} from {remote_path}: {exc}".encode()
    return err


def gzip_failed(err: bytes) -> bool:
    """``get_file(compress=True)`` failed for gzip's sake (none on the node, a stream that does not inflate):
    the same file read plain can succeed."""
    return NO_GZIP.encode() in err or _GZIP_STREAM.encode() in err


def _get_file(transport, cmd, opener, write, timeout):
    if opener is None:
        result = transport.run(cmd, timeout=timeout, check=False)
        write(result.stdout)
        return result.stderr
    stream = opener(cmd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            chunk = stream.recv(deadline - time.monotonic())
            if chunk is None:
                raise CommandTimeout(f"copying {cmd.argv[-1]} from {transport.label} took over {timeout:g}s",
                                     hint="run `tune-remote fetch` again")
            if not chunk:
                return stream.stderr()
            write(chunk)
    finally:
        stream.close()
