"""Tuner controls end to end (issue 12, P-06): --splitk/--libtype/--err-ratio/--tune-arg reach the tuner
as given and are checked against the node tuner's --help before anything runs; --q-dtype-w keys --nk
shapes; the plan says when splitK candidates are skipped."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.test_variants_e2e import run_cli, state_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cnode(testbed):
    node = testbed.create_node(("newest",), proxy=False)
    yield node
    testbed.destroy_node(node)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    return tmp_path


def _ctr(node):
    [ctr] = node.containers.values()
    return ctr


def test_first_class_flags_and_pass_through_reach_the_tuner(cnode, env):
    ctr = _ctr(cnode)
    rc, job = run_cli(env, cnode, ctr, "a8w8_bpreshuffle", "--nk", "1536,7168", "--q-dtype-w", "int8",
                      "--splitk", "--libtype", "all", "--err-ratio", "0.1",
                      "--tune-arg", "--min_improvement_pct 5", "--tune-arg=--sort=True", m_preset="16,32")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    argv = st["remote"]["tune_argv"]
    tail = argv[argv.index("--splitK"):]
    assert tail[:8] == ["--splitK", "--libtype", "all", "--errRatio", "0.1", "--min_improvement_pct", "5",
                        "--sort=True"]
    assert not any("splitK candidates will be skipped" in n for n in st["notes"])
    assert {s["q_dtype_w"] for s in st["shapes"]} == {"torch.int8"}
    # the newest AITER's bpreshuffle tuner puts FlyDSL split-K kernels in the search space with -k
    rows = (job / "a8w8_bpreshuffle_tuned_gemm.csv").read_text().splitlines()
    head = rows[0].split(",")
    mine = [dict(zip(head, r.split(","))) for r in rows[1:]]
    mine = [r for r in mine if r["N"] == "1536" and r["K"] == "7168" and r["M"] in ("16", "32")]
    assert mine and all(r["kernelName"].startswith("flydsl_bpreshuflle_") == (r["libtype"] == "flydsl")
                        for r in mine)


def test_default_run_says_splitk_is_skipped(cnode, env):
    ctr = _ctr(cnode)
    rc, job = run_cli(env, cnode, ctr, "a8w8_blockscale", "--nk", "2048,7168", m_preset="16")
    st = state_of(job)
    assert rc == 0, st.get("error")
    notes = [n for n in st["notes"] if "splitK candidates will be skipped" in n]
    assert len(notes) == 1 and "--splitk" in notes[0]
    assert "-k" not in st["remote"]["tune_argv"] and "--splitK" not in st["remote"]["tune_argv"]


@pytest.mark.parametrize("variant,extra,says", [
    ("a8w8", ["--libtype", "ck"], "has no flag --libtype"),             # AITER's a8w8 tuner has none
    ("a8w8_blockscale", ["--tune-arg", "--no_such_flag"], "has no flag --no_such_flag"),
    ("a8w8_blockscale", ["--tune-arg", "--mp 2"], "tuner flag --mp is set by tune-remote"),
])
def test_unknown_or_reserved_flags_refused_before_anything_runs(cnode, env, capsys, variant, extra, says):
    ctr = _ctr(cnode)
    launches0 = len(ctr.launches())
    capsys.readouterr()
    rc, job = run_cli(env, cnode, ctr, variant, "--nk", "2048,7168", *extra, m_preset="16")
    err = capsys.readouterr().err
    assert rc == ExitCode.USAGE, err
    assert says in err and "hint:" in err
    assert len(ctr.launches()) == launches0
    if job is not None:
        assert not state_of(job)["remote"].get("run_dir")


def test_q_dtype_w_refused_for_a_variant_without_it(cnode, env, capsys):
    ctr = _ctr(cnode)
    capsys.readouterr()
    rc, job = run_cli(env, cnode, ctr, "a8w8_blockscale", "--nk", "2048,7168", "--q-dtype-w", "int8")
    assert rc == ExitCode.USAGE and job is None
    assert "--q-dtype-w applies to a8w8" in capsys.readouterr().err


def test_moe_tokens_snapped_and_capped(cnode, env):
    ctr = _ctr(cnode)
    rc, job = run_cli(env, cnode, ctr, "moe_2stages", "--log", f"{ctr.inst.logs_dir}/sglang_tp8_glm5.log",
                      "--max-m", "64", m_preset="24,40")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    tokens = {s["token"] for s in st["shapes"]}
    assert tokens and tokens <= {1, 2, 4, 8, 16, 32, 64}
    assert {32, 64} <= tokens
    assert any("snapped to the runtime's power-of-two buckets" in n and "24->32" in n for n in st["notes"])
    untuned = st["remote"]["untuned_csv"]
    assert untuned.endswith("untuned_fmoe.csv")


def test_padded_m_tunes_one_row_per_padded_bucket(cnode, env):
    # run --padded-m: 1, 8, 16 are one padded-M bucket (16), 24 goes to 32 (aiter-formats.md §3.1)
    ctr = _ctr(cnode)
    rc, job = run_cli(env, cnode, ctr, "a8w8_blockscale", "--nk", "1536,7168", "--padded-m", m_preset="1,8,16,24")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert sorted(s["m"] for s in st["shapes"]) == [16, 32]
    assert any("padded-M grid" in n and "24->32" in n for n in st["notes"])


# ------------------------------------------------------------------------------------------------
# GPU kinds: a partitioned node (CPX GPUs report fewer CUs) serving on full GPUs
# ------------------------------------------------------------------------------------------------

PARTITIONED = {"profile": "newest", "gfx": "gfx942", "cu_num": 304, "gpus": 8, "busy_gpus": (0, 1),
               "gpu_cu_nums": (304, 304, 80, 80, 80, 80, 304, 304)}


@pytest.fixture(scope="module")
def pnode(testbed):
    node = testbed.create_node((PARTITIONED,), proxy=False)
    yield node
    testbed.destroy_node(node)


@pytest.mark.parametrize("gpus,says", [
    (None, "different cu_num [80, 304]"),
    ("2,3", "have cu_num 80 but the busy (serving) GPUs have cu_num 304"),
])
def test_cu_num_mismatch_refused_before_anything_runs(pnode, env, capsys, gpus, says):
    ctr = _ctr(pnode)
    launches0 = len(ctr.launches())
    capsys.readouterr()
    extra = ["--gpus", gpus] if gpus else []
    rc, job = run_cli(env, pnode, ctr, "a8w8_blockscale", "--nk", "2048,7168", *extra, m_preset="16")
    err = capsys.readouterr().err
    assert rc == ExitCode.JOB_FAILED, err
    assert says in err and "hint:" in err
    if gpus:
        assert "--gpus 6,7" in err and "--force-cu-num" in err
    assert len(ctr.launches()) == launches0
    assert state_of(job)["facts"]["gpu_cu_nums"] == list(PARTITIONED["gpu_cu_nums"])


def test_cu_num_mismatch_forced_is_noted(pnode, env):
    ctr = _ctr(pnode)
    rc, job = run_cli(env, pnode, ctr, "a8w8_blockscale", "--nk", "2048,7168", "--gpus", "2,3",
                      "--force-cu-num", m_preset="16")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert any("cu_num 80" in n and "--force-cu-num" in n for n in st["notes"])
    assert st["facts"]["tune_cu_nums"] == [80]


def test_run_takes_a_model_config_as_shape_source(cnode, env):
    from pathlib import Path
    ctr = _ctr(cnode)
    dsv3 = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "deepseek_v3.json"
    rc, job = run_cli(env, cnode, ctr, "moe_2stages", "--model", str(dsv3), "--tp", "8", m_preset="4,8")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert {s["token"] for s in st["shapes"]} == {4, 8}
    # the node is a gfx950: OCP FP8 (a gfx942 node would give the fnuz types)
    assert {s["q_dtype_w"] for s in st["shapes"]} == {"torch.float8_e4m3fn"}
    assert {(s["model_dim"], s["expert"], s["topk"]) for s in st["shapes"]} == {(7168, 256, 8)}


def test_shapes_model_node_asks_the_node_for_its_gfx(pnode, env, capsys):
    # C-10: `shapes --model --node N` discovers the gfx (gfx942 here: the fnuz FP8 dtypes), one round trip;
    # --gfx and --node together, or --node without --model, are usage errors
    import json
    from pathlib import Path

    from orchestrator.cli import main
    from tests.e2e.test_variants_e2e import write_inventory
    inv = write_inventory(env / "inventory.yaml", pnode)
    model = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "llama3_1_70b_fp8_dynamic.json"
    capsys.readouterr()
    rc = main(["--inventory", str(inv), "shapes", "--model", str(model), "--tp", "8", "--node", pnode.alias, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"{pnode.alias}/{_ctr(pnode).name}: gfx942" in err
    assert {s["q_dtype_w"] for s in json.loads(out)["a8w8"]} == {"torch.float8_e4m3fnuz"}
    for argv, needle in ((["--model", str(model), "--gfx", "gfx950", "--node", pnode.alias], "not both"),
                         (["server.log", "--node", pnode.alias], "--node applies to --model")):
        (env / "server.log").write_text("")
        assert main(["--inventory", str(inv), "shapes", *argv]) == 2
        assert needle in capsys.readouterr().err


def test_with_batch_1_the_live_table_gets_every_shapes_result_as_the_tuner_prints_it(cnode, env):
    # P-11: AITER prints "Tuning result for ..." only when a batch gave one best row (--batch 1); the laptop
    # reads those lines from the tuning log as it streams in, and the report lists the kernel chosen per shape
    ctr = _ctr(cnode)
    rc, job = run_cli(env, cnode, ctr, "a8w8_blockscale", "--nk", "1536,7168", "--batch", "1",
                      m_preset="128,256")       # M values no other test of this module tunes (they would be skipped)
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    info = st["steps"]["remote"]["info"]
    assert info["results_seen"] == 2
    assert sorted(r["shape"].split(" q_dtype_w")[0] for r in info["results"]) == ["M=128 N=1536 K=7168",
                                                                                  "M=256 N=1536 K=7168"]
    kernels = st["steps"]["compare"]["info"]["tuned"]["kernels"]
    assert {r["kernel"] for r in info["results"]} == {k["kernel"] for k in kernels}
    assert "<h2>Kernels chosen</h2>" in (job / "report.html").read_text()   # report.md fits a PR: kernels in the html
