"""watch --profile (issue 38): a directory the servers write traces into is read in the cycle's one round trip
with the logs, and the cycle tunes the shapes with the largest share of GPU time first, not the most missed."""

from __future__ import annotations

import pytest

from orchestrator.nodeside import logtail
from orchestrator.nodeside.node_helper import op_profile
from orchestrator.sim.growlog import append_misses
from orchestrator.watch.cycle import Watch, WatchConfig
from orchestrator.watch.mine import WatchTarget
from orchestrator.watch.store import WatchStore
from tests.unit.test_profile_rank import _trace
from tests.unit.test_watch import V, FakeLauncher, FakeTarget, FakeUi

A, B = (72, 512, 7168), (8, 2112, 7168)


class BatchHelper:
    """The node helper's log_tail and profile ops, as one batch round trip."""

    def __init__(self):
        self.calls = []

    def call(self, op, req, timeout=None):
        self.calls.append(op)
        ans = logtail.op_log_tail(dict(req, facts=False))
        ans["facts"] = {"aiter_version": "0.1.20"}
        return ans

    def call_batch(self, calls, timeout=None, soft_last=False):
        self.calls.append("batch")
        (op1, tail), (op2, prof) = calls
        assert (op1, op2) == ("log_tail", "profile") and soft_last
        ans = logtail.op_log_tail(dict(tail, facts=False))
        ans["facts"] = {"aiter_version": "0.1.20"}
        return [ans, op_profile(prof)]


def _watch(tmp_path, log, profiles):
    helper = BatchHelper()
    launcher, ui = FakeLauncher(), FakeUi()
    w = Watch(WatchStore(tmp_path, "w"), [WatchTarget("n", "c", lambda: FakeTarget(helper))],
              WatchConfig([str(log)], [V], 1, False, profiles), launcher, ui, None)
    return w, launcher, ui, helper


def test_the_shape_with_the_largest_time_share_is_tuned_first_in_one_round_trip(tmp_path):
    log, prof = tmp_path / "server.log", tmp_path / "profiles"
    prof.mkdir()
    append_misses(log, V, [A] * 5 + [B])            # A is missed most, B holds most of the GPU time
    _trace(prof / "rank0.1.pt.trace.json", [(72, 512, 7168, 10.0), (8, 2112, 7168, 4000.0)])
    w, launcher, ui, helper = _watch(tmp_path, log, [str(prof)])
    r = w.cycle()
    assert launcher.launched == [("w-c1-" + V, [B, A])] and r.round_trips == 1 and helper.calls == ["batch"]
    assert any("largest share of GPU time first (" in e for e in ui.events), ui.events
    shares = w.store.load_offsets()["shares"]
    assert max(shares.values()) > 0.5


def test_without_a_profile_the_order_is_by_misses_and_a_bad_profile_is_said(tmp_path):
    log, prof = tmp_path / "server.log", tmp_path / "profiles"
    prof.mkdir()
    append_misses(log, V, [A] * 5 + [B])
    (prof / "cut.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op"')   # truncated
    w, launcher, ui, _ = _watch(tmp_path, log, [str(prof)])
    w.cycle()
    assert launcher.launched == [("w-c1-" + V, [A, B])]
    assert any("profile not read (" in e and "ranks its shapes by misses" in e for e in ui.events), ui.events


@pytest.mark.parametrize("path", ["local:/p", "profiles"])
def test_watch_profile_paths_are_container_paths(tmp_path, monkeypatch, capsys, path):
    from orchestrator.cli import main
    from tests.unit.test_watch import INV
    (tmp_path / "inv.yaml").write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(tmp_path / "inv.yaml"))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    assert main(["watch", "--node", "n1", "--log", "/x.log", "--profile", path]) == 2
    err = capsys.readouterr().err
    assert "--profile" in err and len(err.strip().splitlines()) == 1


def test_watch_passes_its_serve_command_to_every_job(tmp_path):
    """issue 37: `watch --serve-cmd` gives each job the serving check (and only then the keys of it)."""
    from orchestrator.watch.launch import JobOptions, Launcher
    launcher = Launcher(None, None, None, None, JobOptions(serve_cmd="bench", serve_repeats=3), tmp_path, "w")
    req = launcher.request("w-c1-a8w8_blockscale", "a8w8_blockscale", [{"m": 1, "n": 7168, "k": 2048}])
    assert req["serve_cmd"] == "bench" and req["serve_repeats"] == 3
    plain = Launcher(None, None, None, None, JobOptions(), tmp_path, "w").request("w-c2-x", "a8w8_blockscale",
                                                                                  [{"m": 1, "n": 7168, "k": 2048}])
    assert plain["serve_cmd"] is None and "serve_repeats" not in plain
