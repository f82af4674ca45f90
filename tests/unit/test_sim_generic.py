"""The simulated node serves a variant it has no file of its own for from its registry facts alone
(orchestrator/sim/fromfacts.py, aiter/_sim/generic.py): a common-CLI tuner and an op_test per benchmark style,
whose output the product's parsers read as the perf model says."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator import gen_variant_facts as gen
from orchestrator import sim
from orchestrator.parsing.bench import parse_bench_log
from orchestrator.sim import fromfacts, localnode, perf_model
from orchestrator.steps.bench import measured, plan_bench
from orchestrator.variants import BenchSpec
from orchestrator.variants_mx import MX_VARIANTS
from orchestrator.sim import TREE
from tests.unit.test_variant_facts import FAKE

BATCHED = dataclasses.replace(
    FAKE, name="batched_fake", family="batched", untuned_columns=("B", "M", "N", "K"),
    tune_script="csrc/batched_fake/batched_fake_tune.py", tuned_csv="aiter/configs/fake_tuned_batched_gemm.csv",
    untuned_csv="aiter/configs/fake_untuned_batched_gemm.csv", config_env="AITER_CONFIG_FAKE_BATCHED_GEMM",
    libtypes=(), bench=BenchSpec(script="op_tests/test_batched_fake.py", style="s_mnk", output="perf_lines",
                                 metric="ck avg", higher_is_better=False,
                                 key_columns={"b": "b", "m": "m", "n": "n", "k": "k"}))
M_NK = dataclasses.replace(
    FAKE, name="m_nk_fake", tune_script="csrc/m_nk_fake/m_nk_fake_tune.py", tune_flags=("--preshuffle",),
    tuned_csv="aiter/configs/m_nk_fake_tuned_gemm.csv", untuned_csv="aiter/configs/m_nk_fake_untuned_gemm.csv",
    config_env="AITER_CONFIG_GEMM_M_NK_FAKE", requires_gfx=frozenset({"gfx950"}),
    bench=BenchSpec(script="op_tests/test_m_nk_fake.py", style="m_nk", output="markdown", metric="ck TFLOPS",
                    higher_is_better=True, key_columns={"m": "m", "n": "n", "k": "k"},
                    extra_args=("--ck_preshuffle", "True"), row_filter={"ck_preshuffle": "True"}))


@pytest.mark.parametrize("variant,shapes", [
    (BATCHED, [{"b": 4, "m": m, "n": 1024, "k": 4096} for m in (1, 32, 64)]),
    (M_NK, [{"m": m, "n": 7168, "k": 2048} for m in (1, 16, 64)]),
])
@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_the_generic_tuner_and_op_test_serve_a_variant_from_its_facts(monkeypatch, tmp_path, variant, shapes,
                                                                      profile):
    monkeypatch.setitem(perf_model.FACTS, variant.name, gen.sim_facts(variant))
    inst = sim.install(tmp_path / "node", sim.SimSpec(profile=profile))
    fromfacts.serve_variant(inst, variant.name, gen.sim_facts(variant))
    root = inst.aiter_root
    (tmp_path / "u.csv").write_text(",".join(variant.untuned_columns) + "\n" + "".join(
        ",".join(str(s[c.lower()]) for c in variant.untuned_columns) + "\n" for s in shapes))
    staging = str(tmp_path / "staging.csv")
    out = localnode.python(inst, inst.script(variant.tune_script), "-i", str(tmp_path / "u.csv"), "-o", staging,
                           "--mp", "1", *variant.tune_flags)
    failed = [s for s in shapes if perf_model.outcome(variant.name, s) == "failed"]
    assert out.returncode == (1 if failed else 0), out.stderr
    header = open(staging).read().splitlines()[0].split(",")
    assert header[:len(header) - 7] == ([] if profile == "legacy" else ["gfx"]) + ["cu_num", *variant.untuned_columns,
                                                                                   *(["libtype"] if variant.libtypes
                                                                                     else [])]
    [call] = plan_bench(variant, shapes)
    for table, tuned in ((f"{root}/{variant.tuned_csv}", False), (staging, True)):
        run = localnode.run(inst, ["python3", f"{root}/{call.script}", *call.args], env={variant.config_env: table})
        assert run.returncode == 0, run.stderr
        got = measured(variant.bench, shapes, parse_bench_log(run.stdout + run.stderr, variant.bench))
        want = [perf_model.bench_value(variant.name, s, variant.bench.metric,
                                       tuned_from=s if tuned and s not in failed else None) for s in shapes]
        assert [r["value"] for r in got] == want


def test_install_serves_a_registry_variant_whose_tuner_the_tree_lacks_where_its_release_ships_it(
        monkeypatch, tmp_path):
    """A variant added to the registry (and the generated sim/variant_table.py) runs on the simulated node with
    no sim file of its own; a release older than its `since` lacks its tuner, as the real one would."""
    import json

    from orchestrator.sim import variant_table
    newer = dataclasses.replace(M_NK, name="newer_fake", tune_script="csrc/newer_fake/newer_fake_tune.py",
                                since=(0, 1, 21))
    monkeypatch.setitem(variant_table.VARIANTS, M_NK.name, gen.sim_facts(M_NK))
    monkeypatch.setitem(variant_table.VARIANTS, newer.name, gen.sim_facts(newer))
    for profile, served in (("current", {M_NK.name}), ("newest", {M_NK.name, newer.name})):
        inst = sim.install(tmp_path / profile, sim.SimSpec(profile=profile))
        extra = json.loads((tmp_path / profile / "aiter" / "aiter" / "_sim" / perf_model.EXTRA_FILE).read_text())
        # besides the fakes: the registry's MX tuners (variants_mx.py) where the release ships them, from their
        # facts alone; never a variant whose tuner the tree has (a4w4_blockscale shares its directory)
        mx = {v.name for v in MX_VARIANTS if not (TREE / v.tune_script).is_file()} if profile == "newest" else set()
        assert set(extra) == served | mx
        for v in (M_NK, newer):
            assert (tmp_path / profile / "aiter" / v.tune_script).is_file() == (v.name in served)
        assert "csrc/newer_fake" in sim.unshipped_tuners(inst.version) or profile == "newest"
        help_ = localnode.python(inst, inst.script(M_NK.tune_script), "--help")
        assert help_.returncode == 0 and "--preshuffle" in help_.stdout
