"""The simulated --run_config (aiter/_sim/runconfig.py) as upstream base_tuner prints it, timed by the perf model:
without a CSV the default kernel of every -i shape, with one the table's rows (AITER_REBUILD=2: the operator's
modules rebuilt); a tuner without its own run_config prints 'no results'; legacy has no flag."""

from __future__ import annotations

import pytest

from orchestrator.parsing.bench import bench_results
from orchestrator.parsing.runconfig import parse_runconfig_rows, unavailable
from orchestrator.sim import SimSpec, install
from orchestrator.sim import perf_model as pm
from orchestrator.variants import get_variant, profile_for

from .test_sim_common import py, read_csv
from .test_sim_tuner import shapes_for, tune_argv, untuned_csv


@pytest.fixture(scope="module")
def newest(tmp_path_factory):
    return install(tmp_path_factory.mktemp("rcnode") / "n", SimSpec(profile="newest"))


def _values(text, variant="a6w4"):
    bench = get_variant(variant).resolve(profile_for((0, 1, 29))).bench
    return {(r["key"]["m"], r["key"]["n"], r["key"]["k"]): r["value"]
            for r in bench_results(parse_runconfig_rows(text), bench)}


def test_a6w4_run_config_before_default_after_the_tuned_table(newest, tmp_path):
    v = "a6w4"
    kept, guard = shapes_for(v, "improved", 1), shapes_for(v, "regressed", 1)
    shapes = kept + guard
    unt, tuned = untuned_csv(tmp_path / "u.csv", v, shapes), tmp_path / "t.csv"
    r = py(newest, *tune_argv(newest, v, unt, tuned))
    assert r.returncode == 0, r.stdout + r.stderr
    key = lambda s: (s["m"], s["n"], s["k"])  # noqa: E731

    before = py(newest, v_script(v), "-i", unt, "-o", tmp_path / "scratch_b.csv", "--run_config")
    assert before.returncode == 0, before.stderr
    assert "=== Running production operator benchmark (default) ===" in before.stdout
    assert "============= Benchmark (default) Benchmark Results =============" in before.stdout
    assert f"{'Shape':<40} | {'E2E(us)':>10} | {'Status':>8}" in before.stdout
    assert f"keys: gfx=gfx950, cu_num=256, M={kept[0]['m']}, N={kept[0]['n']}, K={kept[0]['k']}" in before.stdout
    assert "Setting AITER_CONFIG" not in before.stderr + before.stdout
    got = _values(before.stdout)
    assert got == {key(s): round(pm.default_us(v, s), 2) for s in shapes}     # the default kernel, every shape
    assert not (tmp_path / "scratch_b.csv").exists()                          # -o is never written

    after = py(newest, v_script(v), "-i", unt, "-o", tmp_path / "scratch_a.csv", "--run_config", tuned)
    assert after.returncode == 0, after.stderr
    out = after.stdout + after.stderr
    assert "Benchmark (tuned) Benchmark Results" in out and f"Setting AITER_CONFIG_GEMM_A6W4_ASM={tuned}" in out
    got = _values(after.stdout)
    # the improved shape runs its tuned row; the gain guard's FALLBACK row is the default kernel's
    assert got[key(kept[0])] == round(pm.bench_us(v, kept[0], tuned_from=kept[0]), 2) < got[key(kept[0])] * 2
    assert got[key(kept[0])] < round(pm.default_us(v, kept[0]), 2)
    assert got[key(guard[0])] == round(pm.default_us(v, guard[0]), 2)
    # AITER_REBUILD=2: the operator's modules are built again in this process
    assert "finish build [module_gemm_a6w4_asm]" in out and "finish build [module_quant]" in out
    assert len(read_csv(tuned)[1]) == len(got)


def test_a_tuner_that_does_not_override_run_config_prints_no_results(newest, tmp_path):
    v = "a4w4_blockscale"       # not in the simulated PRODUCTION_OPS: the base class's run_config
    s = shapes_for(v, "improved", 1)
    unt = untuned_csv(tmp_path / "u.csv", v, s)
    r = py(newest, v_script(v), "-i", unt, "-o", tmp_path / "x.csv", "--run_config")
    assert r.returncode == 0, r.stderr
    assert "Benchmark (default): no results" in r.stdout
    assert "run_config not implemented for" in r.stderr
    assert "does not implement --run_config" in unavailable(r.stdout + r.stderr)


def test_legacy_has_no_run_config_flag(tmp_path_factory, tmp_path):
    inst = install(tmp_path_factory.mktemp("rcleg") / "n", SimSpec(profile="legacy"))
    v = "a4w4_blockscale"
    unt = untuned_csv(tmp_path / "u.csv", v, shapes_for(v, "improved", 1))
    r = py(inst, v_script(v, (0, 1, 11)), "-i", unt, "-o", tmp_path / "x.csv", "--run_config")
    assert r.returncode == 2 and "unrecognized arguments: --run_config" in r.stderr


def v_script(name, version=(0, 1, 29)):
    return get_variant(name).resolve(profile_for(version)).tune_script.format(gfx="gfx950")
