"""tune-remote watch end to end (issue 29): `watch --once` over a server log that grows in the container
between runs (sshd + docker exec + the simulated AITER), a rotated log, a second watch of the same NAME, and a
watch killed mid-job then run again (re-attached: one launch). No sleeps: every wait polls a condition."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from orchestrator.sim.growlog import append_misses, rotate, upgrade_rocm
from tests.e2e.test_reliability_e2e import Bed, desc
from tests.fake_remote.provision import poll

pytestmark = pytest.mark.e2e

V = "a8w8_blockscale"
A, B, C, D = (72, 512, 7168), (72, 7168, 2048), (72, 2112, 7168), (8192, 3072, 1536)
NAME = "w"


def _mnk(shapes):
    return sorted((s["m"], s["n"], s["k"]) for s in shapes)


class WatchBed(Bed):
    def __init__(self, node, tmp_path):
        super().__init__(node, tmp_path, job_id=f"watch-{NAME}-c1-{V}")
        self.log = f"{self.c.inst.logs_dir}/watch-server.log"
        self.host_log = self.c.host_path(self.log)

    def watch_args(self, *extra):
        return ["watch", "--node", self.node.alias, "--log", self.log, "--variant", V, "--name", NAME,
                "--repeats", "1", "--once", *extra]

    def once(self, *extra):
        cp = self.cli(*self.watch_args(*extra), timeout=600)
        lines = [json.loads(ln) for ln in cp.stdout.decode().splitlines() if ln.startswith("{")]
        return cp, lines

    def ledger(self) -> list[dict]:
        path = self.ws / "watch" / NAME / "ledger.jsonl"
        return [json.loads(ln) for ln in path.read_text().splitlines()]

    def job(self, job_id) -> dict:
        return json.loads((self.ws / job_id / "state.json").read_text())


def test_watch_once_over_a_growing_then_rotated_log(node, tmp_path):
    bed = WatchBed(node, tmp_path)
    append_misses(bed.host_log, V, [A, B], times=2)
    cp, out = bed.once()
    assert cp.returncode == 0, desc(cp)
    assert [j["state"] for j in out[-1]["jobs"]] == ["succeeded"], out
    first = out[-1]["jobs"][0]["job_id"]
    assert _mnk(bed.job(first)["shapes"]) == _mnk([{"m": m, "n": n, "k": k} for m, n, k in (A, B)])
    assert len(bed.c.launches()) == 1
    assert bed.cli("status", first).returncode == 0       # an ordinary job

    append_misses(bed.host_log, V, [A, C])             # A again (tuned already) and a new shape
    cp, out = bed.once()
    assert cp.returncode == 0, desc(cp)
    second = out[-1]["jobs"][0]["job_id"]
    assert _mnk(bed.job(second)["shapes"]) == [C], "the second cycle tunes only the new shape"
    assert len(bed.c.launches()) == 2

    cp, out = bed.once()                               # nothing new: nothing launched, one round trip
    assert cp.returncode == 0, desc(cp)
    assert out[-1]["jobs"] == [] and out[-1]["bytes"] == 0, out
    assert out[-1]["round_trips"] <= 2, out
    assert b"no new miss lines" in cp.stderr
    assert len(bed.c.launches()) == 2

    rotate(bed.host_log)                               # logrotate: another inode, read from its start
    append_misses(bed.host_log, V, [D])
    cp, out = bed.once()
    assert cp.returncode == 0, desc(cp)
    assert _mnk(bed.job(out[-1]["jobs"][0]["job_id"])["shapes"]) == [D]
    cycles = [e for e in bed.ledger() if e["event"] == "cycle"]
    assert [bool(e["rotated"]) for e in cycles] == [False, False, False, True]
    events = {e["event"] for e in bed.ledger()}
    assert {"cycle", "seen", "job", "promoted"} <= events and all("ts" in e for e in bed.ledger())

    old = upgrade_rocm(bed.c.host_dir, "9.9.9")        # an upgrade, seen by the same one round trip
    cp, out = bed.once()
    assert cp.returncode == 0 and out[-1]["jobs"] == [], desc(cp)
    (up,) = [e for e in bed.ledger() if e["event"] == "upgrade"]
    assert up["changed"] == {"rocm_version": [old, "9.9.9"]} and up["target"].startswith(bed.node.alias)
    # the upgrade ran a recheck of every row the earlier cycles promoted there
    promoted = sum(e["rows"] for e in bed.ledger() if e["event"] == "promoted")
    assert promoted and up["recheck"] not in ("failed", "none", "unavailable"), up
    assert (Path(up["recheck"]) / "recheck.csv").is_file() and sum(up["counts"].values()) == promoted, up


def test_watch_killed_mid_job_is_reattached_once(node, tmp_path):
    bed = WatchBed(node, tmp_path)
    bed.c.slow(0.5)
    append_misses(bed.host_log, V, [A, B, C, D])
    err = open(tmp_path / "watch.err", "wb")
    proc = bed.popen(*bed.watch_args(), stderr=err)
    try:
        bed.wait_tuning(timeout=180)
        second = bed.cli(*bed.watch_args())            # two watches of one NAME never run at once
        assert second.returncode == 1 and b"already running" in second.stderr, desc(second)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    assert bed.tuner_pids(), "the tuner died with the watch"
    bed.c.reset_control()
    cp, out = bed.once()
    assert cp.returncode == 0, desc(cp)
    assert b"re-attaching" in cp.stderr
    assert len(bed.c.launches()) == 1, bed.c.launches()     # re-attached, never launched again
    assert bed.state()["state"] == "succeeded"
    jobs = [e for e in bed.ledger() if e["event"] == "job"]
    assert [(e["job_id"], e["state"]) for e in jobs] == [(bed.job_id, "running"), (bed.job_id, "succeeded")]
    assert out[-1]["jobs"] == []                            # the cycle after it: nothing new


def test_watch_sigterm_mid_job_exits_0_and_the_next_watch_reattaches(node, tmp_path):
    bed = WatchBed(node, tmp_path)
    bed.c.slow(0.5)
    append_misses(bed.host_log, V, [A, B, C, D])
    args = [a for a in bed.watch_args() if a != "--once"] + ["--interval", "3600"]
    err = open(tmp_path / "watch.err", "wb")
    proc = bed.popen(*args, stderr=err)
    try:
        bed.wait_tuning(timeout=180)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    text = (tmp_path / "watch.err").read_text()
    assert proc.returncode == 0, text
    assert "stopped" in text and "re-attaches" in text
    assert bed.tuner_pids(), "the job did not go on on the node"
    assert bed.state()["state"] == "running"
    bed.c.reset_control()
    cp, out = bed.once()
    assert cp.returncode == 0, desc(cp)
    assert len(bed.c.launches()) == 1, bed.c.launches()
    assert bed.state()["state"] == "succeeded"


def test_watch_of_two_nodes_runs_one_campaign(make_node, tmp_path):
    import yaml
    nodes = [make_node("current", proxy=False), make_node("current", proxy=False)]
    beds = [WatchBed(n, tmp_path) for n in nodes]
    bed = beds[0]
    bed.inv.write_text(yaml.safe_dump({"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                                           "containers": {c: {} for c in n.containers}}
                                                 for n in nodes}}))
    append_misses(beds[0].host_log, V, [A, B], times=3)
    append_misses(beds[1].host_log, V, [B, C])
    args = ["watch", "--node", nodes[0].alias, "--node", nodes[1].alias, "--log", bed.log, "--variant", V,
            "--repeats", "1", "--once"]
    cp = bed.cli(*args, timeout=600)
    assert cp.returncode == 0, desc(cp)
    (line,) = [json.loads(ln) for ln in cp.stdout.decode().splitlines() if ln.startswith("{")]
    assert len(line["jobs"]) == 1 and line["jobs"][0]["state"] == "succeeded", line
    job = bed.job(line["jobs"][0]["job_id"])
    assert job["request"]["campaign"]["nodes"] == [nodes[0].alias, nodes[1].alias]
    ctrs = sorted({c for n in nodes for c in n.containers})
    name = "-".join([nodes[0].alias, nodes[1].alias, *ctrs])
    ledger = [json.loads(ln) for ln in (bed.ws / "watch" / name / "ledger.jsonl").read_text().splitlines()]
    (end,) = [e for e in ledger if e["event"] == "job" and e["state"] == "succeeded"]
    assert _mnk(end["tuned"]) == sorted([A, B, C])
    seen = {(e["shape"]["n"], e["target"].split("/")[0]): e["count"] for e in ledger if e["event"] == "seen"}
    assert seen[(512, nodes[0].alias)] == 3 and seen[(2112, nodes[1].alias)] == 1
    assert sum(len(n.containers[next(iter(n.containers))].launches()) for n in nodes) >= 1
