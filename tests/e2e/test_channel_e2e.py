"""The persistent helper channel (issue 9) end to end: one long-lived helper per container over one SSH
channel; killed mid-request, black-holed and healed, timing out idle. The node's truth is read in the
container (its process table, the tuner's launch counter, the files)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.test_reliability_e2e import Bed, desc, finish
from tests.e2e.test_faults_e2e import _stderr_lines
from tests.fake_remote.provision import poll

pytestmark = pytest.mark.e2e


def helper_pids(bed: Bed) -> list[int]:
    """The persistent helpers serving in the container (python3 -u .../node_helper.py --serve)."""
    return [p["pid"] for p in bed.c.processes()
            if "node_helper.py" in p["args"] and "--serve" in p["args"] and p["state"] != "Z"]


def test_a_whole_run_uses_one_helper_on_one_channel(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    stats = bed.state()["remote"]["stats"][-1]
    assert stats["helpers_started"] == 1, stats
    # every request went through the one channel: SSH channels opened = the helper's + the file transfers;
    # a batch request carries several ops in one round trip (prepare sends two)
    assert stats["round_trips"] >= stats["helper_requests"]
    assert sum(stats["helper_ops"].values()) >= stats["helper_requests"] + 2
    # the first long poll rode with the launch: one round trip for both
    assert stats["helper_ops_batched"]["launch"] == stats["helper_ops_batched"]["status"] == 1, stats
    assert helper_pids(bed) == []           # the CLI exited: the channel closed, the helper with it
    bed.assert_logs_identical()


def test_helper_killed_mid_request_is_replaced_and_the_job_never_notices(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.env["TUNE_REMOTE_POLL_S"] = "3"     # 3 s long polls: the helper is inside a request all the time
    bed.c.slow(1.0)                         # the tuning outlasts the faults, however slow the machine
    proc = bed.popen(*bed.run_args())
    err = _stderr_lines(proc)
    try:
        bed.wait_tuning()
        killed = []
        for _ in range(2):
            poll(lambda: helper_pids(bed) or proc.poll() is not None, timeout=30, what="a serving helper")
            pids = helper_pids(bed)
            assert len(pids) == 1, pids
            bed.c.exec("kill", "-KILL", str(pids[0]))
            killed.append(pids[0])
            poll(lambda: [p for p in helper_pids(bed) if p not in killed] or proc.poll() is not None,
                 timeout=30, what="a new helper after the kill")
            # the request the helper died under was answered by the new one (the laptop saved its poll):
            # the next kill hits a later request
            saved = (bed.job_dir / "state.json").stat().st_mtime_ns
            poll(lambda: (bed.job_dir / "state.json").stat().st_mtime_ns != saved or proc.poll() is not None,
                 timeout=30, what="the next poll to be answered")
        bed.c.slow(0.0)
        rc, out, errtext = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, "".join(err)[-3000:]
    assert not any("retrying" in line for line in err), "".join(err)     # transparent: no back-off
    st = bed.state()
    assert st["state"] == "succeeded" and len(bed.c.launches()) == 1
    assert st["remote"]["stats"][-1]["helpers_started"] >= 3
    bed.assert_logs_identical()


def test_black_holed_channel_is_declared_dead_then_healed_and_the_idle_helper_exits(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.env.update(TUNE_REMOTE_PING_S="1", TUNE_REMOTE_HELPER_IDLE_S="3")
    bed.c.slow(1.0)                         # the tuning outlasts the faults, however slow the machine
    proc = bed.popen(*bed.run_args())
    err = _stderr_lines(proc)
    try:
        bed.wait_tuning()
        poll(lambda: helper_pids(bed) or proc.poll() is not None, timeout=30, what="a serving helper")
        before = helper_pids(bed)
        node.proxy.pause()                   # every byte frozen, nothing closed: a silent network drop
        try:
            poll(lambda: any("connection presumed dead" in line for line in err) or proc.poll() is not None,
                 timeout=30, what="the laptop to declare the black-holed channel dead")
            # the helper behind the frozen channel gets no request: it exits on its idle timeout, although
            # its channel (docker exec, sshd session) is still open
            poll(lambda: not set(before) & set(helper_pids(bed)), timeout=30,
                 what="the stranded helper to exit on its idle timeout")
            assert proc.poll() is None, "".join(err)[-3000:]
        finally:
            node.proxy.resume()
        bed.c.slow(0.0)
        rc, out, errtext = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, "".join(err)[-3000:]
    st = bed.state()
    assert st["state"] == "succeeded" and len(bed.c.launches()) == 1
    bed.assert_logs_identical()


def test_idle_helper_times_out_and_the_next_request_starts_a_new_one(node, tmp_path, monkeypatch):
    from orchestrator.context import Target
    from orchestrator.inventory import load_inventory

    bed = Bed(node, tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_HELPER_IDLE_S", "1")
    spec = load_inventory(str(bed.inv)).node(node.alias)
    target = Target(spec, spec.container(bed.c.name))
    try:
        first = target.helper.call("version")
        pid = target.helper.channel.hello["pid"]
        assert helper_pids(bed) == [pid]
        poll(lambda: pid not in helper_pids(bed), timeout=20, what="the idle helper to exit by itself")
        again = target.helper.call("version")          # transparently: a new helper, same answer
        assert again["version"] == first["version"]
        assert target.helper.helpers_started == 2
        assert target.helper.channel.hello["pid"] != pid
    finally:
        target.close()
        target.helper.close()
    poll(lambda: helper_pids(bed) == [], timeout=20, what="the helper to exit when its channel closes")


def test_without_a_persistent_channel_every_op_is_one_exec(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.env["TUNE_REMOTE_HELPER_CHANNEL"] = "0"
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    stats = bed.state()["remote"]["stats"][-1]
    assert stats["helpers_started"] == 0
    assert stats["round_trips"] >= stats["helper_requests"]      # one exec per request (a batch is one)
    bed.assert_logs_identical()


def test_copies_over_one_connection_never_deadlock_in_a_rekey_and_the_servers_rekeys_just_work(
        node, monkeypatch, caplog):
    import logging

    import paramiko

    from orchestrator.remote.shell import Cmd
    from orchestrator.remote.ssh import SshTarget, SshTransport
    from orchestrator.remote.transport import get_file
    # paramiko starts a rekey itself after 512 MiB (here: after every MiB); when a channel closes while that
    # rekey runs, its transport thread deadlocks (paramiko #822: "Key-exchange timed out waiting for key
    # negotiation" 30 s later). A file a little over 1 MiB ends right after each such rekey starts.
    monkeypatch.setattr(paramiko.packet.Packetizer, "REKEY_BYTES", 1 << 20)
    data = os.urandom((1 << 20) + 50_000)
    src = node.dir / "rekey.bin"
    src.write_bytes(data)
    os.chmod(src, 0o644)
    caplog.set_level(logging.DEBUG, logger="paramiko.transport")

    def copies(n: int) -> None:
        t = SshTransport(SshTarget(node.alias, None, None, None, str(node.ssh_config_file)))
        try:
            for _ in range(n):       # a file copy (its channel closes at the end) and a command, each time
                got = []
                assert get_file(t, str(src), got.append, timeout=60) == b""
                assert b"".join(got) == data
                assert t.run(Cmd(("true",)), timeout=60).ok
        finally:
            t.close()

    copies(40)                                    # the transport leaves rekeying to the server ...
    node.sshd_extra.append("RekeyLimit 1M")       # ... and a server that rekeys after every MiB is fine
    node.restart_sshd()
    caplog.clear()
    copies(40)
    kex_done = [r for r in caplog.records if "Switch to new keys" in r.getMessage()]
    assert len(kex_done) > 10, len(kex_done)      # the first key exchange + the server's rekeys
