"""Simulated op_tests: printed tables, runtime lookup lines, the AITER_REBUILD rule, choices, MoE."""

import csv
import re

import pytest

from orchestrator.sim import SimSpec, install
from orchestrator.sim import perf_model as pm

from .test_sim_common import ANSI, markdown_table, py, read_csv
from .test_sim_tuner import MOE_BASE, shapes_for, tune_argv, untuned_csv


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("benchnodes")
    return {"current": install(base / "cur", SimSpec()),
            "legacy": install(base / "leg", SimSpec(profile="legacy")),
            "gfx942": install(base / "g942", SimSpec(gfx="gfx942", cu_num=304))}


def test_blockscale_rebuild_rule(nodes, tmp_path):
    inst = nodes["current"]
    imp = shapes_for("a8w8_blockscale", "improved", 2)
    reg = shapes_for("a8w8_blockscale", "regressed", 1)
    bad = shapes_for("a8w8_blockscale", "failed", 1)
    shapes = imp + reg + bad
    tuned = tmp_path / "tuned.csv"
    env = {"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": str(tuned), "AITER_JIT_DIR": str(tmp_path / "jit")}
    bench = ["op_tests/test_gemm_a8w8_blockscale.py", "-m", *[str(s["m"]) for s in shapes], "-nk", "1536,7168",
             "--ck_preshuffle", "False"]

    def measure(extra=None):
        r = py(inst, *bench, env=dict(env, **(extra or {})))
        assert r.returncode == 0, r.stderr
        return {int(row["m"]): float(row["ck us"]) for row in markdown_table(r.stderr, "gemm_a8w8_blockscale")}, r

    before, r0 = measure()
    assert "start build [module_gemm_a8w8_blockscale]" in r0.stderr
    assert before == {s["m"]: pm.bench_value("a8w8_blockscale", s, "ck us") for s in shapes}
    assert r0.stderr.count("not found tuned config in " + str(tuned)) == 4
    unt = untuned_csv(tmp_path / "u.csv", "a8w8_blockscale", shapes)
    assert py(inst, *tune_argv(inst, "a8w8_blockscale", unt, tuned), env=env).returncode == 1  # one failed
    stale, r1 = measure({"AITER_LOG_TUNED_CONFIG": "1"})
    # forgot AITER_REBUILD=1: no gain through the stale main module; a cktile row is served through the
    # table's _cktile module, which no process had built yet: built now, from the new table (as AITER does)
    cktile = {int(r["M"]) for r in csv.DictReader(tuned.open()) if r.get("libtype") == "cktile"}
    assert cktile & {s["m"] for s in imp}, "the simulated tuner's winners hold a cktile row"
    assert {m: v for m, v in stale.items() if m not in cktile} == {m: v for m, v in before.items() if m not in cktile}
    assert all(stale[m] < before[m] for m in cktile & {s["m"] for s in imp})
    assert "start build [module_gemm_a8w8_blockscale]" not in r1.stderr
    assert "start build [module_gemm_a8w8_blockscale_cktile]" in r1.stderr
    assert r1.stderr.count("found padded_M") == 3           # ... although the Python-side lookup finds the rows
    after, r2 = measure({"AITER_REBUILD": "1"})
    assert "start build [module_gemm_a8w8_blockscale]" in r2.stderr
    for s in shapes:
        tuned_from = None if s in bad else s
        assert after[s["m"]] == pm.bench_value("a8w8_blockscale", s, "ck us", tuned_from=tuned_from)
    assert all(after[s["m"]] < before[s["m"]] for s in imp)
    assert after[reg[0]["m"]] > before[reg[0]["m"]]         # tuned, yet slower in the bench
    assert after[bad[0]["m"]] == before[bad[0]["m"]]


def test_choices_rejection(nodes):
    r = py(nodes["legacy"], "op_tests/test_gemm_a8w8_blockscale.py", "-m", "16384", "-nk", "1536,7168")
    assert r.returncode == 2 and "argument -m: invalid choice: 16384" in r.stderr
    r = py(nodes["current"], "op_tests/test_gemm_a8w8_blockscale.py", "-m", "16384", "-nk", "1536,7168",
           "--ck_preshuffle", "False")
    assert r.returncode == 0
    moe = ["op_tests/test_moe_2stage.py", "-t", "2048", "-q", "2", "-e", "8", "-k", "2", "-dim", "1024,256"]
    r = py(nodes["current"], *moe)
    assert r.returncode == 2 and "argument -t/--tokenNum: invalid choice: 2048" in r.stderr
    assert py(nodes["legacy"], *moe).returncode == 0


def test_table_shapes_per_version(nodes):
    cur = py(nodes["current"], "op_tests/test_gemm_a8w8_blockscale.py", "-m", "16", "-nk", "1536,7168")
    rows = markdown_table(cur.stderr, "gemm_a8w8_blockscale")
    assert [r["ck_preshuffle"] for r in rows] == ["True", "False"]
    assert "triton us" in rows[0] and rows[1]["triton us"] == "nan" and "asm us" in rows[0]
    assert "COMPLETE PERFORMANCE SUMMARY (All Columns)" in cur.stdout
    assert "calling test_gemm(dtype                        = torch.bfloat16," in cur.stderr
    leg = py(nodes["legacy"], "op_tests/test_gemm_a8w8_blockscale.py", "-m", "16", "-nk", "1536,7168")
    assert list(markdown_table(leg.stderr, "gemm_a8w8_blockscale")[0]) == [
        "dtype", "m", "n", "k", "ck_preshuffle", "ck us", "ck TFLOPS", "ck TB/s", "ck err"]
    a8 = py(nodes["current"], "op_tests/test_gemm_a8w8.py", "-mnk", "64,1280,8192", "-d", "bf16")
    rows = markdown_table(a8.stderr, "gemm_a8w8")
    assert [r["quantDtype"] for r in rows] == ["torch.int8", "torch.float8_e4m3fn"]
    assert "q_dtype_w:torch.int8, not found tuned config in" in a8.stderr
    assert float(rows[0]["ck bpreshuffle us"]) == pm.bench_value(
        "a8w8_bpreshuffle", {"m": 64, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"}, "ck bpreshuffle us")
    a4 = py(nodes["current"], "op_tests/test_gemm_a4w4.py", "-mnk", "32,7168,2048")
    assert list(markdown_table(a4.stderr, "gemm_a4w4")[0]) == ["dtype", "M", "N", "K", "us", "TFLOPS", "TB/s", "err"]
    a4o = py(nodes["gfx942"], "op_tests/test_gemm_a4w4.py", "-mnk", "32,7168,2048")
    assert list(markdown_table(a4o.stderr, "gemm_a4w4")[0]) == ["dtype", "M", "N", "K"]


def test_batched_outputs(nodes):
    perf = re.compile(r"\[perf\] dim: \((\d+), (\d+), (\d+), (\d+)\)\s+dtype: (\S+), torch avg: ([\d.]+)\s+us, "
                      r"ck avg: ([\d.]+)\s+us, uplift: (-?[\d.]+)%")
    r = py(nodes["current"], "op_tests/test_batched_gemm_a8w8.py", "-b", "16", "-s", "32,1280,8192", "64,1280,8192")
    got = [m.groups() for m in perf.finditer(ANSI.sub("", r.stderr))]
    assert len(got) == 2
    s = {"b": 16, "m": 32, "n": 1280, "k": 8192}
    assert float(got[0][6]) == pm.bench_value("batched_a8w8", s, "ck avg")
    assert "shape is B:16, M:32, N:1280, K:8192, not found tuned config in CKGEMM" in r.stderr
    assert py(nodes["current"], "op_tests/test_batched_gemm_a8w8.py", "-b", "8").returncode == 2
    bf = py(nodes["current"], "op_tests/test_batched_gemm_bf16.py", "-b", "8", "-s", "16,1024,4096")
    rows = markdown_table(bf.stderr, "batched_gemm_bf16")
    assert [r["layout"] for r in rows] == ["bmn", "mbn"] and rows[1]["ck us"] == "nan"
    assert "dtype is bf16, not found tuned config in CKGEMM" in bf.stderr
    leg = py(nodes["legacy"], "op_tests/test_batched_gemm_bf16.py", "-s", "16,1024,4096")
    assert len(perf.findall(ANSI.sub("", leg.stderr))) == 1 and "summary (markdown)" not in leg.stderr


def _moe_dims():
    for inter in range(256, 4096, 128):
        base = dict(MOE_BASE, inter_dim=inter, topk=8)
        if all(pm.outcome("moe_2stages", dict(base, token=t)) == "improved" for t in (16, 64)):
            return base
    raise AssertionError("no dims")


@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_moe_tuned_rows_and_bypass(nodes, tmp_path, profile):
    inst = nodes[profile]
    base = _moe_dims()
    shapes = [dict(base, token=t) for t in (16, 64)]
    tuned = tmp_path / "tuned_fmoe.csv"
    env = {"AITER_CONFIG_FMOE": str(tuned)}
    unt = untuned_csv(tmp_path / "u.csv", "moe_2stages", shapes)
    r = py(inst, *tune_argv(inst, "moe_2stages", unt, tuned), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Tuning result for") == 2
    bench = ["op_tests/test_moe_2stage.py", "-t", "16", "64", "-q", "5", "-e", "257", "-k", "8",
             "-dim", f"7168,{base['inter_dim']}", "-p", "t"]
    b = py(inst, *bench, env=env)
    assert b.returncode == 0, b.stderr
    err = ANSI.sub("", b.stderr)
    us = {int(r["token"]): float(r["us"]) for r in markdown_table(err, "moe_2stage")}
    if profile == "current":
        head = "('gfx950', 256, 64, 7168, "
        assert head in err and "<ActivationType.Silu: 0>" in err
        assert "[fused_moe] using 2stage (kernelName1='moe_ck2stages_gemm1_" in err
        assert "bypass tuned results" not in err
        assert us == {t: pm.bench_value("moe_2stages", dict(base, token=t), "us", tuned_from=dict(base, token=t))
                      for t in (16, 64)}
    else:
        assert "(256, 16, 7168, " in err and "'ActivationType.Silu'" in err
        assert "bypass tuned results for fp8 blockscale" in err            # 16 * 8 <= 128
        assert us[16] == pm.bench_value("moe_2stages", dict(base, token=16), "us")
        assert us[64] == pm.bench_value("moe_2stages", dict(base, token=64), "us", tuned_from=dict(base, token=64))
    header, rows = read_csv(tuned)
    assert header[0] == ("gfx" if profile == "current" else "cu_num") and len(rows) == 2
