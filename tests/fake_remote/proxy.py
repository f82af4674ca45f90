"""A TCP fault-injection proxy put in front of each test node's sshd.

Runs an asyncio loop in a daemon thread of the test process; every public method is thread-safe and
returns once the change is in effect.

    proxy = FaultProxy(target_port=sshd_port).start()
    proxy.port                      # connect here instead of sshd
    proxy.set_latency(0.05)         # +50 ms one way, each direction (no bandwidth cap)
    proxy.set_bandwidth(1_000_000)  # bytes/s per direction per connection (None = unlimited)
    proxy.pause()/resume()          # freeze every byte without closing anything (a dead path)
    proxy.cut_all()                 # RST every open connection now; new ones are still accepted
    proxy.refuse_new(5.0)           # connection refused for 5 s (None = until accept_new())
    proxy.reset_new(5.0)            # accept then RST at once for 5 s (banner never arrives)
    proxy.active                    # number of open proxied connections
    proxy.wait_active(1, timeout=5) # poll until at least/exactly... (see docstring)

Run standalone (used by ``python -m tests.fake_remote up --proxy``):
    python -m tests.fake_remote.proxy --target-port 2222 [--listen-port 0] [--control FILE]
with ``--control FILE`` a JSON file re-read every 0.2 s: {"latency": s, "paused": bool,
"cut_seq": int (increment to cut), "refuse": bool, "bandwidth": int|null}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time


class _Conn:
    __slots__ = ("client_w", "server_w", "closed")

    def __init__(self, client_w, server_w):
        self.client_w = client_w
        self.server_w = server_w
        self.closed = False

    def abort(self):
        if self.closed:
            return
        self.closed = True
        for w in (self.client_w, self.server_w):
            with contextlib.suppress(Exception):
                # SO_LINGER 0 -> RST instead of FIN: the peer sees "connection reset" like a real cut.
                sock = w.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            with contextlib.suppress(Exception):
                w.transport.abort()


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1",
                 listen_host: str = "127.0.0.1", listen_port: int = 0):
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = listen_port
        self.latency = 0.0
        self.bandwidth: int | None = None
        self.connections_total = 0
        self.cuts = 0
        self.bytes_up = 0    # client -> server
        self.bytes_down = 0  # server -> client
        self.pending_bytes = 0  # read from one side, not yet written to the other (latency, pause)
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._flowing: asyncio.Event | None = None
        self._reset_new = False
        self._timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FaultProxy":
        ready = threading.Event()

        def main():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._flowing = asyncio.Event()
            self._flowing.set()
            self._loop.run_until_complete(self._listen())
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=main, name=f"fault-proxy->{self.target[1]}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def stop(self) -> None:
        if not self._loop or not self._thread:
            return

        async def shutdown():
            self._cancel_timer()
            self._close_listener()
            for c in list(self._conns):
                c.abort()
            self._conns.clear()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------ faults
    def set_latency(self, seconds: float) -> None:
        self.latency = max(0.0, float(seconds))

    def set_bandwidth(self, bytes_per_s: int | None) -> None:
        self.bandwidth = int(bytes_per_s) if bytes_per_s else None

    def pause(self) -> None:
        """Stop forwarding bytes on every connection (they stay open: looks like a dead network path)."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def cut_all(self) -> int:
        """Reset every open connection now. Returns how many were cut. New connections are still accepted."""
        async def cut():
            conns = list(self._conns)
            for c in conns:
                c.abort()
            self._conns.clear()
            self.cuts += len(conns)
            return len(conns)
        return self._call(cut())

    def refuse_new(self, seconds: float | None = None) -> None:
        """Close the listening socket (clients get ECONNREFUSED) for ``seconds`` (None: until accept_new)."""
        async def refuse():
            self._cancel_timer()
            self._close_listener()
            if seconds is not None:
                self._timer = self._loop.call_later(seconds, lambda: asyncio.ensure_future(self._relisten()))
        self._call(refuse())

    def reset_new(self, seconds: float | None = None) -> None:
        """Accept new connections and reset them at once, for ``seconds`` (None: until accept_new)."""
        async def reset():
            self._cancel_timer()
            self._reset_new = True
            if seconds is not None:
                self._timer = self._loop.call_later(seconds, lambda: setattr(self, "_reset_new", False))
        self._call(reset())

    def accept_new(self) -> None:
        """Undo refuse_new / reset_new now."""
        async def accept():
            self._cancel_timer()
            self._reset_new = False
            await self._relisten()
        self._call(accept())

    def heal(self) -> None:
        """Remove every fault (latency, bandwidth, pause, refusal)."""
        self.set_latency(0)
        self.set_bandwidth(None)
        self.resume()
        self.accept_new()

    # ------------------------------------------------------------------ observation
    @property
    def active(self) -> int:
        return len(self._conns)

    @property
    def listening(self) -> bool:
        return self._server is not None

    def wait_active(self, at_least: int = 1, timeout: float = 10.0) -> int:
        """Poll (no sleep-based sync) until at least ``at_least`` connections are open."""
        deadline = time.monotonic() + timeout
        while self.active < at_least:
            if time.monotonic() > deadline:
                raise TimeoutError(f"proxy: {self.active} active connections, wanted >= {at_least}")
            time.sleep(0.02)
        return self.active

    # ------------------------------------------------------------------ internals
    def _call(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _cancel_timer(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close_listener(self):
        if self._server is not None:
            self._server.close()   # do not await wait_closed(): on 3.12+ it waits for all clients
            self._server = None

    async def _listen(self):
        self._server = await asyncio.start_server(self._handle, self.listen_host, self.port,
                                                  reuse_address=True, backlog=128)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relisten(self):
        if self._server is None:
            await self._listen()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter):
        self.connections_total += 1
        if self._reset_new:
            _Conn(cwriter, cwriter).abort()
            return
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            _Conn(cwriter, cwriter).abort()
            return
        for w in (cwriter, swriter):
            with contextlib.suppress(OSError):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(cwriter, swriter)
        self._conns.add(conn)
        try:
            await asyncio.gather(self._pipe(creader, swriter, conn, up=True),
                                 self._pipe(sreader, cwriter, conn, up=False))
        except asyncio.CancelledError:
            # stop() cancels it: end normally, as a cancelled client_connected_cb task makes Python 3.11's
            # StreamReaderProtocol print "Exception in callback ... CancelledError" at every teardown
            pass
        finally:
            self._conns.discard(conn)
            if not conn.closed:
                conn.closed = True
                for w in (cwriter, swriter):
                    with contextlib.suppress(Exception):
                        w.close()

    async def _pipe(self, reader, writer, conn: _Conn, *, up: bool):
        queue: asyncio.Queue = asyncio.Queue()

        async def read_side():
            try:
                while not conn.closed:
                    data = await reader.read(65536)
                    self.pending_bytes += len(data)
                    await queue.put((time.monotonic() + self.latency, data))
                    if not data:
                        return
            except (ConnectionError, OSError):
                await queue.put((0.0, None))

        async def write_side():
            try:
                while True:
                    due, data = await queue.get()
                    if data is None:          # read error: tear the whole connection down
                        conn.abort()
                        return
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await self._flowing.wait()
                    if conn.closed:
                        return
                    if not data:
                        with contextlib.suppress(Exception):
                            if writer.can_write_eof():
                                writer.write_eof()
                        return
                    if self.bandwidth:
                        await asyncio.sleep(len(data) / self.bandwidth)
                    writer.write(data)
                    self.pending_bytes -= len(data)
                    await writer.drain()
                    if up:
                        self.bytes_up += len(data)
                    else:
                        self.bytes_down += len(data)
            except (ConnectionError, OSError):
                conn.abort()

        r = asyncio.ensure_future(read_side())
        try:
            await write_side()
        finally:
            r.cancel()
            with contextlib.suppress(BaseException):
                await r


# ---------------------------------------------------------------------- standalone process

def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fake_remote.proxy")
    ap.add_argument("--target-host", default="127.0.0.1")
    ap.add_argument("--target-port", type=int, required=True)
    ap.add_argument("--listen-port", type=int, default=0)
    ap.add_argument("--control", help="JSON control file re-read every 0.2 s")
    ap.add_argument("--port-file", help="write the listening port here once ready")
    args = ap.parse_args(argv)
    proxy = FaultProxy(args.target_port, args.target_host, listen_port=args.listen_port).start()
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(proxy.port))
        os.replace(tmp, args.port_file)
    print(f"proxy listening on 127.0.0.1:{proxy.port} -> {args.target_host}:{args.target_port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    last_cut = None
    refused = False
    while not stop.wait(0.2):
        if not args.control:
            continue
        try:
            with open(args.control) as fh:
                ctl = json.load(fh)
        except (OSError, ValueError):
            continue
        proxy.set_latency(float(ctl.get("latency") or 0))
        proxy.set_bandwidth(ctl.get("bandwidth"))
        (proxy.pause if ctl.get("paused") else proxy.resume)()
        cut = ctl.get("cut_seq")
        if last_cut is None:
            last_cut = cut
        elif cut != last_cut:
            last_cut = cut
            proxy.cut_all()
        want_refuse = bool(ctl.get("refuse"))
        if want_refuse != refused:
            refused = want_refuse
            proxy.refuse_new(None) if refused else proxy.accept_new()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
