"""The simulated MXFP8 BMM bpreshuffle tuner and runtime lookup (newest profile), as ROCm/aiter has them:
csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py (f081855b / 4cb36987, OpusBmmMxscaleTuner's CLI),
its README (fb06b88c) and aiter/ops/opus/policy.py lookup_mxscale_bmm_config."""

import pytest

from orchestrator.sim import SimSpec, install
from orchestrator.sim import perf_model as pm
from orchestrator.sim.newest import BMM_MODEL_TABLE
from orchestrator.variants import VARIANTS

from .test_sim_common import py, read_csv, write_csv

V = VARIANTS["bmm_a8w8_mxscale_bpreshuffle"]
HEADER = ["gfx", "b", "m", "n", "k", "w_scale_block", "libtype", "kernelId", "splitK", "us", "kernelName",
          "tflops", "bw", "errRatio"]
MISS = "has no MXFP8 BMM tuned row"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    return install(tmp_path_factory.mktemp("bmm") / "n", SimSpec(profile="newest"))


def ok_shapes(count, block="128x128", want="improved"):
    return pm.shapes_with_outcome(V.name, want, {"b": 4, "n": 2048, "k": 8192, "w_scale_block": block}, "m", 1, count)


def test_only_the_newest_releases_ship_it(tmp_path):
    install(tmp_path / "cur", SimSpec())
    assert not (tmp_path / "cur" / "aiter" / V.tune_script).exists()
    assert not (tmp_path / "cur" / "aiter" / "aiter" / "ops" / "opus").exists()


def test_minus_k_is_the_k_dimension(node, tmp_path):
    """OpusBmmMxscaleTuner removes -k/--splitK and reuses -k for K: a bare -k is an argparse error (exit 2)."""
    unt = write_csv(tmp_path / "u.csv", ["b", "m", "n", "k", "w_scale_block"], [[4, 16, 2048, 8192, "128x128"]])
    r = py(node, V.tune_script, "-i", unt, "-o", tmp_path / "t.csv", "-k")
    assert r.returncode == 2 and "argument -k/--K: expected one argument" in r.stderr
    r = py(node, V.tune_script, "-i", unt, "-o", tmp_path / "t.csv", "--splitK")
    assert r.returncode == 2 and "unrecognized arguments: --splitK" in r.stderr
    assert not (tmp_path / "t.csv").exists()


def test_blocks_are_filtered_or_expanded_and_rows_are_keyed_without_cu_num(node, tmp_path):
    a, b = ok_shapes(2)
    explicit = write_csv(tmp_path / "e.csv", ["b", "m", "n", "k", "w_scale_block"],
                         [[4, a["m"], 2048, 8192, "128x128"], [4, a["m"], 2048, 8192, "1x32"]])
    out = tmp_path / "t.csv"
    r = py(node, V.tune_script, "-i", explicit, "-o", out)              # default --w_scale_block 32x32,128x128
    assert r.returncode == 0, r.stderr
    header, rows = read_csv(out)
    assert header == HEADER and [(x["m"], x["w_scale_block"]) for x in rows] == [(str(a["m"]), "128x128")]
    assert float(rows[0]["us"]) == pm.tune_result(V.name, a)["us"] and int(rows[0]["splitK"]) >= 1
    assert all(x["kernelId"] == "-1" for x in rows if x["libtype"] == "flydsl")
    # shape-only input, upper case with g for b: one row per default block
    bare = write_csv(tmp_path / "s.csv", ["G", "M", "N", "K"], [[4, b["m"], 2048, 8192]])
    out2 = tmp_path / "t2.csv"
    r = py(node, V.tune_script, "-i", bare, "-o", out2, "--libtype", "opus")
    assert r.returncode in (0, 1), r.stderr                             # a block may find no kernel
    got = {x["w_scale_block"] for x in read_csv(out2)[1]}
    assert got <= {"32x32", "128x128"} and "128x128" in got and {x["libtype"] for x in read_csv(out2)[1]} == {"opus"}


def test_flydsl_alone_refuses_a_1x32_row_and_other_gpus_refuse_it_all(node, tmp_path):
    unt = write_csv(tmp_path / "u.csv", ["b", "m", "n", "k", "w_scale_block"], [[4, 16, 2048, 8192, "1x32"]])
    r = py(node, V.tune_script, "-i", unt, "-o", tmp_path / "t.csv", "--libtype", "flydsl", "--w_scale_block", "1x32")
    assert r.returncode == 1 and "1x32 is supported by OPUS; use --libtype opus or all" in r.stderr
    n942 = install(tmp_path / "n942", SimSpec(profile="newest", gfx="gfx942", cu_num=304))
    r = py(n942, V.tune_script, "-i", unt, "-o", tmp_path / "t.csv")
    assert r.returncode == 1 and "MXFP8 BMM tuning is gfx950-only; detected 'gfx942'" in r.stderr
    r = py(node, V.tune_script, "-g", "4", "-o", tmp_path / "t.csv")
    assert r.returncode == 1 and "-g/--batch_g and -m/--M must be provided together" in r.stderr
    assert not (tmp_path / "t.csv").exists()


def test_without_i_it_retunes_the_model_tables_shapes(node, tmp_path):
    """The trap tune-remote avoids by always passing -i and -o: no -i takes the DSV4 model table's shapes."""
    out = tmp_path / "t.csv"
    r = py(node, V.tune_script, "-o", out)
    assert r.returncode in (0, 1), r.stderr
    assert "re-tuning shapes from" in r.stderr and BMM_MODEL_TABLE in r.stderr
    model = read_csv(f"{node.host_path(node.package_dir)}/configs/{BMM_MODEL_TABLE}")[1]
    tuned = {(x["b"], x["m"]) for x in read_csv(out)[1]}
    assert tuned and tuned <= {(x["b"], x["m"]) for x in model}



def test_bpreshuffle_only_defaults_o_the_model_table(node, tmp_path):
    """The subclass forces --bpreshuffle; its opus base (bce5c477 on) keeps -o ("Only a default: -o is
    tune_file"): an explicit --bpreshuffle -o X writes X and leaves the shipped model table alone."""
    model = f"{node.host_path(node.package_dir)}/configs/{BMM_MODEL_TABLE}"
    before = open(model).read()
    unt = write_csv(tmp_path / "u.csv", ["b", "m", "n", "k"], [[16, 1, 1024, 4096]])
    out = tmp_path / "t.csv"
    r = py(node, V.tune_script, "-i", unt, "-o", out, "--bpreshuffle", "--libtype", "opus")
    assert r.returncode in (0, 1), r.stderr
    assert read_csv(out)[1] and open(model).read() == before


LOOKUP = """
import sys
from aiter.ops.opus.policy import lookup_mxscale_bmm_config as look
for args, block in [((4, 16, 2048, 8192), "32x32"), ((4, 16, 2048, 8192), "32x32"), ((16, 1, 1024, 4096), "128x128"),
                    ((16, 200, 1024, 4096), "128x128"), ((16, 200, 1024, 4096), "1x32")]:
    row = look(*args, w_scale_block=block)
    print("HIT" if row else "MISS", row and row["kernelName"], flush=True)
"""


def test_the_runtime_lookup_logs_a_miss_once_per_shape_per_process(node):
    r = py(node, "-c", LOOKUP)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == [
        "MISS None", "MISS None",
        "HIT bmm_a8w8_mxscale_bpreshuffle_opus_256x16x64x256_intrawave_v1",          # the model table's row
        "HIT bmm_a8w8_mxscale_bpreshuffle_flydsl_256x64x128x128_intrawave_v2",       # M 200 -> getPaddedM 256
        "MISS None"]
    assert r.stderr.count(MISS) == 2       # lru_cached: the repeated shape logs once
    assert "shape B:4 M:16 N:2048 K:8192 w_scale 32x32 " + MISS in r.stderr
    assert "shape B:16 M:200 N:1024 K:4096 w_scale 1x32 " + MISS in r.stderr


def test_a_table_without_the_block_column_is_read_as_128x128(node, tmp_path):
    old = write_csv(tmp_path / "old.csv", [c for c in HEADER if c != "w_scale_block"],
                    [["gfx950", 2, 64, 512, 7168, "opus", 8320, 1, 5.0, "k", 1.0, 1.0, 0.0]])
    code = ("from aiter.ops.opus.policy import lookup_mxscale_bmm_config as look\n"
            "print(bool(look(2, 64, 512, 7168)), bool(look(2, 64, 512, 7168, w_scale_block='32x32')))\n")
    r = py(node, "-c", code, env={V.config_env: str(old)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True False"
    assert "has no 'w_scale_block' column; reading its rows as 128x128" in r.stderr


def _rc_times(text):
    from orchestrator.parsing.runconfig import parse_runconfig_rows
    return {(r["b"], r["m"], r["w_scale_block"]): r["E2E(us)"] for r in parse_runconfig_rows(text)}


def test_run_config_without_a_csv_times_the_dispatch_of_the_env_table(node, tmp_path):
    """OpusBmmMxscaleTuner.run_config (index id 70216553721): no CSV -> _default_benchmark, the production op,
    which looks each shape up in AITER_CONFIG_* (policy.py): a staged row makes its shape faster; a shape the
    table lacks keeps the default kernel's time. With a CSV, each row's own kernel (_saved_benchmark)."""
    a, b = ok_shapes(2)
    shapes = write_csv(tmp_path / "s.csv", ["b", "m", "n", "k", "w_scale_block"],
                       [[4, s["m"], 2048, 8192, "128x128"] for s in (a, b)])
    one = write_csv(tmp_path / "one.csv", ["b", "m", "n", "k", "w_scale_block"], [[4, a["m"], 2048, 8192, "128x128"]])
    staged = tmp_path / "staged.csv"
    assert py(node, V.tune_script, "-i", one, "-o", staged).returncode == 0
    scratch = tmp_path / "scratch.csv"
    base = py(node, V.tune_script, "-i", shapes, "-o", scratch, "--run_config")
    tuned = py(node, V.tune_script, "-i", shapes, "-o", scratch, "--run_config", env={V.config_env: str(staged)})
    assert base.returncode == 0 and tuned.returncode == 0, base.stderr + tuned.stderr
    assert "Benchmark (default) Benchmark Results" in tuned.stdout and "keys: gfx=gfx950, b=4" in tuned.stdout
    dims = lambda s: {"b": 4, "m": s["m"], "n": 2048, "k": 8192, "w_scale_block": "128x128"}  # noqa: E731
    t0, t1 = _rc_times(base.stdout), _rc_times(tuned.stdout)
    ka, kb = (4, a["m"], "128x128"), (4, b["m"], "128x128")
    assert t0[ka] == round(pm.bench_us(V.name, dims(a)), 2) and t0[kb] == round(pm.bench_us(V.name, dims(b)), 2)
    assert t1[ka] == round(pm.bench_us(V.name, dims(a), tuned_from=dims(a)), 2) < t0[ka]
    assert t1[kb] == t0[kb]                                        # not in the env table: the default kernel
    assert not scratch.exists()                                    # -o is never written by --run_config
    saved = py(node, V.tune_script, "-i", shapes, "-o", scratch, "--run_config", staged)
    assert saved.returncode == 0, saved.stderr
    assert "Benchmark (tuned) Benchmark Results" in saved.stdout and _rc_times(saved.stdout) == {ka: t1[ka]}
