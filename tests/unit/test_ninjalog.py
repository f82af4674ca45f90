"""JIT cold-build profile (seed 004): .ninja_log parsing, critical path, AITER's build lines, the report section."""

from __future__ import annotations

from pathlib import Path

from orchestrator.parsing.ninjalog import build_lines, parse_ninja_log, profile
from orchestrator.report import render_report

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "jit"
MD = "module_moe_ck2stages_fp4x2_fp4x2_preshuffle_on_b16_silu_per_1x32_mulWeightStage2_stage2Gt256Only_selfrun"
GEMM1 = ("moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_Nswizzle0_Quant3_MulRoutedWeight0_silu_"
         "FP4X2_FP4X2_B16.cuda.o")


def test_seed_004_log_gives_its_figures_wall_slowest_unit_and_critical_path():
    edges, version = parse_ninja_log((FIX / "seed004_moe_ck2stages.ninja_log").read_text())
    assert version == 5 and len(edges) == 10                     # "ninja entries: 10"
    p = profile(edges)
    assert p["wall_s"] == 54.877                                 # "ninja_critical_edge_s: 54.877"
    assert p["slowest"][0] == {"output": GEMM1, "seconds": 54.274, "start_s": 0.0, "end_s": 54.274, "outputs": 1}
    assert [u["seconds"] for u in p["slowest"][:3]] == [54.274, 48.473, 39.992]
    # the instances ran in parallel: the wall is one instance + the link, not their sum
    assert [u["output"] for u in p["critical_path"]] == [GEMM1, MD + ".so"]
    assert p["critical_s"] == 54.877 and p["critical_path"][-1]["seconds"] == 0.603
    assert p["busy_s"] > 5 * p["wall_s"] and p["parallelism"] > 5


def test_an_appended_incremental_build_is_profiled_alone():
    edges, _ = parse_ninja_log((FIX / "incremental.ninja_log").read_text())
    assert [e.name for e in edges] == ["gemm_moe_ck2stages.cuda.o", MD + ".so"]
    p = profile(edges)
    assert p["wall_s"] == 20.399 and [u["output"] for u in p["critical_path"]] == [e.name for e in edges]


def test_slot_bound_builds_chain_through_the_edge_that_freed_the_slot():
    # MAX_JOBS=1: a, b, c one after the other, then the link; the critical path is all of them
    text = "# ninja log v5\n0\t1000\t1\ta.cuda.o\t1\n1002\t4000\t1\tb.cuda.o\t2\n4001\t4500\t1\tc.cuda.o\t3\n" \
           "4503\t4600\t1\tm.so\t4\n"
    p = profile(parse_ninja_log(text)[0])
    assert [u["output"] for u in p["critical_path"]] == ["a.cuda.o", "b.cuda.o", "c.cuda.o", "m.so"]
    assert p["parallelism"] == 1.0   # busy 4.594 s over a 4.6 s wall


def test_outputs_of_one_edge_merge_and_bad_lines_and_missing_header_are_tolerated():
    text = "1\t2\tgarbage\n0\t500\t9\tx.o\tab\n0\t500\t9\tx.d\tab\nnot\ta\tnumber\there\n600\t700\t9\tm.so\tcd\n"
    edges, version = parse_ninja_log(text)
    assert version is None and [e.outputs for e in edges] == [["x.o", "x.d"], ["m.so"]]
    assert profile([])["wall_s"] is None


def test_build_lines_of_every_aiter_form():
    text = "\n".join([
        "[aiter] start build [module_aiter_enum] under /home/u/aiter/aiter/jit/build/module_aiter_enum",
        "Successfully preprocessed all matching files.",
        "[aiter] finish build [module_aiter_enum], cost 19.54064721s",                       # v0.1.4-0.1.5
        "(APIServer pid=1) [aiter] \x1b[32mfinish build [module_rmsnorm], cost 8.1s \x1b[0m",  # no start seen
        "[aiter] [pid=77 pname=MainProcess] start build [module_moe] under /x/build/module_moe",
        "[aiter] failed jit build [module_moe]",
        "[aiter] [pid=77 pname=MainProcess] \x1b[32mfinish build [module_moe], cost 57.8s \x1b[0m",
        "[aiter] start build [module_gemm_a8w8_blockscale] under /x/build/module_gemm_a8w8_blockscale",
        "[aiter] import [module_aiter_enum] under /x/module_aiter_enum.so",
    ])
    got = [(b["module"], b["cost_s"], b["failed"]) for b in build_lines(text)]
    assert got == [("module_aiter_enum", 19.541, False), ("module_rmsnorm", 8.1, False),
                   ("module_moe", 57.8, True), ("module_gemm_a8w8_blockscale", None, False)]
    assert build_lines(text)[0]["dir"] == "/home/u/aiter/aiter/jit/build/module_aiter_enum"


def test_report_section_from_a_profile_in_markdown_and_html():
    p = profile(parse_ninja_log((FIX / "seed004_moe_ck2stages.ninja_log").read_text())[0])
    ctx = {"jit_profile": {"modules": [{"phase": "after promotion", "module": MD, "cost_s": 59.8, "failed": False,
                                        "builds": 1, "node_log": "/x/.ninja_log", "local_log": None,
                                        "truncated": False, **p}],
                           "missing": [{"label": "after benchmark", "jit_dir": "/j/jit/after", "module": "module_x"}]}}
    md, html = render_report(ctx)
    assert "## JIT cold builds" in md and '<section id="jit">' in html
    assert "59.8" in md and "54.9" in md and "54.3" in md                  # finish build, ninja wall, slowest
    assert f"{GEMM1} (54.3 s) -> {MD}.so (0.6 s) = 54.9 s of 54.9 s ninja wall" in md
    assert GEMM1 in html and "Critical path" in html and "no .ninja_log for module_x" in html
    md2, html2 = render_report({})
    assert "JIT cold builds" not in md2 and 'id="jit"' not in html2


def test_node_helper_op_jit_logs_returns_the_ninja_logs_of_a_jit_dir(tmp_path):
    from tests.unit.test_node_helper import call, ok
    seed = (FIX / "seed004_moe_ck2stages.ninja_log").read_text()
    for name in ("module_a", "module_b"):
        d = tmp_path / "jit" / "build" / name / "build"
        d.mkdir(parents=True)
        (d / ".ninja_log").write_text(seed)
    big = tmp_path / "jit" / "build" / "module_b" / "build" / ".ninja_log"
    big.write_text(seed * 40)
    res = ok("jit_logs", {"dirs": [{"label": "after", "jit_dir": str(tmp_path / "jit"), "modules": None},
                                   {"label": "live", "jit_dir": None, "jit_dir_env": str(tmp_path / "jit"),
                                    "modules": ["module_a", "module_gone"]},
                                   {"label": "empty", "jit_dir": str(tmp_path / "nothing"), "modules": None}],
                          "max_bytes": 4096})
    got = {(e["label"], e["module"]): e for e in res["logs"]}
    assert sorted(got) == [("after", "module_a"), ("after", "module_b"), ("live", "module_a")]
    assert got[("after", "module_a")]["text"] == seed and not got[("after", "module_a")]["truncated"]
    tail = got[("after", "module_b")]
    assert tail["truncated"] and len(tail["text"]) <= 4096 and seed.endswith(tail["text"].splitlines()[-1] + "\n")
    assert profile(parse_ninja_log(tail["text"])[0])["wall_s"] == 54.877     # the last build survives the cut
    assert {(m["label"], m["module"]) for m in res["missing"]} == {("live", "module_gone"), ("empty", None)}
    bad = call("jit_logs", {"dirs": "x"})
    assert bad["ok"] is False and "dirs" in bad["error"]


def test_jit_logs_since_lists_only_what_the_live_dir_built_from_then_on(tmp_path):
    import os
    from tests.unit.test_node_helper import ok
    for name, mtime in (("module_old", 1000.0), ("module_new", 2000.0)):
        d = tmp_path / "jit" / "build" / name / "build"
        d.mkdir(parents=True)
        (d / ".ninja_log").write_text("# ninja log v5\n")
        os.utime(d / ".ninja_log", (mtime, mtime))
    res = ok("jit_logs", {"dirs": [{"label": "after promotion", "jit_dir": str(tmp_path / "jit"), "modules": None,
                                    "since": 1500.0}]})
    assert [e["module"] for e in res["logs"]] == ["module_new"] and res["missing"] == []


def test_the_jit_logs_sent_ahead_answer_the_report_only_for_what_it_needs():
    """jitprofile: promote's batch asks the live dir for everything built since the last poll; the report
    step keeps the modules its engaged-at-runtime log says were built, and asks again if the dirs differ."""
    from orchestrator.steps.jitprofile import LAST, _from_ahead
    live = {"label": LAST, "jit_dir": None, "package_dir": "/a/aiter", "jit_dir_env": None}
    private = {"label": "after benchmark", "jit_dir": "/j/jit/after", "modules": None}
    sent = {"dirs": [private, {**live, "modules": None, "since": 1500.0}]}
    answer = {"logs": [{"label": "after benchmark", "module": "module_x", "jit_dir": "/j/jit/after"},
                       {"label": LAST, "module": "module_x", "jit_dir": "/live"},
                       {"label": LAST, "module": "module_server_built", "jit_dir": "/live"}],
              "missing": []}
    got = _from_ahead((sent, answer), [private, {**live, "modules": ["module_x", "module_y"]}])
    assert [(e["label"], e["module"]) for e in got["logs"]] == [("after benchmark", "module_x"), (LAST, "module_x")]
    assert got["missing"] == [{"label": LAST, "jit_dir": "/live", "module": "module_y"}]
    assert _from_ahead((sent, answer), [private])["logs"] == answer["logs"][:1]      # nothing built after
    assert _from_ahead((sent, answer), [{**private, "jit_dir": "/other"}]) is None
    assert _from_ahead((sent, answer), [private, {**live, "package_dir": "/b", "modules": ["module_x"]}]) is None
