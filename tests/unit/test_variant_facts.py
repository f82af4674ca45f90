"""The helper's variant facts come from the registry (review D-11): shapelib/variant_facts.py is generated
from orchestrator/variants.py, and shapefmt uses it."""

from __future__ import annotations

from pathlib import Path

from orchestrator import gen_variant_facts as gen
from orchestrator.shapelib import shapefmt, shaperules, variant_facts
from orchestrator.variants import JIT_MODULES, LOGGED_ONLY_TUNED_CSV, MOE_KEY, VARIANTS, jit_modules


def test_the_committed_facts_are_what_the_registry_generates():
    committed = gen.TARGET.read_text(encoding="utf-8")
    assert committed == gen.render(), (
        f"orchestrator/shapelib/variant_facts.py is stale (orchestrator/variants.py changed): "
        f"run `{gen.COMMAND}` and commit the file")


def test_shapefmt_reads_the_generated_facts():
    assert shapefmt.MOE_KEY is variant_facts.MOE_KEY and tuple(MOE_KEY) == variant_facts.MOE_KEY
    assert shapefmt.MOE_VARIANT == shaperules.MOE_VARIANT == "moe_2stages"
    assert not hasattr(shapefmt, "_FILE_STEMS")
    src = Path(shapefmt.__file__).read_text()
    assert "_tuned_gemm\"" not in src and "\"token\", \"model_dim\"" not in src   # no second copy


def test_every_gemm_variant_is_named_by_its_tuned_file():
    """A variant added to the registry is attributed from its tuned file's name with no edit to shapefmt."""
    named = {**{v.name: v.tuned_csv for v in VARIANTS.values() if v.family != "moe"}, **LOGGED_ONLY_TUNED_CSV}
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
    assert ns["FILE_STEMS"][0] == ("a8w8_blockscale_bpreshuffle_tuned_gemm", "a8w8_blockscale_bpreshuffle")
    assert "python -m orchestrator.gen_variant_facts" in text


# variants whose tuned CSV compiles no CK module: the MoE 2-stage modules are generated without the CSV;
# a16w16 (bf16) is tuned across backends (hipBLASLt, asm, ...) and a6w6's table feeds none of the CK modules
# aiter-after-v0.1.20.md lists by config variable; a8w8_mxfp8_bpreshuffle runs FlyDSL kernels named in its rows
# (aiter-december-2026.md), compiled per kernelName, not from the table
NO_CSV_JIT_MODULE = {"moe_2stages", "a16w16", "a6w6", "a8w8_mxfp8_bpreshuffle"}


def test_every_variant_is_in_the_jit_table_or_said_to_have_no_module():
    """A variant missing from a derived table fails here (issue 25): promote and a campaign's spread move the
    module compiled from the tuned CSV aside through JIT_MODULES, and a variant missing there silently keeps a
    stale module. A new variant: add its module to variants.JIT_MODULES, or its name above with why."""
    missing = sorted(set(VARIANTS) - set(JIT_MODULES) - NO_CSV_JIT_MODULE)
    assert not missing, f"variants in neither variants.JIT_MODULES nor NO_CSV_JIT_MODULE: {missing}"
    assert set(JIT_MODULES) <= set(VARIANTS) and not set(JIT_MODULES) & NO_CSV_JIT_MODULE
    assert all(jit_modules(name) == [JIT_MODULES[name]] for name in JIT_MODULES)

