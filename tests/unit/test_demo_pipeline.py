"""`tune-remote demo`: the whole pipeline against the local simulated node, checked against the model."""

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli import main
from tests.expect import assert_comparison_matches_model


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.05")
    return tmp_path / "ws"


def only_job(ws: Path) -> Path:
    [job] = [d for d in ws.iterdir() if (d / "state.json").is_file()]
    return job


@pytest.mark.parametrize("profile,version", [("current", "0.1.20"), ("legacy", "0.1.11"), ("head", "0.1.30")])
def test_demo_runs_to_a_report_that_matches_the_perf_model(ws, capsys, profile, version):
    assert main(["--workspace", str(ws), "demo", "--profile", profile]) == 0
    job = only_job(ws)
    state = json.loads((job / "state.json").read_text())
    assert state["state"] == "succeeded"
    got = assert_comparison_matches_model(job, "a8w8_blockscale", version)
    assert (got["speedup_pct"].astype(float) > 1).any() and (got["speedup_pct"].astype(float) < -1).any()
    ts = Path(state["remote"]["logs"]["tune"]).name.split("_tuning_")[1]
    for name in (f"a8w8_blockscale_bench_before_{ts}", f"a8w8_blockscale_tuning_{ts}",
                 f"a8w8_blockscale_bench_after_{ts}"):
        assert (job / "logs" / name).is_file()
    md = (job / "report.md").read_text()
    assert "ck TFLOPS" in md and "higher is better" in md
    # the outcome: verdicts on 3+3 runs, proven rows promoted, every promoted shape engaged at runtime
    promoted = int((got["promoted"] == "true").sum())
    assert promoted and promoted == state["steps"]["promote"]["info"]["promoted"]
    # what rode in promote's round trip (the engaged benchmark's output, JIT logs) is not kept in the state
    assert "then" not in state["remote"]["promotion"] and state["remote"]["promotion"]["promoted"]
    assert not ((got["promoted"] == "true") & (got["verdict"] != "improved")).any()
    assert "Verdicts rest on 3 before and 3 after runs per shape" in md
    # C-11: keys added / changed / removed, not a row count; C-18: the bench calls as the node ran them
    assert re.search(r"\| keys added / changed / removed \(table before vs after tuning\) +\| \d+ / \d+ / 0 +\|", md)
    # the bench calls as the node ran them: in report.html (report.md fits a PR and leaves commands out)
    html = (job / "report.html").read_text()
    assert "exec env" not in html and html.count("HIP_VISIBLE_DEVICES=") >= 2
    # issue 26: the after arm's private JIT dir builds each module once, without AITER_REBUILD
    assert "AITER_REBUILD=" not in html and "no AITER_REBUILD" in html and f"{sys.executable} " in html
    assert "## Benchmarks" not in md
    assert f"Engaged at runtime: {promoted}/{promoted} promoted shapes" in md
    assert (job / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    # P-11: the kernel chosen for every tuned shape, as the tuned table holds it
    tuned = state["steps"]["compare"]["info"]["tuned"]
    kernels = tuned["kernels"]
    assert len(kernels) == len(tuned["tuned"]) > 0 and all(k["kernel"] and float(k["us"]) > 0 for k in kernels)
    assert kernels[0]["kernel"] in html and 'id="kernels"' in html and "## Kernels chosen" not in md
    # JIT cold-build profile (seed 004): the after benchmark's private build and the after promotion, from
    # their .ninja_log (one CK instance per kernel of the table it was built from, then the link)
    prof = json.loads((job / "jit_profile.json").read_text())
    mods = {(m["phase"], m["module"]): m for m in prof["modules"]}
    for phase in ("after benchmark", "after promotion"):
        m = mods[(phase, "module_gemm_a8w8_blockscale")]
        assert m["cost_s"] >= m["wall_s"] > 0 and m["critical_path"][-1]["output"] == "module_gemm_a8w8_blockscale.so"
        assert Path(m["local_log"]).read_text() == Path(m["node_log"]).read_text()
    staging = pd.read_csv(job / Path(state["remote"]["tuned_csv"]).name)
    # one table, two modules: the ck rows compile into the main one, the cktile rows into its _cktile sibling
    kernels = {f"{k}.cuda.o" for k in staging[staging["libtype"] == "ck"]["kernelName"]}
    after = mods[("after benchmark", "module_gemm_a8w8_blockscale")]
    assert after["edges"] == len(kernels) + 3     # + dispatch TU, pybind TU, link
    assert after["slowest"][0]["output"] in kernels
    cktile = {f"{k}.cuda.o" for k in staging[staging["libtype"] == "cktile"]["kernelName"]}
    if ("after benchmark", "module_gemm_a8w8_blockscale_cktile") in mods:
        assert mods[("after benchmark", "module_gemm_a8w8_blockscale_cktile")]["edges"] == len(cktile) + 3
    # every build with its reason, and the count against the job's minimum (issue 26)
    assert all(m["reason"] for m in prof["modules"]) and 0 < prof["minimum"] <= prof["builds"]
    assert f"{prof['builds']} build(s) against a minimum of {prof['minimum']}" in md
    assert "## JIT cold builds" in md and "### Critical path" in md and 'id="jit"' in (job / "report.html").read_text()
    # the node has its own copy of the report next to the logs
    assert Path(state["remote"]["report_md"]).read_text() == md
    # the tuned CSV was backed up before the first write, and the backup was fetched
    assert state["remote"]["tuned_backup"] and list((job / "backup").iterdir())


def test_demo_nodes_3_runs_a_campaign_over_two_gpu_kinds(ws, capsys):
    """`demo --nodes 3` (issue 10's 'Done when'): demo1 and demo2 share a GPU kind and split its shapes,
    demo3 (cu_num 64) is a kind of its own and tunes every shape; one job, one comparison, one report."""
    assert main(["--workspace", str(ws), "demo", "--nodes", "3", "--repeats", "1"]) == 0
    job = only_job(ws)
    state = json.loads((job / "state.json").read_text())
    assert state["state"] == "succeeded" and state["node"] == "demo1,demo2,demo3"
    comp = pd.read_csv(job / "comparison.csv", dtype=str, keep_default_na=False)
    keys = {n: {(r["m"], r["n"], r["k"]) for _, r in comp[comp["node"] == n].iterrows()}
            for n in ("demo1", "demo2", "demo3")}
    assert keys["demo1"] and keys["demo2"] and not keys["demo1"] & keys["demo2"]
    assert keys["demo1"] | keys["demo2"] == keys["demo3"]          # each kind tunes every shape once
    rows = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rows["state"] == "succeeded"
    targets = {t["node"]: t["state"] for t in json.loads(_status(ws))[0]["targets"]}
    assert targets == {"demo1": "succeeded", "demo2": "succeeded", "demo3": "succeeded"}
    md = (job / "report.md").read_text()
    assert "demo3" in md and (job / "report.html").is_file()
    # a real HTML page (it was the Markdown inside <pre>): tables, headings; UTC times; verdicts as words
    page = (job / "report.html").read_text()
    assert "<table>" in page and "<h2>Targets</h2>" in page and "<pre style" not in page and "| node |" not in page
    assert " UTC. **State:**" in md and "verdicts {" not in md
    # the campaign's other commands work on the demo's targets too
    assert main(["--workspace", str(ws), "fetch", job.name, "--node", "demo3"]) == 0
    assert main(["--workspace", str(ws), "logs", job.name, "--node", "nosuch"]) == 2


def _status(ws: Path) -> str:
    import io
    from contextlib import redirect_stdout
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--workspace", str(ws), "status", "--json"]) == 0
    return out.getvalue()


def test_quiet_still_prints_the_result_and_stdout_is_one_json_line(ws, capsys):
    """`-q` is "print only results and errors": `JOB=$(tune-remote -q run ...)` needs the result line, and a
    piped demo's stdout must be JSON alone (`| jq`): the report paths go to stderr (a user's findings)."""
    assert main(["-q", "--workspace", str(ws), "demo", "--repeats", "1"]) == 0
    out, err = capsys.readouterr()
    [line] = out.strip().splitlines()
    got = json.loads(line)
    assert got["state"] == "succeeded" and got["job_id"] and got["dir"]
