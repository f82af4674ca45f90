"""Bench style "run_config" (issue 36): a tuner's own --run_config as the before/after benchmark of a6w4 and
a16w8_mxfp8 - its output parse, the plan (one call, per-arm paths), the fixed cost, the recheck refusal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.parsing.bench import bench_results, parse_bench_log
from orchestrator.parsing.runconfig import parse_runconfig_rows, unavailable
from orchestrator.steps.armargs import PLACEHOLDERS, RC_SHAPES, arm_args
from orchestrator.steps.bench import (BUILD_S, PROCESS_START_S, REBUILD_S, call_path, fixed_cost, fixed_cost_line,
                                      measured_by_call, plan_bench)
from orchestrator.variants import get_variant, profile_for

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
NEWEST = profile_for((0, 1, 29))
SHAPES = [{"m": 1, "n": 7168, "k": 2048}, {"m": 16, "n": 7168, "k": 2048}]
REMOTE = SimpleNamespace(untuned_csv="/j/untuned.csv", tuned_csv="/j/staging/a6w4_asm_tuned_gemm.csv",
                         live_csv="/a/aiter/configs/a6w4_asm_tuned_gemm.csv", job_dir="/j", aiter_root="/a",
                         meta_root="/a/aiter_meta")


def v(name):
    return get_variant(name).resolve(NEWEST)


@pytest.mark.parametrize("name", ["a6w4", "a16w8_mxfp8"])
def test_both_mx_tuners_are_measured_by_their_own_run_config(name):
    var = v(name)
    assert var.bench is not None and var.bench.script == var.tune_script
    assert (var.bench.style, var.bench.output, var.bench.metric, var.bench.higher_is_better) == \
        ("run_config", "run_config", "E2E(us)", False)
    calls = plan_bench(var, SHAPES)
    assert len(calls) == 2                          # without a CSV, then with the arm's table
    for call in calls:
        assert call.shapes == tuple(SHAPES) and call.checked == {} and call.in_meta
        # the tune script is under the meta root (csrc/), not the aiter root as op_tests/ are
        assert call_path(call, REMOTE) == f"/a/aiter_meta/{var.tune_script}"
        assert PLACEHOLDERS & set(call.args)


def test_each_arm_gets_its_own_paths_and_the_before_arm_the_live_table_only_where_it_exists():
    default, table = plan_bench(v("a6w4"), SHAPES)
    shapes = "/j/bench/runconfig_shapes.csv"
    head = ("-i", shapes, "-o")
    for arm in ("before", "after", "live"):
        assert arm_args(default.args, arm, REMOTE) == (*head, f"/j/bench/runconfig_{arm}.csv", "--run_config")
    assert arm_args(table.args, "before", REMOTE) is None          # no live table (prepare backed up none)
    live = SimpleNamespace(**vars(REMOTE), tuned_backup="/j/backup/a6w4_asm_tuned_gemm.csv")
    assert arm_args(table.args, "before", live) == (*head, "/j/bench/runconfig_before.csv", "--run_config",
                                                    REMOTE.live_csv)
    assert arm_args(table.args, "after", REMOTE) == (*head, "/j/bench/runconfig_after.csv", "--run_config",
                                                    REMOTE.tuned_csv)
    assert arm_args(table.args, "live", REMOTE) == (*head, "/j/bench/runconfig_live.csv", "--run_config",
                                                   REMOTE.live_csv)
    assert arm_args((RC_SHAPES,), "after", REMOTE) == (shapes,)
    assert plan_bench(v("a6w4"), []) == []


def test_output_rows_as_upstream_prints_them():
    text = (BENCH / "tuner_run_config.log").read_text()
    rows = parse_runconfig_rows(text)
    assert [r["Status"] for r in rows] == ["OK", "MISMATCH", "ERROR", "OK", "OK"]
    assert rows[0] == {"Shape": "(1, 7168, 2048)", "E2E(us)": 9.87, "Status": "OK", "gfx": "gfx950",
                       "cu_num": 256, "M": 1, "N": 7168, "K": 2048}
    assert rows[1]["E2E(us)"] is None           # MISMATCH: its time measures a wrong output
    assert rows[3]["Kernel(us)"] == 7.1 and rows[4]["Kernel(us)"] is None
    res = bench_results(rows, v("a6w4").bench)
    # the second table (a later run in the same log) wins for M=1; the repro CSV block adds no row
    assert res == [{"key": {"m": 1, "n": 7168, "k": 2048}, "value": 7.65},
                   {"key": {"m": 16, "n": 7168, "k": 2048}, "value": None},
                   {"key": {"m": 4096, "n": 7168, "k": 2048}, "value": None},
                   {"key": {"m": 32, "n": 7168, "k": 2048}, "value": 11.2}]
    assert unavailable(text) is None


def test_extra_table_rows_are_dropped_by_matching_to_the_requested_shapes():
    """after = --run_config <staging table>: every row of the table is timed; only the job's shapes count."""
    text = "== tune-remote call 0\n" + (BENCH / "tuner_run_config.log").read_text()
    bench = v("a6w4").bench
    calls = plan_bench(v("a6w4"), SHAPES[:1])
    got = measured_by_call(bench, SHAPES[:1], text, [c.shapes for c in calls])
    assert got == [{"key": SHAPES[0], "value": 7.65}]


def test_the_table_call_wins_over_the_default_call_per_shape_in_one_sample():
    """Call 0 (no CSV) times the default kernel of every shape, call 1 the arm's table's rows only: a shape the
    table has a row for takes call 1's value, the others keep call 0's."""
    def table(label, rows):
        header = f"{'Shape':<40} | {'E2E(us)':>10} | {'Status':>8}"
        out = [f"============= {label} Benchmark Results =============", header, "-" * len(header)]
        for m, us, status in rows:
            out += [f"{f'({m}, 7168, 2048)':<40} | {us:>10} | {status:>8}",
                    f"keys: gfx=gfx950, cu_num=256, M={m}, N=7168, K=2048"]
        return "\n".join(out)
    text = ("== tune-remote call 0\n" + table("Benchmark (default)", [(1, "9.00", "OK"), (16, "8.00", "OK")])
            + "\n== tune-remote call 1\n" + table("Benchmark (tuned)", [(16, "5.00", "OK"), (64, "3.00", "OK")]))
    calls = plan_bench(v("a6w4"), SHAPES)
    got = measured_by_call(v("a6w4").bench, SHAPES, text, [c.shapes for c in calls])
    assert got == [{"key": SHAPES[0], "value": 9.0}, {"key": SHAPES[1], "value": 5.0}]   # M=64: not asked for
    failed = text.replace("|       5.00 |       OK", "|        N/A |    ERROR")
    assert measured_by_call(v("a6w4").bench, SHAPES, failed, [c.shapes for c in calls])[1]["value"] is None


def test_a_tuner_without_run_config_is_detected():
    text = (BENCH / "tuner_run_config_unimplemented.log").read_text()
    assert parse_bench_log(text, v("a6w4").bench) == []
    why = unavailable(text)
    assert why and "does not implement --run_config" in why and "GemmA6W4Tuner" in why
    assert "no results" in unavailable("Benchmark (default): no results\n")
    assert unavailable("") is None


def test_fixed_cost_charges_a_rebuild_in_every_run_config_csv_process():
    """_set_config_env_for_run_config sets AITER_REBUILD=2: the after arm's calls and the engaged check each
    rebuild the operator's modules; the before arm (no CSV) loads them."""
    c = fixed_cost(v("a6w4"), SHAPES, repeats=3, modules=2)
    # after: 2 calls x 3 runs, before: 1 x 3 (its table call only where a live table exists), engaged 2, tuner 1
    assert c["calls_per_run"] == 2 and c["processes"] == 2 * 3 + 1 * 3 + 2 + 1
    rebuilds = (3 + 1) * 2          # the after arm's table call per run and the engaged check's, 2 modules each
    assert c["builds"] == rebuilds + 1
    assert c["minutes"] == pytest.approx((12 * PROCESS_START_S + rebuilds * REBUILD_S + BUILD_S) / 60)
    line = fixed_cost_line(v("a6w4"), SHAPES, 3, 2)
    assert "2 tuner --run_config call(s) per arm" in line and "9 JIT build(s)" in line
    op = fixed_cost(v("a8w8_blockscale"), SHAPES, repeats=3)
    assert op["builds"] == 2      # an op_test builds each module once, not per call


def test_recheck_times_the_live_table_against_the_table_without_the_rows():
    """recheck: "with" = the default call, then --run_config <live table>; "without" = the default call, then
    --run_config <the table without the rows> (a shape that table lacks keeps the default kernel's time)."""
    from orchestrator.recheck import measure as rm

    sent = []

    class Session:
        facts = SimpleNamespace(aiter_root="/a", meta_root="/a/aiter_meta", env={})
        target = SimpleNamespace(container=SimpleNamespace(python="python3", env={}))

        def variant(self, name):
            return v(name)

        def call_batch(self, ops):
            sent.extend(ops)
            return [{"found": {"0": "k0"}}] + [{} for _ in ops[1:]]

        def call(self, op, req, timeout=None):
            sent.append((op, req))
            return {"stdout": ""}

    rows = [SimpleNamespace(shape=SHAPES[0], key={"m": 1, "n": 7168, "k": 2048}, table=None,
                            node_key=lambda: ["gfx950", 256, 1, 7168, 2048], ident=lambda: "i0")]
    m = rm.measure(Session(), "a6w4", rows, live="/a/t.csv", node_dir="/n", gpu="0", repeats=1)
    [write] = [req for op, req in sent if op == "write_files"]
    assert write["files"][0]["path"] == "/n/a6w4/bench/runconfig_shapes.csv"
    assert write["files"][0]["content"].splitlines() == ["M,N,K", "1,7168,2048"]
    line = [req for op, req in sent if op == "run"][0]["argv"][2]
    script = f"/a/aiter_meta/{v('a6w4').tune_script}"
    assert "{runconfig:" not in line and line.count(f"python3 {script} -i /n/a6w4/bench/runconfig_shapes.csv") == 4
    assert "--run_config /a/t.csv )" in line and f"--run_config {m.without_table} )" in line, line


def test_a_demoted_row_is_checked_with_the_live_table_as_demoted():
    from orchestrator.recheck import demote as rd
    from orchestrator.recheck.measure import arm_paths

    sent = []

    class Session:
        facts = SimpleNamespace(aiter_root="/a", meta_root="/a/aiter_meta")
        target = SimpleNamespace(container=SimpleNamespace(python="python3"))

        def call(self, op, req, timeout=None):
            sent.append(req)
            return {"stdout": ""}

    paths = arm_paths(Session(), "a6w4", "/a/t.csv", "/n/without/t.csv", "/n")
    rows = [SimpleNamespace(shape=SHAPES[0], key={"m": 1, "n": 7168, "k": 2048}, ident=lambda: "i0")]
    out = rd.check(Session(), v("a6w4"), rows, {}, gpu="0", scripts={}, paths=paths)
    line = sent[0]["argv"][2]
    assert "{runconfig:" not in line and line.count("--run_config") == 2 and "--run_config /a/t.csv )" in line
    assert out["total"] == 1 and out["engaged"] == 0       # no value printed: not engaged, never guessed


def test_a_max_repeats_round_runs_each_arm_with_its_own_paths():
    """--max-repeats adds rounds outside prepare's pipeline: its commands substitute the arm's paths too
    (a placeholder on a node command line would make the tuner read a file named `{runconfig:shapes}`)."""
    from orchestrator.steps.more_runs import round_request

    remote = SimpleNamespace(**vars(REMOTE), bench_run_as={}, bench_env={"before": {"A": "1"}, "after": {"A": "2"}})
    ctx = SimpleNamespace(job=SimpleNamespace(remote=remote), target=SimpleNamespace(
        container=SimpleNamespace(python="python3")), variant=v("a6w4"))
    req, calls = round_request(ctx, SHAPES, 3, 1)
    line = req["argv"][2]
    assert len(calls) == 2 and "{runconfig:" not in line and "{fhmoe:" not in line
    assert line.count("--run_config") == 3          # before: no live table, so its table call is not run
    script = f"/a/aiter_meta/{v('a6w4').tune_script}"
    assert (f"env A=1 python3 {script} -i /j/bench/runconfig_shapes.csv -o /j/bench/runconfig_before.csv "
            "--run_config ) || rc=$?") in line, line
    assert (f"env A=2 python3 {script} -i /j/bench/runconfig_shapes.csv -o /j/bench/runconfig_after.csv "
            f"--run_config {REMOTE.tuned_csv} ) || rc=$?") in line, line


def test_the_tuner_is_the_benchmark_so_no_op_test_is_required_or_probed():
    """An install-mode node has csrc/ under the meta root only: a campaign must not ask for the tune script
    under the aiter root as if it were an op_test (it would leave a6w4 out), nor probe it as one."""
    from orchestrator.campaign.capable import _needs
    from orchestrator.steps.capabilities import _request

    var = v("a6w4")
    assert _needs(var) == [("{meta}/" + var.tune_script, f"{var.tune_script} (its tuner)")]
    ctx = SimpleNamespace(target=SimpleNamespace(container=SimpleNamespace(python="python3")))
    req = _request(ctx, var, "/a", "/a/aiter_meta", "gfx950", "/a/t.csv")
    assert req["op_test"] is None and req["tune_script"] == f"/a/aiter_meta/{var.tune_script}"
    assert _request(ctx, v("a8w8_blockscale"), "/a", "/a", "gfx950", "/t")["op_test"].startswith("/a/op_tests/")


BMM_SHAPES = [{"b": 16, "m": 1, "n": 1024, "k": 4096, "w_scale_block": "128x128"},
              {"b": 16, "m": 200, "n": 1024, "k": 4096, "w_scale_block": "32x32"}]


def test_the_bmm_tuner_is_measured_by_one_no_csv_call_per_arm():
    """run_config_table=False (OpusBmmMxscaleTuner: its no-CSV run_config times the production dispatch of the
    process's AITER_CONFIG_*, its CSV call the raw launcher): one call, without a CSV, in every arm; a6w4 keeps
    its two."""
    bmm = v("bmm_a8w8_mxscale_bpreshuffle")
    assert bmm.bench.style == "run_config" and not bmm.bench.run_config_table and v("a6w4").bench.run_config_table
    [call] = plan_bench(bmm, BMM_SHAPES)
    assert call.shapes == tuple(BMM_SHAPES) and call.in_meta and call.script == bmm.tune_script
    for arm in ("before", "after", "live"):
        assert arm_args(call.args, arm, REMOTE) == ("-i", "/j/bench/runconfig_shapes.csv", "-o",
                                                    f"/j/bench/runconfig_{arm}.csv", "--run_config")
    assert len(plan_bench(v("a6w4"), SHAPES)) == 2
    # its probed flags (prepare's remote.bench_probed: what the node's --help lists, as the tune command gets):
    # --w_scale_block filters -i in --run_config too (default 32x32,128x128 would drop a 1x32 shape)
    probed = SimpleNamespace(**vars(REMOTE), bench_probed=["--w_scale_block", "1x32,32x32,128x128"])
    assert arm_args(call.args, "after", probed) == ("-i", "/j/bench/runconfig_shapes.csv", "-o",
                                                    "/j/bench/runconfig_after.csv", "--w_scale_block",
                                                    "1x32,32x32,128x128", "--run_config")


def test_fixed_cost_of_the_bmm_tuner_is_one_process_per_arm_and_run_and_no_rebuild():
    c = fixed_cost(v("bmm_a8w8_mxscale_bpreshuffle"), BMM_SHAPES, repeats=3, modules=2)
    # before 1 x 3, after 1 x 3, engaged 1, tuner 1; nothing sets AITER_REBUILD: only the minimum build
    assert c["calls_per_run"] == 1 and c["processes"] == 3 + 3 + 1 + 1 and c["builds"] == 1
    assert c["minutes"] == pytest.approx((8 * PROCESS_START_S + BUILD_S) / 60)
    line = fixed_cost_line(v("bmm_a8w8_mxscale_bpreshuffle"), BMM_SHAPES, 3, 2)
    assert "1 tuner --run_config call(s) per arm and run x 3 run(s) x 2 arms, without a CSV" in line, line
    assert "1 JIT build(s)" in line


def test_the_measured_by_note_follows_the_field():
    from orchestrator.steps.bench import measured_by_note
    bmm, a6w4 = measured_by_note(v("bmm_a8w8_mxscale_bpreshuffle")), measured_by_note(v("a6w4"))
    assert bmm.startswith("bmm_a8w8_mxscale_bpreshuffle: ") and "once with its own AITER_CONFIG_*" in bmm
    assert "runs it twice" in a6w4 and "once with" not in a6w4


def test_the_bmm_fixture_is_matched_to_the_requested_shapes():
    text = "== tune-remote call 0\n" + (BENCH / "bmm_mxscale_run_config.log").read_text()
    got = {(r["key"]["m"], r["key"]["w_scale_block"]): r["value"]
           for r in measured_by_call(v("bmm_a8w8_mxscale_bpreshuffle").bench, BMM_SHAPES, text, [BMM_SHAPES])}
    assert got == {(1, "128x128"): 11.06, (200, "32x32"): 24.85}


def test_a_recheck_passes_the_tuners_probed_flags_as_a_job_does():
    """The MXFP8 BMM tuner's --run_config filters -i by --w_scale_block (default 32x32,128x128): without the probed
    flag a recheck would drop every 1x32 row it was asked to measure."""
    from orchestrator.recheck.measure import arm_paths, probed_flags
    from orchestrator.steps.armargs import arm_args
    from orchestrator.steps.bench import plan_bench

    sent = []

    class Session:
        facts = SimpleNamespace(aiter_root="/a", meta_root="/a/aiter_meta")
        target = SimpleNamespace(container=SimpleNamespace(python="python3"))

        def __init__(self, help_text):
            self.help_text = help_text

        def call(self, op, req, timeout=None):
            sent.append((op, req))
            return {"tuner_help": self.help_text}

    bmm = v("bmm_a8w8_mxscale_bpreshuffle")
    assert probed_flags(Session("usage: x [--w_scale_block W_SCALE_BLOCK]"), bmm) == \
        ["--w_scale_block", "1x32,32x32,128x128"]
    assert sent[0][0] == "probe" and sent[0][1]["tune_script"] == f"/a/aiter_meta/{bmm.tune_script}"
    assert probed_flags(Session("usage: x [--groupSize G]"), bmm) == []        # an older opus base: no such flag
    sent.clear()
    assert probed_flags(Session("--w_scale_block"), v("a6w4")) == [] and sent == []   # no probed flags: no call
    shape = {"b": 16, "m": 16, "n": 1024, "k": 4096, "w_scale_block": "1x32"}
    paths = arm_paths(Session(""), bmm.name, "/a/t.csv", "/n/w.csv", "/n", ["--w_scale_block", "1x32,32x32,128x128"])
    [call] = plan_bench(bmm, [shape])
    assert "1x32,32x32,128x128" in arm_args(call.args, "live", paths)
