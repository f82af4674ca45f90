"""bmm_a8w8_mxscale_bpreshuffle: the older opus base is refused from the node's tuner --help (registry
``help_requires``), and run --padded-m snaps its M as its runtime looks it up (registry ``padded_m_lookup``).

ROCm/aiter: opus_bmm_mxscale_tune.py without --groupSize/--w_scale_block (index id 60266194491, the entry's
0a990d64) sets ``args.tune_file = BPRESHUFFLE_CSV`` under --bpreshuffle, which the bmm tuner forces;
aiter/ops/opus/policy.py lookup_mxscale_bmm_config (index id 70836111852) walks M, get_padded_m(gl=0), gl=1."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.errors import ExitCode, JobError
from orchestrator.sim import SimSpec, install
from orchestrator.sim.lookups import padded_m_candidates
from orchestrator.steps import capabilities, riders
from orchestrator.steps.shape_rules import padded_m, runtime_lookups, snap
from orchestrator.variants import VARIANTS

from .test_sim_common import py, write_csv


def BMM_MODEL_TABLE_PATH(inst):
    """The shipped DSV4 model table the tuner defaults -o to (sim tuner MODEL_TABLE)."""
    return (f"{inst.aiter_root}/aiter/configs/model_configs/"
            "dsv4_batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv")

V = VARIANTS["bmm_a8w8_mxscale_bpreshuffle"]


def old_base(path):
    """The node's tuner on the 0a990d64 opus base: neither --w_scale_block nor --groupSize in its CLI (every
    shape at the default blocks), and -o replaced by the shipped model table under the forced --bpreshuffle."""
    src = path.read_text()
    new = re.sub(r'\n        p\.add_argument\("--w_scale_block".*?\n(?=        \S|\n)', "\n", src, flags=re.S)
    new = new.replace("blocks = list(args.w_scale_block)", 'blocks = ["32x32", "128x128"]')
    new = new.replace("        if args.apply:\n            args.tune_file = MODEL_TABLE",
                      "        if args.apply or args.bpreshuffle:\n            args.tune_file = MODEL_TABLE")
    assert "--w_scale_block\"" not in new and "args.w_scale_block" not in new and "or args.bpreshuffle:" in new
    path.write_text(new)


@pytest.fixture(scope="module")
def old_node(tmp_path_factory):
    inst = install(tmp_path_factory.mktemp("bmmold") / "n", SimSpec(profile="newest"))
    script = inst.script(V.tune_script)
    new = py(inst, script, "--help")
    old_base(Path(inst.host_path(script)))
    old = py(inst, script, "--help")
    assert new.returncode == 0 and old.returncode == 0, (new.stderr, old.stderr)
    return inst, new.stdout, old.stdout


@pytest.fixture(scope="module")
def helps(old_node):
    return old_node[1:]


def test_the_old_base_writes_the_shipped_model_table_whatever_o_says(old_node, tmp_path):
    """Why it is refused: its -o is replaced (the harm the guard prevents; the current tuner keeps -o)."""
    inst = old_node[0]
    model = Path(inst.host_path(BMM_MODEL_TABLE_PATH(inst)))
    before = model.read_text()
    unt = write_csv(tmp_path / "u.csv", ["b", "m", "n", "k"], [[16, 1, 1024, 4096]])
    r = py(inst, inst.script(V.tune_script), "-i", unt, "-o", tmp_path / "asked.csv", "--libtype", "opus")
    assert r.returncode in (0, 1), r.stderr
    assert not (tmp_path / "asked.csv").exists() and model.read_text() != before


def ctx_for(help_text, notes):
    facts = SimpleNamespace(env={}, version="0.1.29", gfx="gfx950", probes=None)
    job = SimpleNamespace(facts=facts, node="mi355-a", note=notes.append, request=SimpleNamespace(tune_args=[]),
                          remote=SimpleNamespace(aiter_root="/aiter", meta_root=None), variant=V.name)
    return SimpleNamespace(job=job, ui=SimpleNamespace(event=notes.append),
                           target=SimpleNamespace(container=SimpleNamespace(env={}, python="python3")))


def test_the_old_opus_base_is_refused_before_anything_runs(helps, monkeypatch):
    new, old = helps
    assert "--w_scale_block" in new and "--w_scale_block" not in old and "--groupSize" not in old
    asked = []
    monkeypatch.setattr(riders, "call", lambda ctx, op, req, timeout: asked.append(op) or
                        {"ok": True, "tune_script_exists": True, "tuner_help": old})
    notes: list = []
    with pytest.raises(JobError) as exc:
        capabilities.probe(ctx_for(old, notes), V)
    msg = str(exc.value)
    assert exc.value.exit_code == ExitCode.USAGE == 2 and asked == ["probe"] and "\n" not in msg
    assert msg.startswith("mi355-a: bmm_a8w8_mxscale_bpreshuffle is refused on AITER 0.1.29")
    assert "--w_scale_block, --groupSize" in msg and "write into a shipped table" in msg
    assert "upgrade amd-aiter" in exc.value.hint


def test_a_tuner_with_either_flag_passes_and_an_unread_help_is_only_noted(helps):
    new, old = helps
    notes: list = []
    capabilities.refuse_tuner_without(ctx_for(new, notes), V, new, V.tune_script)
    groupsize = old.replace("--pool", "--groupSize GROUPSIZE --pool", 1)     # bce5c477's base: -o kept
    capabilities.refuse_tuner_without(ctx_for(groupsize, notes), V, groupsize, V.tune_script)
    assert notes == []
    capabilities.refuse_tuner_without(ctx_for(None, notes), V, None, V.tune_script, "timed out")
    assert len(notes) == 1 and "could not check" in notes[0] and "timed out" in notes[0]
    # variants without the fact are never refused by it
    assert VARIANTS["batched_a8w8"].help_requires == ()
    capabilities.refuse_tuner_without(ctx_for(old, notes), VARIANTS["batched_a8w8"], old, "x")


def test_padded_m_snaps_the_mxfp8_bmm_as_its_runtime_looks_it_up():
    assert V.padded_m_lookup and V.family == "batched"
    shapes = [{"b": 16, "m": m, "n": 1024, "k": 4096, "w_scale_block": "128x128"} for m in (1, 8, 16, 200, 256)]
    got, notes = runtime_lookups(shapes, V.family, padded=V.padded_m_lookup)
    assert [s["m"] for s in got] == [16, 208, 256] and all(s["b"] == 16 for s in got)
    assert len(notes) == 1 and "200->208" in notes[0] and "2 tuning(s)" in notes[0]
    # the row tune-remote writes is the one the runtime's second step reads (policy.py gl=0)
    assert all(padded_m_candidates(m, 1024, 4096)[1] == padded_m(m) for m in range(1, 9000))
    req = SimpleNamespace(padded_m=True, get=lambda k, d=None: d)
    assert snap(shapes[3], V, req)["m"] == 208
    # the CK batched tables are looked up at M only: left alone (the caller passes their registry fact)
    ck = VARIANTS["batched_a8w8"]
    assert not ck.padded_m_lookup and snap(shapes[3], ck, req)["m"] == 200


def test_a_campaign_plan_counts_an_old_opus_base_as_unable_to_tune_it():
    from orchestrator.aiter_profiles import profile_for
    from orchestrator.campaign import capable
    profile = profile_for((0, 1, 29))
    name = "bmm_a8w8_mxscale_bpreshuffle"
    old = capable.older_tuners({name: {"tuner_help": "usage: t.py [-h] [-i I] [-o O] [-k K]"}}, profile)
    assert "--w_scale_block or --groupSize in its tuner's --help" in old[name] and "shipped table" in old[name]
    assert capable.older_tuners({name: {"tuner_help": "  --groupSize GROUPSIZE"}}, profile) == {}
    assert capable.older_tuners({name: {}}, profile) == {}                  # no --help: nothing decided
    assert capable.older_tuners({"a8w8": {"tuner_help": "usage"}}, profile) == {}   # no help_requires
