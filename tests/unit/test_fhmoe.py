"""The FHMoE variant's pieces (variants_fhmoe.py; ROCm/aiter eb326e45): the runtime's raise as a shape source,
the tuner's lines, its -i (live table + incumbent rows), its command line and per-arm benchmark, the refusals,
and the simulated tuner's upstream behaviour."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from orchestrator.errors import UsageError
from orchestrator.parsing.bench import bench_results, parse_bench_log
from orchestrator.parsing.fhmoe import baseline_rows, tuned_lines
from orchestrator.shapelib import shapelog
from orchestrator.shapelib.shapefhmoe import padded_m, required_buckets
from orchestrator.sim.fhmoe_table import TABLE
from orchestrator.steps.armargs import arm_args
from orchestrator.steps import fhmoe_input
from orchestrator.steps.bench import plan_bench
from orchestrator.variants import get_variant

FH = get_variant("fhmoe")
RAISE = "NotImplementedError: The active FHMoE config does not cover this {c} token shape: M={m}\n"


def _hy4(token):
    return {"token": token, "model_dim": 6144, "inter_dim": 256, "expert": 257, "topk": 9,
            "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn",
            "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_1x32", "use_g1u1": 1, "doweight_stage1": 0}


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_the_raise_line_is_a_shape_at_the_bucket_the_runtime_looks_up(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("(Worker_TP0 pid=7) ERROR x " + RAISE.format(c="HY4 MXFP8", m=3000)
                   + "(Worker_TP1 pid=8) ERROR x " + RAISE.format(c="HY4 MXFP8", m=3000)
                   + RAISE.format(c="DSV4 I384", m=5) + "unrelated line\n")
    r = shapelog.parse_files([str(log)], "fhmoe", keep_meta=True).to_json()
    (shape,) = r["shapes"]["fhmoe"]
    assert shape.pop("_meta")["m"] == 3000 and shape == _hy4(4096)
    assert r["counts"]["fhmoe"] == [2]
    (refused,) = r["unsupported"]["fhmoe"]          # DSV4: this AITER's tuner cannot tune it
    assert refused["model_dim"] == 7168 and refused["token"] == 8


def test_padded_buckets_follow_get_padded_M():
    assert [padded_m(m) for m in (1, 3, 3000, 32767, 32768, 100000, 131072, 500000)] == \
        [1, 4, 4096, 32768, 32768, 32768, 131072, 131072]
    assert required_buckets(3000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


TUNED = ("M=4096: 0.1225 ms -> 0.0983 ms (flydsl_moe1_a, flydsl_moe2_b) -> (flydsl_moe1_c, flydsl_moe2_d)\n"
         "M=4096: sampled FP32 validation passed for 6 rows (relative L2=0.012300)\n"
         "M=64: 0.0200 ms -> 0.0200 ms (s1, s2) -> (s1, s2)\n")


def test_the_tuners_lines_are_read_in_ms():
    got = tuned_lines(TUNED)
    assert [(r["token"], r["before_ms"], r["after_ms"], r["changed"], r["validated"]) for r in got] == \
        [(4096, 0.1225, 0.0983, True, True), (64, 0.02, 0.02, False, False)]
    text = "M=64: baseline 0.0200 ms (s1, s2)\n[aiter] M=4096: baseline 0.1230 ms (a, b)\n"
    assert [(r["token"], r["ms"]) for r in baseline_rows(text)] == [(64, 0.02), (4096, 0.123)]
    res = bench_results(parse_bench_log(text, FH.bench), FH.bench)
    assert [(r["key"], r["value"]) for r in res] == [({"token": 64}, 0.02), ({"token": 4096}, 0.123)]


def _live(drop=(4096,)):
    rows = [r for r in _rows(TABLE) if not (r["model_dim"] == "6144" and int(r["token"]) in drop)]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(fhmoe_input.FIELDS), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def test_the_tuner_input_adds_an_incumbent_from_the_nearest_token():
    text, notes = fhmoe_input.tuner_input(_live(), [_hy4(4096), _hy4(64)])
    rows = _rows(text)
    assert len(rows) == len(_rows(_live())) + 1           # every live row kept, one added
    (added,) = [r for r in rows if r["model_dim"] == "6144" and r["token"] == "4096"]
    (donor,) = [r for r in rows if r["model_dim"] == "6144" and r["token"] == "2048"]
    assert {k: v for k, v in added.items() if k != "token"} == {k: v for k, v in donor.items() if k != "token"}
    assert any("copy of token 2048" in n for n in notes) and any("measured by the tuner" in n for n in notes)
    assert not any("also requires" in n for n in notes)


def test_the_tuner_input_names_missing_lower_buckets_and_refuses_what_the_tuner_raises_on():
    _, notes = fhmoe_input.tuner_input(_live(drop=(1024, 4096)), [_hy4(4096)])
    assert any("bucket(s) 1024 below" in n for n in notes), notes
    bad_header = _live().replace("kernelName2", "kernel2", 1)
    with pytest.raises(UsageError, match="22 tune_fhmoe.py reads"):
        fhmoe_input.tuner_input(bad_header, [_hy4(4096)])
    dsv4_only = "\n".join(line for line in _live().splitlines() if ",6144," not in line) + "\n"
    with pytest.raises(UsageError, match="no HY4 MXFP8 row"):
        fhmoe_input.tuner_input(dsv4_only, [_hy4(4096)])
    twice = _live() + _live().splitlines()[-1] + "\n"
    with pytest.raises(UsageError, match="2 HY4 MXFP8 rows for token 131072"):
        fhmoe_input.tuner_input(twice, [_hy4(131072)])
    with pytest.raises(UsageError, match="no FHMoE table"):
        fhmoe_input.tuner_input(None, [_hy4(4096)])


def test_refusals_before_anything_runs():
    fhmoe_input.refuse_node(FH, {"gfx": "gfx950", "cu_num": 256})
    for facts in ({"gfx": "gfx950", "cu_num": 128}, {"gfx": "gfx942", "cu_num": 256}):
        with pytest.raises(UsageError, match="requires gfx950 with 256 CUs") as e:
            fhmoe_input.refuse_node(FH, facts)
        assert e.value.exit_code == 2
    fhmoe_input.refuse_node(get_variant("moe_2stages"), {"gfx": "gfx942", "cu_num": 80})   # not its business
    fhmoe_input.check_shapes(FH, [_hy4(4096)])
    with pytest.raises(UsageError, match="DSV4 I384 contract"):
        fhmoe_input.check_shapes(FH, [dict(_hy4(8), model_dim=7168, inter_dim=384, expert=385, topk=7,
                                           q_dtype_w="torch.float4_e2m1fn_x2")])
    with pytest.raises(UsageError, match="reads the row of token 4096"):
        fhmoe_input.check_shapes(FH, [_hy4(3000)])


def test_command_and_benchmark_per_arm():
    cmd = fhmoe_input.tune_command("python3", "/a/op_tests/tuners/tune_fhmoe.py", "/j/in.csv", "/j/staging/t.csv",
                                   [_hy4(4096), _hy4(64)], [3], "/a", [])
    assert cmd.argv[2:] == ("-i", "/j/in.csv", "-o", "/j/staging/t.csv", "--tokens", "64,4096", "--mp", "1")
    assert cmd.env == {"HIP_VISIBLE_DEVICES": "3"}
    (call,) = plan_bench(FH, [_hy4(4096), _hy4(64)])
    remote = SimpleNamespace(untuned_csv="/j/in.csv", tuned_csv="/j/staging/t.csv", live_csv="/live.csv",
                             job_dir="/j")
    before = arm_args(call.args, "before", remote)
    assert before == ("--baseline-only", "-i", "/j/in.csv", "-o", "/j/bench/fhmoe_before.csv", "--tokens",
                      "64,4096", "--mp", "1")
    after = arm_args(call.args, "after", remote)
    assert after == ("--baseline-only", "-i", "/j/staging/t.csv", "-o", "/j/bench/fhmoe_after.csv",
                     "--tokens", "64,4096", "--mp", "1")
    assert arm_args(call.args, "live", remote)[2] == "/live.csv"
    assert arm_args(("-mnk", "1,2,3"), "after", remote) == ("-mnk", "1,2,3")


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    from orchestrator import sim
    return sim.install(str(tmp_path_factory.mktemp("fhmoe-node")), sim.SimSpec(profile="head"))


def _tuner(head, *args, env=None):
    return subprocess.run([sys.executable, "op_tests/tuners/tune_fhmoe.py", *args], cwd=head.aiter_root,
                          env={**os.environ, **head.env, **(env or {})}, capture_output=True, text=True)


def test_the_simulated_tuner_is_as_unkind_as_upstream(head, tmp_path):
    live = f"{head.aiter_root}/aiter/configs/tuned_fhmoe.csv"
    out = tmp_path / "out.csv"
    r = _tuner(head, "-i", live, "-o", str(out), "--tokens", "3000")
    assert r.returncode != 0 and "missing HY4 FHMoE rows for tokens: [3000]" in r.stderr and not out.exists()
    r = _tuner(head, "-i", live, "-o", str(out), "--tokens", "64", "--mp", "2")
    assert r.returncode != 0 and "supports --mp 1 only" in r.stderr
    r = _tuner(head, "-i", live, "-o", str(out), "--tokens", "64,4096", env={"AITER_SIM_FHMOE_BAD_TOKENS": "4096"})
    assert r.returncode != 0 and "sampled FP32 validation failed" in r.stderr and not out.exists()  # nothing written
    r = _tuner(head, "-i", live, "-o", str(out), "--tokens", "64,4096")
    assert r.returncode == 0, r.stderr
    assert [t["token"] for t in tuned_lines(r.stdout)] == [64, 4096]
    assert len(_rows(out.read_text())) == len(_rows(TABLE))      # every row of -i written to -o
    r = _tuner(head, "-i", str(out), "-o", str(tmp_path / "b.csv"), "--tokens", "4096", "--baseline-only")
    assert r.returncode == 0 and [b["token"] for b in baseline_rows(r.stdout)] == [4096]
    assert (tmp_path / "b.csv").read_text() == out.read_text()


def test_only_the_head_profile_ships_the_tuner_and_runtime(tmp_path):
    from orchestrator import sim
    inst = sim.install(str(tmp_path / "n"), sim.SimSpec(profile="newest"))
    assert not os.path.exists(f"{inst.aiter_root}/op_tests/tuners/tune_fhmoe.py")
    assert not os.path.exists(f"{inst.aiter_root}/aiter/fhmoe.py")


def test_audit_reads_both_kernel_name_columns_of_the_fhmoe_table(tmp_path, capsys):
    import json

    from orchestrator.cli import main
    good = tmp_path / "ok" / "tuned_fhmoe.csv"
    bad = tmp_path / "bad" / "tuned_fhmoe.csv"
    for p in (good, bad):
        p.parent.mkdir()
    good.write_text(TABLE)
    bad.write_text(TABLE.replace("_t128x128x128_reduce_bnt2_xcd4", "_128x128x128_reduce"))
    assert main(["audit", str(good), "--json"]) == 0 and json.loads(capsys.readouterr().out) == []
    assert main(["audit", str(bad), "--json"]) == 1
    (f,) = json.loads(capsys.readouterr().out)
    assert f["kind"] == "unparsable_kernel" and f["key"]["token"] == "131072" and "kernelName2" in f["detail"]


def test_run_splitk_is_refused_with_fhmoes_own_reason():
    from orchestrator.steps import tuneargs
    from orchestrator.variants import get_variant
    with pytest.raises(UsageError, match="refuses -k") as err:
        tuneargs.refuse_splitk(tuneargs.compose(splitk=True), get_variant("fhmoe"))
    assert "no -k/--splitK" in str(err.value) and "does not support split-K" not in str(err.value)
