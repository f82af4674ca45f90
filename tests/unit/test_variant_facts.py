"""The helper's and the simulated node's variant facts come from the registry (review D-11): shapelib/variant_facts.py
and sim/variant_table.py are generated from orchestrator/variants.py; and a variant that follows AITER's common
tuner CLI is added by its entry alone (issue 35)."""

from __future__ import annotations

from pathlib import Path

from orchestrator import gen_variant_facts as gen
from orchestrator.shapelib import shapefmt, shaperules, variant_facts
from orchestrator.variants import (JIT_MODULES, LOGGED_ONLY_TUNED_CSV, MOE_KEY, VARIANTS, BenchSpec, KernelVariant,
                                  jit_modules)


def test_the_committed_facts_are_what_the_registry_generates():
    committed = gen.TARGET.read_text(encoding="utf-8")
    assert committed == gen.render(), (
        f"orchestrator/shapelib/variant_facts.py is stale (orchestrator/variants.py changed): "
        f"run `{gen.COMMAND}` and commit the file")
    assert gen.SIM_TARGET.read_text(encoding="utf-8") == gen.render_sim(), (
        f"orchestrator/sim/variant_table.py is stale (orchestrator/variants.py changed): "
        f"run `{gen.COMMAND}` and commit the file")


def test_shapefmt_reads_the_generated_facts():
    assert shapefmt.MOE_KEY is variant_facts.MOE_KEY and tuple(MOE_KEY) == variant_facts.MOE_KEY
    assert shapefmt.MOE_VARIANT == shaperules.MOE_VARIANT == "moe_2stages"
    assert not hasattr(shapefmt, "_FILE_STEMS")
    src = Path(shapefmt.__file__).read_text()
    assert "_tuned_gemm\"" not in src and "\"token\", \"model_dim\"" not in src   # no second copy


def test_every_gemm_variant_is_named_by_its_tuned_file():
    """A variant added to the registry is attributed from its tuned file's name with no edit to shapefmt."""
    owner: dict = {}      # tuned table -> the first variant with it (a tuner writing another's table names that)
    for v in VARIANTS.values():
        if v.family != "moe":
            owner.setdefault(v.tuned_csv, v.name)
    named = {**{v.name: v.tuned_csv for v in VARIANTS.values() if owner.get(v.tuned_csv) == v.name},
             **LOGGED_ONLY_TUNED_CSV}
    assert owner[VARIANTS["a4w4_blockscale_bpreshuffle"].tuned_csv] == "a4w4_blockscale"
    for name, csv in named.items():
        for path in ("/usr/lib/aiter/" + csv, "/cfg/model_configs/dsv3_" + Path(csv).name):
            assert shapefmt.variant_from_tuned_file(path) == (name, None), path
    stems = [s for s, _ in variant_facts.FILE_STEMS]
    assert [len(s) for s in stems] == sorted((len(s) for s in stems), reverse=True)


def test_the_special_names_stay_as_they_were():
    f = shapefmt.variant_from_tuned_file
    assert f("CKGEMM") == ("a8w8_blockscale", None) and f("CKGEMM", True) == ("a8w8", None)
    assert f("CK GEMM or ASM GEMM") == ("a4w4_blockscale", None) and f("ASMGEMM")[0] == "a8w8_bpreshuffle"
    assert f("/x/a6w6_blockscale_tuned_gemm.csv") == ("a6w6", None)
    assert f("/x/bf16_tuned_gemm.csv") == ("a16w16", None)
    assert f("/x/bf16_tuned_batched_gemm.csv") == ("batched_bf16", None)
    assert f("/x/a8w8_blockscale_bpreshuffle_tuned_gemm_mm2.5.csv") == ("a8w8_blockscale_bpreshuffle", None)


def test_a_variant_added_without_regenerating_fails_with_the_command(monkeypatch):
    import dataclasses
    new = dataclasses.replace(VARIANTS["a8w8"], name="a8w8_new",
                              tuned_csv="aiter/configs/a8w8_new_tuned_gemm.csv")
    monkeypatch.setitem(gen.VARIANTS, "a8w8_new", new)
    text = gen.render()
    assert '("a8w8_new_tuned_gemm", "a8w8_new"),' in text and text != gen.TARGET.read_text(encoding="utf-8")
    ns: dict = {}
    exec(compile(text, "variant_facts.py", "exec"), ns)   # the generated module is valid Python
    assert ns["FILE_STEMS"][0] == ("batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned",
                                   "bmm_a8w8_mxscale_bpreshuffle")           # longest stem first
    assert [len(s) for s, _ in ns["FILE_STEMS"]] == sorted((len(s) for s, _ in ns["FILE_STEMS"]), reverse=True)
    assert "python -m orchestrator.gen_variant_facts" in text


# variants whose tuned CSV compiles no CK module: the MoE 2-stage modules are generated without the CSV;
# a16w16 (bf16) is tuned across backends (hipBLASLt, asm, ...) and a6w6's table feeds none of the CK modules
# aiter-after-v0.1.20.md lists by config variable; a8w8_mxfp8_bpreshuffle runs FlyDSL kernels named in its rows
# (aiter-december-2026.md), compiled per kernelName, not from the table
# the MX tuners of variants_mx.py: a6w4, a4w6 and a16w8_mxfp8 (prebuilt asm .co) compile nothing from their tables;
# a4w4_blockscale_bpreshuffle writes the CK a4w4 table, which compiles module_gemm_a4w4_blockscale; the MXFP8 BMM
# table builds no opus module (its README: changing the tuned CSV forces no rebuild)
NO_CSV_JIT_MODULE = {"moe_2stages", "a16w16", "a6w6", "a8w8_mxfp8_bpreshuffle", "a6w4", "a4w6", "a16w8_mxfp8", "fhmoe",
                    "bmm_a8w8_mxscale_bpreshuffle"}


def test_every_variant_says_which_module_its_table_compiles():
    """A variant that would silently keep a stale module fails here (issue 25): promote and a campaign's spread
    move the module compiled from the tuned CSV aside through the entry's jit_module, which has no default, so
    no entry can leave it out; None says the table compiles none."""
    import dataclasses
    from orchestrator.variants import KernelVariant
    jit = {f.name: f for f in dataclasses.fields(KernelVariant)}["jit_module"]
    assert jit.default is dataclasses.MISSING and jit.default_factory is dataclasses.MISSING
    assert {n for n, v in VARIANTS.items() if v.jit_module is None} == NO_CSV_JIT_MODULE
    assert set(JIT_MODULES) == set(VARIANTS) - NO_CSV_JIT_MODULE
    assert all(jit_modules(name) == [JIT_MODULES[name]] for name in JIT_MODULES)
    assert all(jit_modules(name) == [] for name in NO_CSV_JIT_MODULE)


# ------------------------------------------------------------------------------------------------
# A variant is data (issue 35): a tuner that follows AITER's common tuner CLI is added by its entry alone
# ------------------------------------------------------------------------------------------------

FAKE = KernelVariant(
    name="a8w8_fake", family="gemm", tune_script="csrc/gemm_a8w8_fake/gemm_a8w8_fake_tune.py",
    untuned_csv="aiter/configs/a8w8_fake_untuned_gemm.csv", tuned_csv="aiter/configs/a8w8_fake_tuned_gemm.csv",
    config_env="AITER_CONFIG_GEMM_A8W8_FAKE", untuned_columns=("M", "N", "K"), jit_module=None,
    libtypes=("ck", "asm"), since=(0, 1, 13),
    bench=BenchSpec(script="op_tests/test_gemm_a8w8_fake.py", style="mnk", output="markdown", metric="us",
                    higher_is_better=False, key_columns={"m": "m", "n": "n", "k": "k"}))


def register_fake(monkeypatch, variant=FAKE):
    """The one edit a new variant needs, made in the test: its entry in the registry (and, on this side, the
    sim's model of it: what the generated sim/variant_table.py would carry after gen_variant_facts)."""
    from orchestrator import variants
    from orchestrator.sim import perf_model
    monkeypatch.setitem(variants.VARIANTS, variant.name, variant)
    monkeypatch.setitem(perf_model.FACTS, variant.name, gen.sim_facts(variant))
    return variant


def _ctx(tmp_path, variant_name, request):
    import types
    from orchestrator.context import Ctx, Settings
    from orchestrator.state import JobState, Workspace
    from orchestrator.ui import Ui
    job = JobState(job_id="j", node="n", container="c", variant=variant_name, created=0, request=request,
                   facts={"version": "0.1.20", "gfx": "gfx950", "cu_num": 256, "tune_gpus": [0]},
                   remote={"aiter_root": "/aiter", "meta_root": "/aiter"})
    target = types.SimpleNamespace(container=types.SimpleNamespace(env={}, python="python3"))
    return Ctx(job=job, workspace=Workspace(tmp_path / "ws"), target=target, settings=Settings(), ui=Ui(quiet=True))


def test_a_fake_variant_is_planned_prepared_benchmarked_compared_and_promoted_from_its_entry_alone(
        monkeypatch, tmp_path, staging_mod):
    from orchestrator import sim
    from orchestrator.outcome.compare import compare_for_variant
    from orchestrator.parsing.bench import parse_bench_log
    from orchestrator.parsing.untuned import write_untuned_csv
    from orchestrator.sim import fromfacts, localnode, perf_model
    from orchestrator.steps import prepare
    from orchestrator.steps.bench import measured, plan_bench
    from orchestrator.steps.shape_sources import collect
    from orchestrator.variants import get_variant, table_modules

    fake = register_fake(monkeypatch)
    assert get_variant("a8w8_fake") is fake and table_modules(fake.name) == []
    # the generated facts carry it: the helper names it from its tuned file, the sim models it
    assert '("a8w8_fake_tuned_gemm", "a8w8_fake"),' in gen.render() and "'a8w8_fake': {'family': 'gemm'" in gen.render_sim()

    # plan: --nk 7168,2048 with the M preset 1,64 (the shapes step, as `run --nk` drives it)
    ctx = _ctx(tmp_path, fake.name, {"nk": ["7168,2048"], "m_preset": "1,64"})
    shapes, described = collect(ctx)
    assert [(s["m"], s["n"], s["k"]) for s in shapes] == [(1, 7168, 2048), (64, 7168, 2048)]
    assert list(shapes[0]) == ["m", "n", "k"]

    # a simulated node that serves the fake from its facts (the tree has no file of its own for it)
    inst = sim.install(tmp_path / "node", sim.SimSpec(profile="current"))
    fromfacts.serve_variant(inst, fake.name, gen.sim_facts(fake))
    root = inst.aiter_root

    # prepare: the untuned CSV and the tuner's argv (-i/-o always given)
    untuned, staging = f"{root}/untuned.csv", f"{root}/staging.csv"
    Path(untuned).write_text(write_untuned_csv(shapes, fake.name))
    assert Path(untuned).read_text().splitlines()[0] == "M,N,K"
    ctx.job.remote.meta_root, ctx.job.remote.aiter_root = inst.meta_root, root
    cmd = prepare.tune_command(ctx, ctx.variant, untuned, staging)
    assert list(cmd.argv[1:6]) == [f"{inst.meta_root}/{fake.tune_script}", "-i", untuned, "-o", staging]
    tuned = localnode.run(inst, list(cmd.argv), env=cmd.env)
    failed = [s for s in shapes if perf_model.outcome(fake.name, s) == "failed"]
    assert tuned.returncode == (1 if failed else 0), tuned.stderr
    rows = Path(staging).read_text().splitlines()
    assert rows[0] == "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
    assert len(rows) == 1 + len(shapes) - len(failed)

    # benchmark argv, before (the live table: header only) and after (the staging table)
    [call] = plan_bench(ctx.variant, shapes)
    assert call.script == fake.bench.script and call.args == ("-mnk", "1,7168,2048", "64,7168,2048")

    def bench(table):
        out = localnode.run(inst, ["python3", f"{root}/{call.script}", *call.args], env={fake.config_env: table})
        assert out.returncode == 0, out.stderr
        return measured(fake.bench, shapes, parse_bench_log(out.stdout + out.stderr, fake.bench))
    live = f"{root}/{fake.tuned_csv}"
    before, after = bench(live), bench(staging)
    assert [r["value"] for r in before] == [perf_model.bench_value(fake.name, s, "us") for s in shapes]

    # compare: keys, metric and direction from the entry; a tuned shape is as fast as the model says
    comparison = compare_for_variant(before, after, fake)
    assert comparison.key_columns == ("m", "n", "k") and comparison.metric == "us"
    assert comparison.higher_is_better is False and len(comparison.rows) == len(shapes)

    # promote: the staging rows into the live table, keyed by the entry's columns
    keys = [[str(s["m"]), str(s["n"]), str(s["k"])] for s in shapes if s not in failed]
    res = staging_mod.op_promote({"live": live, "staging": staging, "backup_dir": str(tmp_path / "bk"),
                                  "key_columns": list(fake.untuned_columns), "keys": keys, "gfx": "gfx950",
                                  "cu_num": "256", "others": [], "modules": table_modules(fake.name),
                                  "package_dir": None, "jit_dir_env": None})
    assert res["added"] == len(keys) and Path(live).read_text() == Path(staging).read_text()
    promoted = bench(live)
    assert [r["value"] for r in promoted] == [r["value"] for r in after]
