"""tune-remote watch's parts without a node: the log_tail op (offsets, partial lines, rotation), the store
(ledger, offsets, lock), the ranking, and whole cycles over a local log with a recording launcher (quiet
cycle, upgrade detection, a skipped cycle tried again, re-attach)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import JobError, UsageError
from orchestrator.nodeside import logtail
from orchestrator.sim.growlog import append_misses, miss_lines, rotate
from orchestrator.watch import upgrade
from orchestrator.watch.cycle import Watch, WatchConfig
from orchestrator.watch.launch import Outcome
from orchestrator.watch.mine import WatchTarget, add_seen, candidates, TargetRead
from orchestrator.watch.store import WatchStore, check_name, default_name, shape_key

V = "a8w8_blockscale"
A, B, C = (72, 512, 7168), (72, 7168, 2048), (8, 2112, 7168)


def _shape(t):
    return {"m": t[0], "n": t[1], "k": t[2]}


def _tail(path, prev=None):
    spec = {"path": str(path), **(prev or {})}
    return logtail.op_log_tail({"logs": [spec], "variant": V})


def _next(ans):
    e = ans["logs"][0]
    return {"inode": e["inode"], "offset": e["offset"]}


# -- log_tail ---------------------------------------------------------------------------------------
def test_log_tail_reads_only_new_complete_lines(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A, B], times=2)
    first = _tail(log)
    assert first["shapes"][V] == [_shape(A), _shape(B)] and first["counts"][V] == [2, 2]
    assert first["bytes"] == log.stat().st_size
    again = _tail(log, _next(first))
    assert again["bytes"] == 0 and not again["shapes"]
    with open(log, "ab") as fh:                       # one whole line, one being written
        line = miss_lines(V, [C]).encode()
        fh.write(line + b"(Worker_TP0 pid=1) [aiter] shape is M:16, N:1")
    grown = _tail(log, _next(again))
    assert grown["shapes"][V] == [_shape(C)] and grown["bytes"] == len(line)
    with open(log, "ab") as fh:
        fh.write(b"6, K:16, not found tuned config in /tmp/x/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    rest = _tail(log, _next(grown))
    assert rest["shapes"][V] == [{"m": 16, "n": 16, "k": 16}]
    assert rest["logs"][0]["offset"] == log.stat().st_size


def test_log_tail_rotation_and_truncation_read_from_the_start(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    first = _tail(log)
    rotate(log)
    append_misses(log, V, [B])
    rotated = _tail(log, _next(first))
    assert rotated["logs"][0]["rotated"] and rotated["logs"][0]["start"] == 0
    assert rotated["shapes"][V] == [_shape(B)]
    log.write_bytes(miss_lines(V, [C])[:40].encode().rsplit(b"\n", 1)[0] + b"\n")   # truncated in place
    truncated = _tail(log, _next(rotated))
    assert truncated["logs"][0]["rotated"] and truncated["logs"][0]["start"] == 0


def test_log_tail_missing_log(tmp_path):
    ans = _tail(tmp_path / "nope.log")
    assert ans["logs"][0]["missing"] and ans["bytes"] == 0


def test_log_tail_is_a_registered_bundled_op():
    from orchestrator.nodeside import node_helper
    from orchestrator.remote.detached import helper_files
    assert "log_tail" in node_helper.OPS and "orchestrator/nodeside/logtail.py" in helper_files()


# -- store -----------------------------------------------------------------------------------------
def test_names():
    assert default_name(["node1", "node2", "node1"], ["vllm", "vllm"]) == "node1-node2-vllm"
    assert default_name(["a/b"], []) == "a_b"
    assert check_name("a.b_c-1") == "a.b_c-1"
    with pytest.raises(UsageError):
        check_name("../x")


def test_job_ids_keep_cycle_and_variant_whatever_the_name(tmp_path):
    from orchestrator.state import check_job_id
    from orchestrator.watch.launch import JobOptions, Launcher
    long = Launcher(None, None, None, None, JobOptions(), tmp_path, "n" * 100)
    ids = {long.job_id(c, v) for c in (9, 10) for v in (V, "a8w8_blockscale_bpreshuffle")}
    assert len(ids) == 4 and all(check_job_id(i) and i.endswith(("-" + V, "_bpreshuffle")) for i in ids)
    assert Launcher(None, None, None, None, JobOptions(), tmp_path, "w").job_id(3, V) == f"watch-w-c3-{V}"


def test_ledger_events_have_ts_and_a_torn_line_is_left_out(tmp_path):
    store = WatchStore(tmp_path, "w")
    store.record("cycle", cycle=1)
    store.record("job", job_id="j1", state="running", variant=V, shapes=[_shape(A)])
    with open(store.ledger_path, "a") as fh:
        fh.write('{"event": "job", "job_id": "j1", "sta')
    events = store.events()
    assert [e["event"] for e in events] == ["cycle", "job"] and all("ts" in e for e in events)
    assert [e["job_id"] for e in store.open_jobs()] == ["j1"]
    store.ledger_path.write_text(store.ledger_path.read_text().rsplit("\n", 1)[0] + "\n")
    store.record("job", job_id="j1", state="succeeded", variant=V, tuned=[_shape(A)])
    assert store.open_jobs() == [] and store.tried() == {shape_key(V, _shape(A))}
    with pytest.raises(ValueError):
        store.record("bogus")


def test_lock_keeps_one_watch_per_name(tmp_path):
    first = WatchStore(tmp_path, "w")
    first.lock()
    with pytest.raises(JobError, match="already running"):
        WatchStore(tmp_path, "w").lock()
    WatchStore(tmp_path, "other").lock()          # another NAME runs beside it
    first.unlock()
    WatchStore(tmp_path, "w").lock()


# -- ranking ---------------------------------------------------------------------------------------
def _read(pairs, label="n/c"):
    return TargetRead(label=label, shapes={V: [(_shape(t), n) for t, n in pairs]})


def test_ranked_by_misses_min_misses_in_all_tried_and_retune():
    seen = {}
    add_seen(seen, _read([(A, 1), (B, 5)]), 1, None)
    picked = candidates(seen, set(), set(), 1)
    assert [e["shape"] for e in picked[V]] == [_shape(B), _shape(A)]
    assert [e["shape"] for e in candidates(seen, set(), set(), 2)[V]] == [_shape(B)]
    now = add_seen(seen, _read([(A, 1), (C, 9)]), 2, None)        # A reaches 2 in all
    assert [e["shape"] for e in candidates(seen, set(), set(), 2)[V]] == [_shape(C), _shape(B), _shape(A)]
    tried = {shape_key(V, _shape(B)), shape_key(V, _shape(A))}
    assert [e["shape"] for e in candidates(seen, tried, set(), 1)[V]] == [_shape(C)]
    retune = {shape_key(s["variant"], s["shape"]) for s in now}
    assert [e["shape"] for e in candidates(seen, tried, set(), 1, retune)[V]] == [_shape(C), _shape(A)]
    assert candidates(seen, set(), {shape_key(V, _shape(C))}, 1)[V][0]["shape"] == _shape(B)
    assert candidates(seen, set(), set(), 1).keys() == {V}
    assert add_seen({}, _read([(A, 1)]), 1, ["moe_2stages"]) == []


def test_upgrade_changed():
    a = {"aiter_version": "0.1.20", "rocm_version": "7.0.2", "gfx": "gfx950"}
    assert upgrade.changed(None, a) == {}
    assert upgrade.changed(a, dict(a)) == {}
    assert upgrade.changed(a, dict(a, aiter_version="0.1.21")) == {"aiter_version": ["0.1.20", "0.1.21"]}
    assert upgrade.changed(a, dict(a, gfx=None)) == {}


# -- whole cycles ----------------------------------------------------------------------------------
class FakeHelper:
    def __init__(self, facts):
        self.facts, self.calls = facts, []

    def call(self, op, req, timeout=None):
        self.calls.append(op)
        assert op == "log_tail"
        ans = logtail.op_log_tail(dict(req, facts=False))
        ans["facts"] = dict(self.facts)
        return ans


class FakeTarget:
    def __init__(self, helper):
        self.helper = helper

    def round_trips(self):
        return len(self.helper.calls)

    def connect(self):
        pass

    def close(self):
        pass


class FakeLauncher:
    def __init__(self):
        self.launched, self.results = [], []

    def job_id(self, cycle, variant):
        return f"w-c{cycle}-{variant}"

    def drive(self, job_id, variant, shapes, targets):
        self.launched.append((job_id, [tuple(s[c] for c in "mnk") for s in shapes]))
        state, err = self.results.pop(0) if self.results else ("succeeded", None)
        return Outcome(job_id, state, list(shapes) if not err else [], error=err, promoted=len(shapes))


class FakeUi:
    def __init__(self):
        self.events = []

    def event(self, text):
        self.events.append(text)


def _watch(tmp_path, log, facts=None, rechecked=None):
    helper = FakeHelper(facts or {"aiter_version": "0.1.20", "rocm_version": "7.0.2", "gfx": "gfx950"})
    target = WatchTarget("n", "c", lambda: FakeTarget(helper))
    launcher, ui = FakeLauncher(), FakeUi()
    recheck = (lambda wt: rechecked.append(wt.label) or {"recheck": "unavailable"}) if rechecked is not None else None
    w = Watch(WatchStore(tmp_path, "w"), [target], WatchConfig([str(log)], [V], 1, False), launcher, ui, recheck)
    return w, launcher, ui, helper


def test_cycles_over_a_growing_log(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A, B], times=2)
    w, launcher, ui, helper = _watch(tmp_path, log)
    r1 = w.cycle()
    assert launcher.launched == [("w-c1-" + V, [A, B])] and not r1.failed and r1.round_trips == 1
    append_misses(log, V, [A, C, C, C])
    r2 = w.cycle()
    assert launcher.launched[1] == ("w-c2-" + V, [C]) and r2.bytes == len(miss_lines(V, [A, C, C, C]))
    r3 = w.cycle()
    assert len(launcher.launched) == 2 and r3.bytes == 0 and r3.round_trips == 1
    assert "no new miss lines; nothing launched" in ui.events[-1]
    events = [e["event"] for e in w.store.events()]
    assert events.count("cycle") == 3 and events.count("promoted") == 2
    seen = [e for e in w.store.events() if e["event"] == "seen" and e["cycle"] == 2]
    assert {(e["shape"]["n"], e["count"], e["total"]) for e in seen} == {(512, 1, 3), (2112, 3, 3)}
    off = json.loads(w.store.offsets_path.read_text())
    assert off["cycle"] == 3 and off["targets"]["n/c"]["logs"][str(log)]["offset"] == log.stat().st_size


def test_no_free_gpu_is_skipped_and_tried_next_cycle(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    w, launcher, ui, _ = _watch(tmp_path, log)
    launcher.results = [("failed", "no free GPU on n for c (use 99%)")]
    r1 = w.cycle()
    assert not r1.failed
    skipped = [e for e in w.store.events() if e["event"] == "skipped"]
    assert skipped and "no free GPU" in skipped[0]["reason"]
    w.cycle()                                       # no new line: the shape is still owed
    assert [j for j, _ in launcher.launched] == ["w-c1-" + V, "w-c2-" + V]
    w.cycle()
    assert len(launcher.launched) == 2


def test_a_failed_job_fails_the_cycle_and_is_not_retried_every_cycle(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    w, launcher, ui, _ = _watch(tmp_path, log)
    launcher.results = [("failed", None)]
    assert w.cycle().failed
    append_misses(log, V, [A])
    w.cycle()
    assert len(launcher.launched) == 1


def test_an_upgrade_is_recorded_and_rechecked(tmp_path):
    log = tmp_path / "server.log"
    log.touch()
    rechecked = []
    w, launcher, ui, helper = _watch(tmp_path, log, rechecked=rechecked)
    w.cycle()
    assert rechecked == [] and not [e for e in w.store.events() if e["event"] == "upgrade"]
    helper.facts["aiter_version"] = "0.1.21"
    w.cycle()
    ups = [e for e in w.store.events() if e["event"] == "upgrade"]
    assert rechecked == ["n/c"] and len(ups) == 1
    assert ups[0]["changed"] == {"aiter_version": ["0.1.20", "0.1.21"]} and ups[0]["recheck"] == "unavailable"
    assert ups[0]["target"] == "n/c" and "ts" in ups[0]
    w.cycle()
    assert rechecked == ["n/c"]
    assert json.loads(w.store.offsets_path.read_text()).get("recheck_pending") == {}


def test_a_recheck_a_killed_watch_never_ended_runs_next_cycle(tmp_path):
    log = tmp_path / "server.log"
    log.touch()
    rechecked = []
    w, launcher, ui, helper = _watch(tmp_path, log, rechecked=rechecked)
    w.cycle()
    helper.facts["gfx"] = "gfx942"
    w.recheck = lambda wt: (_ for _ in ()).throw(KeyboardInterrupt())     # killed during the recheck
    with pytest.raises(KeyboardInterrupt):
        w.cycle()
    assert not [e for e in w.store.events() if e["event"] == "upgrade"]
    w.recheck = lambda wt: rechecked.append(wt.label) or {"recheck": "unavailable"}
    w.cycle()
    (up,) = [e for e in w.store.events() if e["event"] == "upgrade"]
    assert up["changed"] == {"gfx": ["gfx950", "gfx942"]} and rechecked == ["n/c"]


def test_reattach_drives_an_open_job_once(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    w, launcher, ui, _ = _watch(tmp_path, log)
    w.store.record("job", job_id="w-c1-" + V, state="running", variant=V, shapes=[_shape(A)], targets=["n/c"])
    outs = w.reattach()
    assert [o.job_id for o in outs] == ["w-c1-" + V] and w.store.open_jobs() == []
    assert w.reattach() == []
    w.cycle()                                      # A was tuned by the re-attached job
    assert len(launcher.launched) == 1


def test_upgrade_seen_through_the_node_helper_on_a_simulated_node(tmp_path):
    """The facts come from the node (the helper reads the AITER distribution's metadata and ROCm's
    .info/version): a version bump on the simulated node between two cycles is one upgrade entry."""
    from orchestrator.demo import demo_target, prepare_demo
    from orchestrator.sim.growlog import upgrade_rocm
    node_dir, _ = prepare_demo(tmp_path / "node")
    log = node_dir / "server.log"
    append_misses(log, V, [A])
    target = WatchTarget("demo", "simulated", lambda: demo_target(str(node_dir)), demo_dir=str(node_dir))
    launcher, ui, rechecked = FakeLauncher(), FakeUi(), []
    w = Watch(WatchStore(tmp_path / "ws", "d"), [target], WatchConfig([str(log)], None, 1, False), launcher, ui,
              lambda wt: rechecked.append(wt.label) or {"recheck": "unavailable"})
    try:
        r1 = w.cycle()
        facts = json.loads(w.store.offsets_path.read_text())["targets"]["demo/simulated"]["facts"]
        assert facts["aiter_version"] and facts["rocm_version"] and facts["gfx"], facts
        assert r1.round_trips >= 1 and launcher.launched == [("w-c1-" + V, [A])]
        meta = next(node_dir.glob("pylib/*.dist-info/METADATA"))
        meta.write_text(meta.read_text().replace(f"Version: {facts['aiter_version']}", "Version: 9.9.9"))
        upgrade_rocm(node_dir, "9.0.0")
        w.cycle()
    finally:
        w.close()
    (up,) = [e for e in w.store.events() if e["event"] == "upgrade"]
    assert up["changed"] == {"aiter_version": [facts["aiter_version"], "9.9.9"],
                             "rocm_version": [facts["rocm_version"], "9.0.0"]}
    assert rechecked == ["demo/simulated"] and len(launcher.launched) == 1


# -- the command line ------------------------------------------------------------------------------
from tests.unit.test_cli_usage import INV  # noqa: E402  (two unreachable nodes, three containers)


@pytest.mark.parametrize("argv,needle", [
    (["watch", "--log", "/x.log"], "--node NODE"),
    (["watch", "--node", "n1"], "--log PATH"),
    (["watch", "--node", "n1", "--log", "x.log"], "absolute path"),
    (["watch", "--node", "n1", "--log", "local:/x.log"], "inside the container"),
    (["watch", "--node", "n1", "--log", "/x.log", "--variant", "nope"], "nope"),
    (["watch", "--node", "n1", "--log", "/x.log", "--variant", "auto,a8w8"], "auto"),
    (["watch", "--node", "n2", "--log", "/x.log"], "--container"),
    (["watch", "--node", "zz", "--log", "/x.log"], "zz"),
    (["watch", "--node", "n1", "--log", "/x.log", "--name", "../up"], "--name"),
    (["watch", "--node", "n1", "--log", "/x.log", "--budget", "soon"], "soon"),
    (["watch", "--node", "n1", "--log", "/x.log", "--interval", "0"], "--interval"),
    (["watch", "--node", "n1", "--log", "/x.log", "--promote", "all"], "--promote"),
])
def test_watch_usage_errors_exit_2_with_one_line_and_no_state(tmp_path, monkeypatch, capsys, argv, needle):
    from orchestrator.cli import main
    (tmp_path / "inv.yaml").write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(tmp_path / "inv.yaml"))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ws" / "watch").exists()


def test_a_second_watch_of_one_name_exits_1(tmp_path, monkeypatch, capsys):
    from orchestrator.cli import main
    (tmp_path / "inv.yaml").write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(tmp_path / "inv.yaml"))
    held = WatchStore(tmp_path / "ws", "n1-c1")
    held.lock()
    code = main(["--workspace", str(tmp_path / "ws"), "watch", "--node", "n1", "--log", "/x.log", "--once"])
    err = capsys.readouterr().err
    assert code == 1 and "watch n1-c1 is already running" in err, err


def test_a_job_failed_before_its_shapes_is_not_retried_but_one_never_started_is(tmp_path):
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    w, launcher, ui, _ = _watch(tmp_path, log)
    launcher.results = [("failed", "no a8w8_blockscale shapes to tune")]
    assert w.cycle().failed
    w.cycle()
    assert len(launcher.launched) == 1

    append_misses(log, V, [B])
    real = launcher.drive

    def refused(job_id, variant, shapes, targets):
        real(job_id, variant, shapes, targets)
        return Outcome(job_id, "failed", [], error="cannot connect to n: refused", never_started=True)
    launcher.drive = refused
    assert not w.cycle().failed
    assert [e for e in w.store.events() if e["event"] == "skipped"][-1]["reason"].startswith("cannot connect")
    launcher.drive = real
    w.cycle()
    assert launcher.launched[-1] == ("w-c4-" + V, [B])


def test_demo_watch_two_cycles_the_second_tunes_only_the_new_shape_and_rechecks(tmp_path, capsys):
    from orchestrator.cli import main
    from orchestrator.watch.loop import DEMO_FIRST, DEMO_SECOND
    assert main(["--workspace", str(tmp_path / "ws"), "--json", "demo", "--watch"]) == 0, capsys.readouterr().err
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [x["cycle"] for x in lines] == [1, 2] and all(x["round_trips"] == 1 for x in lines)
    assert [[j["state"] for j in x["jobs"]] for x in lines] == [["succeeded"], ["succeeded"]]
    (ledger,) = (tmp_path / "ws" / "watch").glob("demo-*/ledger.jsonl")
    events = [json.loads(x) for x in ledger.read_text().splitlines()]
    tuned = [[tuple(s[c] for c in "mnk") for s in e["tuned"]] for e in events
             if e["event"] == "job" and e["state"] == "succeeded"]
    assert sorted(tuned[0]) == sorted(DEMO_FIRST) and tuned[1] == DEMO_SECOND
    (up,) = [e for e in events if e["event"] == "upgrade"]
    assert list(up["changed"]) == ["rocm_version"] and "recheck" in up


def test_a_budget_cut_leaves_the_least_missed_for_the_next_cycle(tmp_path):
    from orchestrator.watch.launch import JobOptions, Launcher
    req = Launcher(None, None, None, None, JobOptions("none", "30m", 2), tmp_path, "w").request("j", V, [_shape(A)])
    assert (req["budget"], req["promote"], req["repeats"]) == ("30m", "none", 2)
    assert Path(req["shapes_csv"]).read_text().splitlines() == ["M,N,K", "72,512,7168"]
    log = tmp_path / "server.log"
    append_misses(log, V, [A], times=1)
    append_misses(log, V, [B], times=3)
    w, launcher, ui, _ = _watch(tmp_path, log)
    real = launcher.drive

    def cut(job_id, variant, shapes, targets):          # the job's --budget kept the first shape only
        out = real(job_id, variant, shapes, targets)
        out.tuned = out.tuned[:1]
        return out
    launcher.drive = cut
    w.cycle()
    launcher.drive = real
    w.cycle()
    assert launcher.launched == [("w-c1-" + V, [B, A]), ("w-c2-" + V, [A])]


def test_a_stale_connection_is_opened_again_within_the_cycle(tmp_path):
    from orchestrator.remote.transport import TransportError
    log = tmp_path / "server.log"
    append_misses(log, V, [A])
    w, launcher, ui, helper = _watch(tmp_path, log)
    w.cycle()
    real, calls = helper.call, []

    def stale_once(op, req, timeout=None):
        calls.append(op)
        if len(calls) == 1:
            raise TransportError("channel closed")
        return real(op, req, timeout)
    helper.call = stale_once
    append_misses(log, V, [B])
    res = w.cycle()
    assert res.skipped == [] and launcher.launched[-1] == ("w-c2-" + V, [B]) and len(calls) == 2
    helper.call = lambda op, req, timeout=None: (_ for _ in ()).throw(TransportError("refused"))
    res = w.cycle()
    assert res.skipped and "refused" in res.skipped[0]
    assert [e for e in w.store.events() if e["event"] == "skipped"][-1]["target"] == "n/c"
