"""remote/pool.py: a campaign's targets on one node borrow one connection (issue 9)."""

from __future__ import annotations

from orchestrator.remote.pool import Borrowed, HostPool
from orchestrator.remote.shell import Cmd
from orchestrator.remote.ssh import SshTarget, SshTransport
from orchestrator.remote.transport import CommandResult, get_file


class FakeSsh:
    def __init__(self, label="n1", streams=True):
        self.label = label
        self.closed = 0
        self.ran = []
        if streams:
            self.open_stream = lambda cmd: self.ran.append(("stream", cmd)) or object()

    def run(self, cmd, *, stdin=None, timeout=None, check=True):
        self.ran.append(("run", cmd))
        return CommandResult(cmd, 0, b"data", b"")

    def close(self):
        self.closed += 1


def test_one_transport_per_key_each_view_counting_its_own_round_trips():
    made = []
    pool = HostPool()

    def make():
        made.append(FakeSsh())
        return made[-1]

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


def test_a_view_offers_streams_only_where_its_transport_has_them():
    """get_file & co. fall back to one run when a transport has no streams: a view must not hide that."""
    plain = Borrowed(FakeSsh(streams=False))
    assert getattr(plain, "open_stream", None) is None
    got = []
    get_file(plain, "/x", got.append)
    assert got == [b"data"] and plain.round_trips == 1
    assert getattr(Borrowed(FakeSsh()), "open_stream", None) is not None


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
    assert a is not b and a.host.inner is b.host.inner is other.host.inner     # one connection for the node
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
