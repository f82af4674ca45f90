"""The simulated MX asm runtimes (aiter/ops/gemm_op_a6w4.py, gemm_op_a4w6.py via gemm_op_mixed_mxfp.py, as
ROCm/aiter 610d1e8e has them): exact shape, then the physical one (M/N to 256, K to 128), their lines only with
AITER_LOG_TUNED_CONFIG and once per shape per process; the --run_config production benchmark goes through
that lookup; shapelib reads the lines they print. gemm_op_a16w8_mxfp8.py (59663079): its M bucket."""

from __future__ import annotations

import pytest

from orchestrator.shapelib import shapelog
from orchestrator.sim import SimSpec, install
from orchestrator.sim import perf_model as pm

from .test_sim_common import py, write_csv
from .test_sim_runconfig import v_script
from .test_sim_tuner import shapes_for, untuned_csv

HEADER = ["gfx", "cu_num", "M", "N", "K", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
SERVE = ("import sys; from aiter.ops import gemm_op_{v} as o\n"
         "for s in sys.argv[1:]:\n"
         "    m, n, k = map(int, s.split(','))\n"
         "    for _ in range(2): print('us', s, o.gemm_{v}(m, n, k))\n")


@pytest.fixture(scope="module")
def newest(tmp_path_factory):
    return install(tmp_path_factory.mktemp("mxnode") / "n", SimSpec(profile="newest"))


def _physical(v):
    """A shape on the kernel's physical grid (M/N multiples of 256, K of 128) that tuning improves."""
    return next(s for s in ({"m": 256 * i, "n": 4096, "k": 4096} for i in range(1, 200))
                if pm.outcome(v, s) == "improved")


def _row(v, s):
    kn = pm.tune_result(v, s)["kernelName"]
    return ["gfx950", 256, s["m"], s["n"], s["k"], 1, 0, 1.0, kn, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("v,fam", [("a6w4", "A6W4"), ("a4w6", "A4W6")])
def test_exact_then_padded_lookup_lines_once_per_shape(newest, tmp_path, v, fam):
    row = _physical(v)
    M, odd = row["m"], {"m": row["m"] - 12, "n": 4000, "k": 4000}      # pads to row
    table = write_csv(tmp_path / "t.csv", HEADER, [_row(v, row)])
    env = {f"AITER_CONFIG_GEMM_{fam}_ASM": str(table), "AITER_LOG_TUNED_CONFIG": "1"}
    r = py(newest, "-c", SERVE.format(v=v), f"{M},4096,4096", f"{M - 12},4000,4000", "16,2048,7168", env=env)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert err.count(f"{fam} shape M:{M} N:4096 K:4096 matched exact config M:{M} N:4096 K:4096 in {table}: ") == 1
    assert err.count(f"{fam} shape M:{M - 12} N:4000 K:4000 matched padded config M:{M} N:4096 K:4096 "
                     f"in {table}: ") == 1
    assert err.count(f"{fam} shape M:16 N:2048 K:7168 has no tuned config in {table}; "
                     "using the safe default kernel") == 1
    us = {ln.split()[1]: float(ln.split()[2]) for ln in r.stdout.splitlines() if ln.startswith("us ")}
    assert us[f"{M},4096,4096"] == pm.bench_us(v, row, tuned_from=row) < pm.default_us(v, row)   # its row
    assert us[f"{M - 12},4000,4000"] == pm.bench_us(v, odd, tuned_from=row)
    assert us["16,2048,7168"] == pm.default_us(v, {"m": 16, "n": 2048, "k": 7168})
    res = shapelog.parse_stream(iter(err.splitlines(True)))
    assert res.shapes == {v: [{"m": 16, "n": 2048, "k": 7168}]}
    assert res.hit_shapes[v] == [row, odd]
    quiet = py(newest, "-c", SERVE.format(v=v), "16,2048,7168", env={f"AITER_CONFIG_GEMM_{fam}_ASM": str(table)})
    assert quiet.returncode == 0 and f"{fam} shape" not in quiet.stderr      # the gate: nothing without it


def test_a_table_with_split_k_rows_raises_as_upstream(newest, tmp_path):
    row = _physical("a6w4")
    bad = _row("a6w4", row)
    bad[6] = 2
    table = write_csv(tmp_path / "t.csv", HEADER, [bad])
    r = py(newest, "-c", SERVE.format(v="a6w4"), "%(m)d,%(n)d,%(k)d" % row, env={"AITER_CONFIG_GEMM_A6W4_ASM": str(table)})
    assert r.returncode != 0 and "A6W4 tuned configs must use splitK=0" in r.stderr


def test_run_config_goes_through_the_runtime_lookup(newest, tmp_path):
    v = "a6w4"
    kept = shapes_for(v, "improved", 1)
    unt = untuned_csv(tmp_path / "u.csv", v, kept)
    table = write_csv(tmp_path / "t.csv", HEADER, [_row(v, kept[0])])
    after = py(newest, v_script(v), "-i", unt, "-o", tmp_path / "x.csv", "--run_config", table,
               env={"AITER_LOG_TUNED_CONFIG": "1"})
    assert after.returncode == 0, after.stderr
    s = kept[0]
    assert (f"A6W4 shape M:{s['m']} N:{s['n']} K:{s['k']} matched exact config M:{s['m']} N:{s['n']} K:{s['k']} "
            f"in {table}: ") in after.stderr
    before = py(newest, v_script(v), "-i", unt, "-o", tmp_path / "y.csv", "--run_config",
                env={"AITER_LOG_TUNED_CONFIG": "1"})
    assert before.returncode == 0 and "A6W4 shape" not in before.stderr   # the default selector's kernelName


A16W8 = ("import sys; from aiter.ops import gemm_op_a16w8_mxfp8 as o\n"
         "for s in sys.argv[1:]:\n"
         "    m, n, k = map(int, s.split(','))\n"
         "    for _ in range(2): print('us', s, o.gemm_a16w8_mxfp8_asm(m, n, k))\n")


def test_a16w8_mxfp8_bucket_lookup_lines_and_a_missing_table(tmp_path_factory, tmp_path):
    """gemm_op_a16w8_mxfp8.py: the row with the smallest tuned M >= M per (gfx, cu_num, N, K) serves a shape;
    its hit names that bucket, its miss gfx/cu; a table that does not exist raises (no silent default)."""
    inst = install(tmp_path_factory.mktemp("a16w8") / "n", SimSpec(profile="newest", gfx="gfx942", cu_num=304))
    v = "a16w8_mxfp8"
    bucket = next(s for s in ({"m": m, "n": 4096, "k": 5120} for m in range(8, 65, 8))
                  if pm.outcome(v, s, "gfx942", 304) == "improved")
    kn = pm.tune_result(v, bucket, "gfx942", 304)["kernelName"]
    table = write_csv(tmp_path / "t.csv", HEADER, [["gfx942", 304, bucket["m"], 4096, 5120, 1, 4, 1.0, kn, 1, 1, 0]])
    env = {"AITER_CONFIG_GEMM_A16W8_MXFP8_ASM": str(table), "AITER_LOG_TUNED_CONFIG": "1"}
    M = bucket["m"]
    r = py(inst, "-c", A16W8, f"{M - 3},4096,5120", f"{M + 1},4096,5120", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"A16W8 MXFP8 shape M:{M - 3} N:4096 K:5120 uses the M:{M} entry of {table}: "
                          f"{kn} splitK 4") == 1
    assert r.stderr.count(f"A16W8 MXFP8 shape M:{M + 1} N:4096 K:5120 has no tuned config for gfx942/304 in "
                          f"{table}; using the default kernel") == 1
    us = {ln.split()[1]: float(ln.split()[2]) for ln in r.stdout.splitlines() if ln.startswith("us ")}
    odd = {"m": M - 3, "n": 4096, "k": 5120}
    assert us[f"{M - 3},4096,5120"] == pm.bench_us(v, odd, "gfx942", 304, tuned_from=bucket)
    res = shapelog.parse_stream(iter(r.stderr.splitlines(True)))
    assert res.shapes == {v: [{"m": M + 1, "n": 4096, "k": 5120}]} and res.hit_shapes == {v: [odd]}
    gone = py(inst, "-c", A16W8, "8,4096,5120", env={"AITER_CONFIG_GEMM_A16W8_MXFP8_ASM": str(tmp_path / "no.csv")})
    assert gone.returncode != 0 and "does not exist (check AITER_CONFIG_GEMM_A16W8_MXFP8_ASM)" in gone.stderr


def test_a16w8_mxfp8_serves_from_its_shipped_header_only_table(tmp_path_factory):
    """The newest profile ships the A16W8 MXFP8 runtime table header only, as upstream (its lookup raises on a
    missing file): a served shape is a miss logged once per process, and serve --mx takes the family."""
    inst = install(tmp_path_factory.mktemp("a16w8s") / "n", SimSpec(profile="newest", gfx="gfx942", cu_num=304))
    table = f"{inst.aiter_root}/aiter/configs/a16w8_mxfp8_asm_tuned_gemm.csv"
    r = py(inst, "-m", "aiter._sim.serve", "--mx", "a16w8_mxfp8:7168,2048", "--m", "1,16", "--steps", "2",
           env={"AITER_LOG_TUNED_CONFIG": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"A16W8 MXFP8 shape M:1 N:7168 K:2048 has no tuned config for gfx942/304 in {table}") == 1
    res = shapelog.parse_stream(iter(r.stderr.splitlines(True)))
    assert res.shapes == {"a16w8_mxfp8": [{"m": 1, "n": 7168, "k": 2048}, {"m": 16, "n": 7168, "k": 2048}]}
