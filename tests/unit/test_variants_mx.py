"""The MX-format tuners after v0.1.20 (orchestrator/variants_mx.py): each entry's facts as the stored ROCm/aiter
commits show them, and the tuner command line tune-remote builds from the entry alone."""

from __future__ import annotations

import types

import pytest

from orchestrator.errors import UsageError

from orchestrator.shapelib import shapefmt
from orchestrator.steps import prepare, tuneargs
from orchestrator.variants import VARIANTS, get_variant, table_modules
from orchestrator.variants_mx import MX_VARIANTS

# name -> (tuner, tuned table, config variable, GPU, splitk mode, libtypes): read from the stored commits
FACTS = {
    "a4w4_blockscale_bpreshuffle": (   # 9fd2e61f: FlyDSL, writes the CK a4w4 table through AITER_CONFIG_GEMM_A4W4
        "csrc/ck_gemm_a4w4_blockscale/gemm_a4w4_blockscale_bpreshuffle_tune.py",
        "aiter/configs/a4w4_blockscale_tuned_gemm.csv", "AITER_CONFIG_GEMM_A4W4", "gfx950", "always", ("flydsl",)),
    "a6w4": (                          # 610d1e8e: run_tuner("a6w4") of csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py
        "csrc/gemm_a6w4/gemm_a6w4_tune.py",
        "aiter/configs/a6w4_asm_tuned_gemm.csv", "AITER_CONFIG_GEMM_A6W4_ASM", "gfx950", "refuses", ()),
    "a4w6": (                          # 610d1e8e: _FAMILY_SPECS["a4w6"] of the same shared tuner; README's entry point
        "csrc/gemm_a4w6/gemm_a4w6_tune.py",
        "aiter/configs/a4w6_asm_tuned_gemm.csv", "AITER_CONFIG_GEMM_A4W6_ASM", "gfx950", "refuses", ()),
    "a16w8_mxfp8": (                   # 59663079: gfx942 asm, a row only where it beats BF16
        "csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py",
        "aiter/configs/a16w8_mxfp8_asm_tuned_gemm.csv", "AITER_CONFIG_GEMM_A16W8_MXFP8_ASM", "gfx942", "always", ()),
    "bmm_a8w8_mxscale_bpreshuffle": (  # f081855b / README fb06b88c: opus + FlyDSL, -k is the K dimension
        "csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py",
        "aiter/configs/batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv",
        "AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE", "gfx950", "refuses", ("opus", "flydsl")),
}
BMM = "bmm_a8w8_mxscale_bpreshuffle"


def test_the_mx_entries_are_registered_once_each():
    assert [v.name for v in MX_VARIANTS] == list(FACTS)
    assert all(VARIANTS[v.name] is v for v in MX_VARIANTS)
    assert list(VARIANTS)[-len(MX_VARIANTS):] == list(FACTS)


@pytest.mark.parametrize("name", list(FACTS))
def test_mx_entry_facts(name):
    script, tuned, env, gfx, splitk, libtypes = FACTS[name]
    v = get_variant(name)
    assert (v.tune_script, v.tuned_csv, v.config_env) == (script, tuned, env)
    assert v.requires_gfx == frozenset({gfx}) and v.splitk == splitk and v.libtypes == libtypes
    if name == BMM:     # the README's untuned header; the batched family (B in the key, no --nk)
        assert v.untuned_columns == ("b", "m", "n", "k", "w_scale_block") and v.family == "batched"
    else:
        assert v.untuned_columns == ("M", "N", "K") and v.family == "gemm"
    assert v.since == (0, 1, 21)
    assert v.tune_flags == (("--all",) if name == "a4w4_blockscale_bpreshuffle" else ()) and not v.overrides


def test_a4w4_bpreshuffle_shares_the_ck_a4w4_table_and_its_module():
    """Its rows land in the table the CK a4w4 module is compiled from: promotion moves that module aside, and
    a log line naming the table is the CK variant's (the first that owns it)."""
    ck, fly = get_variant("a4w4_blockscale"), get_variant("a4w4_blockscale_bpreshuffle")
    assert (fly.tuned_csv, fly.untuned_csv, fly.config_env) == (ck.tuned_csv, ck.untuned_csv, ck.config_env)
    assert table_modules(fly.name) == table_modules(ck.name) == ["module_gemm_a4w4_blockscale"]
    assert shapefmt.variant_from_tuned_file("/x/aiter/configs/a4w4_blockscale_tuned_gemm.csv") == (ck.name, None)
    assert fly.bench == ck.bench      # the a4w4 op_test times the dispatch that reads both backends' rows


def _ctx(tmp_path, name, gfx, request):
    from orchestrator.context import Ctx, Settings
    from orchestrator.state import JobState, Workspace
    from orchestrator.ui import Ui
    job = JobState(job_id="j", node="n", container="c", variant=name, created=0, request=request,
                   facts={"version": "0.1.30", "gfx": gfx, "cu_num": 256, "tune_gpus": [0, 1]},
                   remote={"aiter_root": "/aiter", "meta_root": "/aiter"})
    target = types.SimpleNamespace(container=types.SimpleNamespace(env={}, python="python3"))
    return Ctx(job=job, workspace=Workspace(tmp_path / "ws"), target=target, settings=Settings(), ui=Ui(quiet=True))


@pytest.mark.parametrize("name", list(FACTS))
def test_mx_tuner_command_line(tmp_path, name):
    """-i/-o always given (the tuners' defaults are the shipped tables), the entry's script, no split-K flag
    unless asked; where the tuner times its split candidates anyway, asking says it changes nothing."""
    script, _, _, gfx, splitk, _ = FACTS[name]
    ctx = _ctx(tmp_path, name, gfx, {"nk": ["7168,2048"]} if name != BMM else {})
    cmd = prepare.tune_command(ctx, ctx.variant, "/j/untuned.csv", "/j/staging.csv")
    assert list(cmd.argv[:6]) == ["python3", f"/aiter/{script}", "-i", "/j/untuned.csv", "-o", "/j/staging.csv"]
    assert "--splitK" not in cmd.argv and "-k" not in cmd.argv
    assert cmd.env["HIP_VISIBLE_DEVICES"] == "0,1" and cmd.cwd == "/aiter"
    help_text = "usage: tune.py [-h] [-i UNTUNE_FILE] [-o TUNE_FILE] [-k]\n  -k, --splitK  split K\n"
    note = tuneargs.splitk_note(tuneargs.compose(splitk=True), help_text, name)
    if splitk == "refuses":     # a6w4: its real tuner raises on -k, so run --splitk is refused before anything runs
        why = "its -k is the K dimension" if name == BMM else "it raises 'does not support split-K'"
        with pytest.raises(UsageError, match="refuses -k") as err:
            tuneargs.refuse_splitk(tuneargs.compose(splitk=True), ctx.variant)
        assert why in str(err.value)
        assert note is None
    else:
        tuneargs.refuse_splitk(tuneargs.compose(splitk=True), ctx.variant)
        assert "always times its split-K candidates" in note
    assert tuneargs.splitk_note([], help_text, name) is None     # never "splitK candidates will be skipped"


def test_the_sim_runs_the_shared_tables_default_and_its_flydsl_rows():
    """Simulated node: an untuned shape of the a4w4 table runs the CK a4w4 default whichever tuner writes the
    table; a FlyDSL row is timed as the bpreshuffle tuner's kernel (sim ops/gemm_op_a4w4.py)."""
    from orchestrator.sim import perf_model as pm
    s = {"m": 16, "n": 2112, "k": 7168}
    assert pm.table_owner("a4w4_blockscale_bpreshuffle") == "a4w4_blockscale"
    assert pm.default_us("a4w4_blockscale_bpreshuffle", s) == pm.default_us("a4w4_blockscale", s)
    assert pm.flops_and_bytes("a4w4_blockscale_bpreshuffle", s) == pm.flops_and_bytes("a4w4_blockscale", s)
    assert pm.bench_us("a4w4_blockscale_bpreshuffle", s, tuned_from=s) != pm.bench_us("a4w4_blockscale", s,
                                                                                      tuned_from=s)


def test_a16w8_mxfp8_shapes_stop_at_the_m_its_tuner_takes():
    """Its tuner raises for the whole run on an M above 64: the shapes step drops those before anything runs."""
    from orchestrator.steps.shape_rules import runtime_lookups
    from orchestrator.steps.shape_sources import expand
    from orchestrator.variants import get_variant
    v = get_variant("a16w8_mxfp8")
    swept = expand([{"m": 1, "n": 4096, "k": 7168}], v.family, "pow2")
    shapes, notes = runtime_lookups(swept, v.family, None, v.max_m)
    assert max(s["m"] for s in swept) > 64 and sorted(s["m"] for s in shapes) == [1, 2, 4, 8, 16, 32, 64]
    assert any("takes m <= 64 only" in n for n in notes)
    assert get_variant("a8w8_blockscale").max_m is None


def test_the_wrong_gpu_hint_names_the_gpus_the_variant_is_built_for():
    from orchestrator.steps.discover import wrong_gfx_hint
    from orchestrator.variants import get_variant
    assert wrong_gfx_hint(get_variant("a16w8_mxfp8")).endswith("tune it on an MI300X/MI325X")
    assert wrong_gfx_hint(get_variant("a4w4_blockscale")).endswith("tune it on an MI355X/MI350X")
