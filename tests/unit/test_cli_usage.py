"""Bad input: one clear line, exit 2, and nothing remote (the node below would refuse: exit 3)."""

import json
from pathlib import Path

import pytest

from orchestrator.cli import main

MODEL = str(Path(__file__).parents[1] / "fixtures" / "models" / "deepseek_v3.json")

INV = """nodes:
  n1:
    host: 127.0.0.1
    port: 1
    containers:
      c1: {}
  n2:
    host: 127.0.0.1
    port: 1
    containers:
      c1: {}
      c2: {}
"""


@pytest.fixture
def inv(tmp_path, monkeypatch):
    p = tmp_path / "inv.yaml"
    p.write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(p))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    return p


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,needle", [
    (["run", "--node", "nx", "--container", "c1", "--variant", "a8w8", "--nk", "1,2"], "unknown node 'nx'"),
    (["run", "--node", "n1", "--container", "cx", "--variant", "a8w8", "--nk", "1,2"], "no container 'cx'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a9w9", "--nk", "1,2"], "unknown variant 'a9w9'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--log", "local:/nonexistent.log"],
     "not found on this machine"),
    # --variant auto reads local logs before it connects (campaign/plan.py): it was a raw FileNotFoundError
    (["run", "--node", "n1", "--container", "c1", "--variant", "auto", "--log", "local:/nonexistent.log"],
     "not found on this machine"),
    (["run", "--node", "n1", "--node", "n2", "--container", "c1", "--variant", "auto", "--log",
      "local:/nonexistent.log"], "not found on this machine"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "7168"], "--nk '7168'"),
    # --padded-m for variants whose runtime does not pad M: said, not silently ignored
    (["run", "--node", "n1", "--container", "c1", "--variant", "a6w4", "--nk", "7168,2048", "--padded-m"],
     "--padded-m changes nothing for a6w4"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "moe_2stages,a6w4", "--log", "x.log",
      "--padded-m"], "--padded-m changes nothing for moe_2stages, a6w4"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8"], "no shape source"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2", "--job-id", "../x"],
     "invalid job id"),
    # --container may be left out only where the node has exactly one container (issue 10)
    (["run", "--node", "n2", "--variant", "a8w8", "--nk", "1,2"], "node 'n2' has 2 containers; say which"),
    (["run", "--container", "c1", "--variant", "a8w8", "--nk", "1,2"], "say where to tune"),
    # checked before connecting (was: after discover, or never: a job stuck at "running")
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2", "--m-preset", "foo"],
     "--m-preset 'foo'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "moe_2stages", "--nk", "1,2"],
     "--nk applies to dense GEMM variants"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8_blockscale", "--model", MODEL, "--tp", "3"],
     "is not divisible by tp = 3"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8_blockscale", "--model", "{empty}"],
     "no 'hidden_size' in the config"),
    (["shapes", "--model", MODEL, "--tp", "3"], "is not divisible by tp = 3"),
    (["shapes", "--model", "{empty}"], "no 'hidden_size' in the config"),
    (["shapes", "--model", MODEL, "--m-preset", "1,x"], "--m-preset '1,x'"),
    (["run", "--node", "n1", "--container", "c1", "--variant", ",", "--nk", "1,2"], "names no variant"),
    (["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2", "--slurm-nodes", "2"],
     "--slurm-nodes applies to --slurm"),
    (["demo", "--variant", "a6w6"], "the demo cannot run a6w6"),
    (["resume", "nope"], "no job 'nope'"),
    (["logs", "nope"], "no job 'nope'"),
])
def test_usage_errors_exit_2_with_one_line(inv, capsys, argv, needle):
    empty = inv.parent / "empty.json"
    empty.write_text("{}")
    code, out, err = run([a.replace("{empty}", str(empty)) for a in argv], capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


def test_bad_inventory_exits_2(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  n1:\n    host: h\n    containers: 3\n")
    code, out, err = run(["--inventory", str(bad), "run", "--node", "n1", "--container", "c",
                          "--variant", "a8w8", "--nk", "1,2"], capsys)
    assert code == 2 and f"{bad}:4" in err


def test_unreachable_node_exits_3(inv, capsys):
    code, out, err = run(["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2",
                          "--yes"], capsys)
    assert code == 3, err
    assert "cannot connect" in err


def test_status_json_lists_jobs(inv, capsys):
    from orchestrator.state import JobState, Workspace, resolve_workspace
    ws = Workspace(resolve_workspace(None))
    ws.save(JobState(job_id="j1", node="n1", container="c1", variant="a8w8", created=0.0, request={}))
    code, out, err = run(["status", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert rows[0]["job_id"] == "j1" and rows[0]["state"] == "running"
    assert {"job_id", "state", "step", "node", "container", "variant"} <= set(rows[0])


def test_shapes_csv_has_q_dtype_w_only_where_the_log_gives_it(tmp_path, capsys):
    """Issue 4: "m,n,k + q_dtype_w where the log gives it": a log of an AITER before v0.1.10 (a8w8 lines
    without q_dtype_w) gives that AITER's M,N,K CSV; logs mixing both forms: one line, exit 2 (was: an
    internal error, exit 1, no file)."""
    old = '[aiter] shape is M:16, N:8192, K:1024, not found tuned config in /a/a8w8_tuned_gemm.csv, will use default config!'
    new = ('[aiter] shape is M:32, N:1280, K:8192, q_dtype_w:torch.int8, not found tuned config in '
           '/a/a8w8_tuned_gemm.csv, will use default config!')
    (tmp_path / "old.log").write_text(old + "\n")
    (tmp_path / "new.log").write_text(new + "\n")
    (tmp_path / "mixed.log").write_text(old + "\n" + new + "\n")
    for name, header, row in (("old", "M,N,K", "16,8192,1024"), ("new", "M,N,K,q_dtype_w", "32,1280,8192,torch.int8")):
        out = tmp_path / f"{name}.csv"
        code, _, err = run(["shapes", str(tmp_path / f"{name}.log"), "--variant", "a8w8", "--csv", str(out),
                            "--m-preset", "logged"], capsys)
        assert code == 0, err
        assert out.read_text().splitlines() == [header, row]
    code, _, err = run(["shapes", str(tmp_path / "mixed.log"), "--variant", "a8w8", "--csv",
                        str(tmp_path / "mixed.csv")], capsys)
    assert code == 2 and "lacks column(s) q_dtype_w" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "mixed.csv").exists()


def test_a_log_missing_in_the_container_is_a_usage_error(tmp_path, capsys):
    """Issue 3: "missing log -> one clear line, exit 2": a container path can only be looked for there
    (discover runs first), but it is still the user's input that is wrong: exit 2, not a job failure (1)."""
    import time

    from orchestrator.cli.base import Env
    from orchestrator.campaign.runs import one
    from orchestrator.context import Settings
    from orchestrator.demo import demo_target, prepare_demo
    from orchestrator.errors import UsageError
    from orchestrator.state import JobState, Workspace
    demo_dir, _ = prepare_demo(tmp_path / "node")
    env = Env.__new__(Env)
    env.workspace, env.quiet = Workspace(tmp_path / "ws"), True
    job = JobState(job_id="j1", node="demo", container="simulated", variant="a8w8_blockscale",
                   created=time.time(), request={"logs": ["/nonexistent/server.log"], "detach": False,
                                                 "m_preset": None, "nk": [], "shapes_csv": None, "gpus": None,
                                                 "repeats": 1, "promote": "proven"})
    with pytest.raises(UsageError) as err:
        one(env.workspace, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.05), env.ui())
    assert err.value.exit_code == 2 and "log file not found on the container: /nonexistent/server.log" in str(err.value)
    assert env.workspace.load("j1").state == "failed"


def test_m_preset_spellings_that_worked_still_work():
    from orchestrator.steps.shape_sources import check_m_preset, expand
    for preset in (None, "logged", "LOGGED", "none", "pow2", "CudaGraph", "1,2,4"):
        check_m_preset(preset)
    moe = [{"token": 96, "model_dim": 1, "inter_dim": 1, "expert": 1, "topk": 1}]
    assert expand(moe, "moe", "LOGGED") == moe and expand(moe, "moe", "none") == moe
    from orchestrator.steps.shape_sources import sweep_preset      # nothing logged (--nk, --model): the default sweep
    assert [sweep_preset(p) for p in (None, "logged", "LOGGED", "none", "1,8")] == ["pow2"] * 4 + ["1,8"]


def test_dry_run_of_one_target_launches_nothing_and_an_unreachable_plan_exits_3_at_once(inv, capsys, monkeypatch):
    """`--dry-run` was read only by campaigns: a single-target run went on to tune (an audit found it). Now it
    plans like a campaign of one; a node that refuses the connection is said at once (exit 3), not retried
    for TUNE_REMOTE_RECONNECT_S as a lost connection with a hint naming a placeholder job."""
    import os
    import time

    from orchestrator.campaign import runs
    monkeypatch.setattr(runs, "one", lambda *a, **k: pytest.fail("a dry run drove the job"))
    t = time.monotonic()
    code, out, err = run(["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2",
                          "--dry-run"], capsys)
    assert code == 3, err
    assert time.monotonic() - t < 10 and "cannot connect" in err and "resume probe" not in err
    assert not os.path.exists(os.environ["TUNE_REMOTE_WORKSPACE"]) or not any(
        p.name != ".locks" for p in Path(os.environ["TUNE_REMOTE_WORKSPACE"]).iterdir())
    # --detach with --dry-run (one target or a campaign, or --slurm): one line, exit 2, nothing saved (issue 28)
    for where in (["--node", "n1", "--container", "c1"], ["--node", "n1", "--node", "n2", "--container", "c1"],
                  ["--slurm", "nosuch"]):
        code, out, err = run(["run", *where, "--variant", "a8w8", "--nk", "1,2", "--dry-run", "--detach"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--detach" in err and "--dry-run" in err, err
        assert not out
    assert not os.path.exists(os.environ["TUNE_REMOTE_WORKSPACE"]) or not any(
        p.name != ".locks" for p in Path(os.environ["TUNE_REMOTE_WORKSPACE"]).iterdir())


def test_a_run_that_fails_before_its_job_is_saved_leaves_no_job_dir(inv, capsys):
    """A generated id is claimed by creating its directory; a refused connection (exit 3) must not leave
    that directory behind (a reviewer found one per failed run)."""
    import os
    for _ in range(2):
        code, out, err = run(["run", "--node", "n1", "--container", "c1", "--variant", "a8w8", "--nk", "1,2",
                              "--yes"], capsys)
        assert code == 3, err
    ws = Path(os.environ["TUNE_REMOTE_WORKSPACE"])
    assert not ws.exists() or [p.name for p in ws.iterdir() if not p.name.startswith(".")] == []


def test_csv_diff_and_merge_refuse_files_that_are_not_tuned_tables(tmp_path, capsys):
    """A user merged a comparison.csv ('118 duplicate(s) resolved', exit 0), diffed an untuned CSV (NaN rows)
    and a Markdown file (internal error, exit 1): each is now one line, exit 2."""
    (tmp_path / "cmp.csv").write_text("m,n,k,metric,before,after,speedup_pct\n1,2,3,us,1,1,0\n")
    (tmp_path / "untuned.csv").write_text("M,N,K\n1,2,3\n")
    (tmp_path / "x.md").write_text((Path(__file__).parents[2] / "README.md").read_text())
    tuned = tmp_path / "t.csv"
    tuned.write_text("gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
                     "gfx950,256,1,2,3,4,0,5.0,k,1,1,0.0\n")
    for argv, needle in ((["csv", "merge", str(tmp_path / "cmp.csv"), "-o", str(tmp_path / "o.csv")], "not an AITER tuned table"),
                         (["csv", "diff", str(tmp_path / "untuned.csv"), str(tuned)], "not an AITER tuned table"),
                         (["csv", "diff", str(tmp_path / "x.md"), str(tuned)], "is not a CSV")):
        code, out, err = run(argv, capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert run(["csv", "merge", str(tuned), "-o", str(tmp_path / "o.csv")], capsys)[0] == 0
