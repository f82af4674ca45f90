"""The simulated server's profile (issue 38): `aiter._sim.serve` under VLLM_TORCH_PROFILER_DIR writes a
torch.profiler trace (and with --kernel-trace-dir a rocprofv3 CSV) of its own decode step, which the product's
profile reader maps back to the shapes it served, with the shares the serving loop spends on them."""

from __future__ import annotations

import csv
import gzip
import json
import os

import pytest

from orchestrator.parsing.profile import ranked, read_local
from orchestrator.sim import SimSpec, install
from orchestrator.sim.localnode import run

SERVE = ["python3", "-m", "aiter._sim.serve", "--nk", "7168,2048", "--nk", "2112,7168", "--m", "1,64"]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    return install(tmp_path_factory.mktemp("node"), SimSpec())


def _serve(node, tmp_path, *extra, env=None):
    cp = run(node, [*SERVE, *extra], env=env, timeout=120)
    assert cp.returncode == 0, cp.stderr
    tpot = float(next(line.split()[-1] for line in cp.stdout.splitlines() if line.startswith("Mean TPOT")))
    return cp, tpot


def test_the_servers_trace_holds_its_gemms_with_the_shares_it_serves(node, tmp_path):
    prof, kt = tmp_path / "prof", tmp_path / "kt"
    cp, tpot = _serve(node, tmp_path, "--other-us", "40", "--kernel-trace-dir", str(kt),
                      env={"VLLM_TORCH_PROFILER_DIR": str(prof)})
    traces = sorted(os.listdir(prof))
    assert len(traces) == 1 and traces[0].endswith(".pt.trace.json.gz"), traces
    doc = json.load(gzip.open(prof / traces[0], "rt"))
    assert doc["record_shapes"] == 1
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert {e["name"] for e in ops} == {"aiter::gemm_a8w8_blockscale", "aten::scaled_dot_product_attention"}
    assert sum(e["name"].startswith("aiter::") for e in ops) == 60 * 4         # 60 layers x 4 GEMM shapes

    answer = read_local([str(prof)], "a8w8_blockscale")
    shapes = ranked(answer)["a8w8_blockscale"]
    assert {(s["m"], s["n"], s["k"]) for s in shapes} == {(m, n, k) for m in (1, 64)
                                                          for n, k in ((7168, 2048), (2112, 7168))}
    assert all(s["calls"] == 60 for s in shapes)
    # the whole GPU time is the decode step the serving loop charges: 60 layers x (GEMMs + 40 us)
    assert answer["total_gpu_us"] == pytest.approx(tpot * 1000, rel=1e-3)
    gemm_share = sum(s["time_share"] for s in shapes)
    assert gemm_share == pytest.approx(1 - 60 * 40 / (tpot * 1000), rel=1e-3)

    # the rocprofv3 CSV of the same run: the same kernels, the same whole; with the trace it changes nothing
    rows = list(csv.DictReader(open(next(kt.iterdir()))))
    assert len(rows) == 60 * 5
    total_ns = sum(int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows)
    assert total_ns / 1000 == pytest.approx(answer["total_gpu_us"], rel=1e-3)
    both = read_local([str(prof), str(kt)], "a8w8_blockscale")
    assert both["total_gpu_us"] == pytest.approx(answer["total_gpu_us"], rel=1e-3) and not both["warnings"]


def test_a_tuned_row_that_engages_moves_the_trace_and_the_figures_alike(node, tmp_path):
    """What the trace says a shape holds is what the serving figures lose when it gets faster."""
    _, before = _serve(node, tmp_path, "--other-us", "40", "--profile-dir", str(tmp_path / "p0"))
    shares = {(s["m"], s["n"], s["k"]): s["time_share"]
              for s in ranked(read_local([str(tmp_path / "p0")]))["a8w8_blockscale"]}
    assert len(shares) == 4 and 0.2 < sum(shares.values()) < 1.0
    cp, without = _serve(node, tmp_path)
    assert without < before                   # the other-us time is in the figures, not only in the trace


def test_the_expected_end_to_end_gain_is_what_the_serving_benchmark_then_measures(tmp_path, capsys):
    """The closed loop of issue 38 on the simulated node: profile the server, tune by time share, promote;
    the report's expected gain (Amdahl over the trace's shares) is the serving benchmark's measured change."""
    import subprocess
    import sys
    import time

    from orchestrator.cli.base import Env
    from orchestrator.campaign.runs import one
    from orchestrator.context import Settings
    from orchestrator.demo import demo_target, prepare_demo
    from orchestrator.state import JobState
    env = Env(None, str(tmp_path / "ws"), True)
    demo_dir, _ = prepare_demo(tmp_path / "node", variant="a8w8_blockscale")
    serve = f"{sys.executable} -m aiter._sim.serve --nk 7168,2048 --nk 2112,7168 --m 1,64 --other-us 40"
    node = json.loads((demo_dir / "demo-node.json").read_text())
    subprocess.run(serve + f" --profile-dir {tmp_path / 'prof'}", shell=True, check=True, cwd=node["aiter_root"],
                   env={"HOME": os.environ.get("HOME", "/tmp"), **node["env"]}, capture_output=True)
    job = JobState(job_id="loop", node="demo", container="simulated", variant="a8w8_blockscale", created=time.time(),
                   request={"logs": [], "profiles": ["local:" + str(tmp_path / "prof")], "demo_dir": str(demo_dir),
                            "detach": False, "m_preset": None, "nk": [], "shapes_csv": None, "gpus": None,
                            "batch": None, "timeout": None, "repeats": 1, "promote": "proven",
                            "serve_cmd": serve})
    one(env.workspace, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2), env.ui())
    done = env.workspace.load("loop")
    assert done.state == "succeeded", done.error
    summary = done.steps["compare"].info["summary"]
    serving = {r["metric"]: r for r in csv.DictReader(open(env.workspace.job_dir("loop") / "serving.csv"))}
    tok = serving["Output token throughput (tok/s)"]        # the GPU time a token costs, cut by the promotion:
    measured_cut = 100 * (1 - float(tok["before"]) / float(tok["after"]))
    assert summary["expected_e2e_gain_pct"] > 1.0
    assert summary["profiled_time_share"] == pytest.approx(1 - 60 * 40 / float(serving["Mean TPOT (ms)"]["before"])
                                                           / 1000, rel=1e-2)
    assert summary["expected_e2e_gain_pct"] == pytest.approx(measured_cut, abs=0.02), (summary, serving)
    report = (env.workspace.job_dir("loop") / "report.md").read_text()
    assert (f"Expected from the profile: {summary['expected_e2e_gain_pct']:.2f} % less GPU time per token; "
            f"measured: {measured_cut:.2f} %") in report

    # the export's PR summary carries the kernel-time share reviewers ask for (aiter#5500) and the job's own bar
    from orchestrator.cli import main
    capsys.readouterr()
    assert main(["--workspace", str(tmp_path / "ws"), "export", "loop", "--model-config", "dsv3"]) == 0
    md = open(json.loads(capsys.readouterr().out)["summary"]).read()
    comp = list(csv.DictReader(open(env.workspace.job_dir("loop") / "comparison.csv")))
    held = sum(float(r["time_share"]) for r in comp if r["promoted"] == "true")
    assert f"are {100 * held:.1f} % of the profiled server's GPU time" in md, md
    assert f"cut it by about {summary['expected_e2e_gain_pct']:.2f} % end to end" in md, md
    assert f"{summary['verdict_k']:g} x noise x sqrt(1/runs before + 1/runs after)" in md
