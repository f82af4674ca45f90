"""remote/pool.py: a campaign's targets on one node borrow one connection (issue 9)."""

from __future__ import annotations

import time

from orchestrator.remote.pool import Borrowed, HostPool
from orchestrator.remote.shell import Cmd
from orchestrator.remote.ssh import SshTarget, SshTransport
from orchestrator.remote.transport import CommandResult, TransportBase, get_file


class FakeSsh(TransportBase):
    def __init__(self, label="n1", streams=True):
        self.label = label
        self.closed = 0
        self.ran = []
        self.streams = streams

    def open_stream(self, cmd):
        self.ran.append(("stream", cmd))
        return object()

    def run(self, cmd, *, stdin=None, timeout=None, check=True):
        self.ran.append(("run", cmd))
        return CommandResult(cmd, 0, b"data", b"")

    def close(self):
        self.closed += 1


def _pool():
    """A pool, the transports it made, and its factory."""
    made = []

    def make():
        made.append(FakeSsh())
        return made[-1]

    return HostPool(), made, make


def test_one_transport_per_key_each_view_counting_its_own_round_trips():
    pool, made, make = _pool()
    a, b = pool.borrow("n1", make), pool.borrow("n1", make)
    other = pool.borrow("n2", make)
    assert len(made) == 2 and a.inner is b.inner is made[0] and other.inner is made[1] and len(pool) == 2
    a.run(Cmd(("true",)))
    a.open_stream(Cmd(("cat",)))
    b.run(Cmd(("true",)))
    assert (a.round_trips, b.round_trips) == (2, 1) and len(made[0].ran) == 3
    a.close()
    b.close()
    assert made[0].closed == 0          # a target's close leaves the connection to the pool
    pool.close()
    assert [t.closed for t in made] == [1, 1] and len(pool) == 0


def test_a_third_target_on_a_node_gets_a_second_connection():
    """Each target holds up to ~4 sessions; sshd refuses more than MaxSessions (10) on one connection."""
    pool, made, make = _pool()
    views = [pool.borrow("login", make) for _ in range(3)]
    assert len(made) == 2 and pool.connections("login") == 2
    assert views[0].inner is views[1].inner is made[0] and views[2].inner is made[1]
    views[0].close()
    views[0].close()                    # given back once
    assert pool.borrow("login", make).inner is made[0] and len(made) == 2
    assert pool.borrow("login", make).inner is made[1] and len(made) == 2
    assert pool.borrow("login", make).inner is made[2]


def test_a_view_offers_streams_only_where_its_transport_has_them():
    """get_file & co. fall back to one run when a transport has no streams: a view must not hide that."""
    plain = Borrowed(FakeSsh(streams=False))
    assert plain.streams is False
    got = []
    get_file(plain, "/x", got.append)
    assert got == [b"data"] and plain.round_trips == 1
    assert Borrowed(FakeSsh()).streams is True


def test_a_failed_connection_is_closed_only_if_no_thread_replaced_it_meanwhile():
    t = SshTransport(SshTarget("h", 22, "u", None, None))

    class Conn:
        closed = False

        def close(self):
            self.closed = True

    old, new = Conn(), Conn()
    t.conn = new                      # another thread reconnected after `old` failed
    t._drop(old)
    assert t.conn is new and not new.closed
    t._drop(new)
    assert t.conn is None and new.closed


def _runner(tmp_path):
    from orchestrator.campaign.targets import InventoryRunner
    from orchestrator.inventory import load_inventory
    inv = tmp_path / "inventory.yaml"
    inv.write_text("nodes:\n  n1:\n    local: true\n    containers:\n      c1: {}\n      c2: {}\n")
    return InventoryRunner(load_inventory(str(inv)))


def test_a_runner_lends_a_containers_target_to_one_job_after_the_other(tmp_path):
    from orchestrator.campaign.targets import TargetRef
    runner = _runner(tmp_path)
    c1, c2 = TargetRef("n1", "c1"), TargetRef("n1", "c2")
    a = runner.open(c1)
    b = runner.open(c1)                     # a is in use: another target (its own helper channel)
    other = runner.open(c2)
    assert a is not b and a.host.inner is b.host.inner        # one connection for two targets of the node,
    assert other.host.inner is not a.host.inner               # a second one for the third (MaxSessions)
    a.helper.calls, a.helper.ops["status"] = 5, 5    # the first job's requests
    a.close()
    a.close()                               # closed twice: lent once
    again = runner.open(c1)
    assert again is a and runner.open(c1) is not a
    assert again.since_mark()["helper_requests"] == 0 and again.since_mark()["helper_ops"] == {}
    again.helper.ops["launch"] += 1
    assert again.since_mark()["helper_ops"] == {"launch": 1}
    shut = []
    for t in (a, b, other):
        t.shut = lambda t=t: shut.append(t)
    runner.close()
    assert {id(t) for t in shut} >= {id(a), id(b), id(other)}



def test_the_nodes_a_plan_left_out_are_let_go_and_the_kept_ones_stay_connected(tmp_path):
    """A campaign probes every node it was given; the ones the plan leaves out (no free GPU, wrong gfx) must
    not hold a connection and a helper for the hours the campaign runs."""
    from orchestrator.campaign.targets import InventoryRunner, TargetRef
    from orchestrator.inventory import load_inventory
    inv = tmp_path / "inventory.yaml"
    inv.write_text("nodes:\n  n1:\n    local: true\n    containers: {c1: {}}\n"
                   "  n2:\n    local: true\n    containers: {c1: {}}\n")
    made = {}

    class Runner(InventoryRunner):
        def _make(self, ref):
            target = super()._make(ref)
            made[ref.node] = target.host.inner
            return target

    runner = Runner(load_inventory(str(inv)))
    closed = []
    probes = [runner.open(TargetRef(n, "c1")) for n in ("n1", "n2")]
    for node, t in made.items():
        t.close = lambda node=node: closed.append(node)
    for t in probes:
        t.close()                                   # the plan's probes are done
    runner.keep_only({"n1"})
    assert closed == ["n2"] and runner.pool.connections("n2") == 0 and runner.pool.connections("n1") == 1
    assert runner.open(TargetRef("n1", "c1")) is probes[0]       # the kept node's target (and helper) is reused
    again = runner.open(TargetRef("n2", "c1"))                    # a left-out node opened later: a new one
    assert again is not probes[1] and runner.pool.connections("n2") == 1


def test_close_unused_closes_only_connections_no_view_holds():
    pool, made, make = _pool()
    a = pool.borrow("n1", make)
    b = pool.borrow("n2", make)
    b.close()
    assert pool.close_unused() == 1 and [t.closed for t in made] == [0, 1]
    assert pool.connections("n2") == 0 and a.inner is made[0] and pool.connections("n1") == 1


class _Chan:
    pass


class _Transport:
    def __init__(self, refuse=None):
        self.refuse = refuse

    def is_active(self):
        return True

    def open_session(self, **kw):
        raise self.refuse


class _Conn:
    is_connected = True
    gateway = None

    def __init__(self, transport):
        self.transport = transport
        self.closed = False

    def close(self):
        self.closed = True


def test_a_refused_session_keeps_the_connection_its_other_sessions_use():
    """sshd's MaxSessions refuses a channel with ChannelException: retried (TransportError), not a lost
    connection: closing it would cut every other target's helper on it."""
    import paramiko
    import pytest
    from orchestrator.remote.transport import TransportError
    t = SshTransport(SshTarget("h", 22, "u", None, None))
    conn = t.conn = _Conn(_Transport(refuse=paramiko.ChannelException(2, "Connect failed")))
    for attempt in (lambda: t.run(Cmd(("true",))), lambda: t.open_stream(Cmd(("cat",)))):
        with pytest.raises(TransportError, match="refused a new SSH session"):
            attempt()
        assert t.conn is conn and not conn.closed
    t._alive_or_lost(conn)              # the server answered: alive


def test_threads_waiting_for_a_failing_connect_share_its_answer():
    """k targets on a dead node: one connection attempt's timeout, not k in a row."""
    import threading
    from orchestrator.errors import ConnectError
    t = SshTransport(SshTarget("h", 22, "u", None, None))
    release, calls, errors = threading.Event(), [], []
    lock, queued = t._conn_lock, []

    class Counting:                     # the transport's lock, counting the threads that reached it
        def __enter__(self):
            queued.append(1)
            return lock.__enter__()

        def __exit__(self, *exc):
            return lock.__exit__(*exc)

    t._conn_lock = Counting()

    def dead():
        calls.append(1)
        release.wait(10)
        raise ConnectError("cannot connect to u@h:22: timed out")

    t._connect = dead

    def one():
        try:
            t.connect()
        except ConnectError as exc:
            errors.append(exc.message)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 10
    while len(queued) < 4:              # every thread is at the lock: the first one inside, three waiting
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release.set()
    for th in threads:
        th.join(10)
    assert len(errors) == 4 and set(errors) == {"cannot connect to u@h:22: timed out"}
    assert len(calls) == 1
    t._connect = lambda: calls.append(2)   # a later connect tries again
    t.connect()
    assert calls == [1, 2]


def test_a_retry_keeps_the_lent_target_and_drops_a_shared_connection_only_when_the_path_went_silent(tmp_path):
    """NodeSession._retrying (a Ctx's session) resets the target between attempts (new helper channels): a
    lent one is not given back to the runner meanwhile (another job would get a target still in use)."""
    from orchestrator.campaign.targets import TargetRef
    from orchestrator.context import Ctx, Settings
    from orchestrator.remote.transport import PathSilent, TransportError
    from orchestrator.state import JobState
    from orchestrator.ui import Ui
    runner = _runner(tmp_path)
    ref = TargetRef("n1", "c1")
    target = runner.open(ref)
    dropped = []
    target.host.drop = lambda: dropped.append(1)
    job = JobState(job_id="j", node="n1", container="c1", variant="a8w8", created=0, request={})
    ctx = Ctx(job=job, workspace=None, target=target, settings=Settings(reconnect_s=30), ui=Ui(quiet=True),
              sleep=lambda s: None)
    failures = [TransportError("channel failed"), PathSilent("answered none of 3 pings")]

    def attempt():
        if failures:
            raise failures.pop(0)
        return "answer"

    assert ctx.session._retrying(attempt) == "answer"
    assert dropped == [1]               # only after the silent path
    assert runner.open(ref) is not target
    target.close()
    assert runner.open(ref) is target


def test_every_hop_of_a_proxyjump_chain_has_a_connect_timeout(tmp_path):
    """An audit found the bastion's socket was opened with timeout=None (fabric builds the gateway without
    one): behind a dead VPN that blocks for the kernel's SYN retries, longer than the reconnect window."""
    from orchestrator.remote.hostkeys import hops
    from orchestrator.remote.sshtarget import DEFAULT_CONNECT_TIMEOUT
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node1\n  HostName 10.255.255.1\n  User u\n  ProxyJump bastion\n"
                   "Host bastion\n  HostName 10.255.255.2\n  User b\n")
    conn = SshTransport(SshTarget("node1", None, None, None, str(cfg)))._make_connection()
    got = [(h.host, h.connect_timeout) for h in hops(conn)]
    assert len(got) == 2 and all(t == DEFAULT_CONNECT_TIMEOUT for _, t in got), got
