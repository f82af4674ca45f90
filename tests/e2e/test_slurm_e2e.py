"""Tuning on nodes from a Slurm allocation (issue 11's contract) on a real Slurm cluster: Debian's
slurmctld/slurmd/munge started by the test bed, the login node reached over SSH, each compute node's
container reached with ``srun --overlap --jobid J -w NODE docker exec``."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e

NK = ["--nk", "7168,2048", "--m-preset", "1,16,64,256"]      # 4 shapes


def nk(n_k: str) -> list[str]:
    """4 shapes no other test tunes: a node skips shapes earlier tests promoted into its live table."""
    return ["--nk", n_k, "--m-preset", "1,16,64,256"]


@pytest.fixture
def inv(tmp_path, slurm_cluster, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(slurm_cluster.inventory("testslurm", gpus_per_node=2)))
    return path


def cli(inv: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(inv.parent / "ws"), *argv])
    return rc, out.getvalue()


def test_run_on_two_slurm_nodes_uses_the_granted_gpus_and_gives_the_nodes_back(inv, slurm_cluster):
    c = slurm_cluster
    launches = {n: len(c.container(n).launches()) for n in c.computes}
    rc, out = cli(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale",
                  *NK, "--yes", "--job-id", "sl1")
    assert rc == 0, out
    (row,) = json.loads(cli(inv, "status", "--json")[1])
    assert row["state"] == "succeeded"
    assert sorted(t["node"] for t in row["targets"]) == ["a", "b"]
    comp = list(csv.DictReader((inv.parent / "ws" / "sl1" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a", "b"}
    # each compute node's own container ran its shard's tuner, once
    assert all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes)
    # the GPUs the tuner got are the ones Slurm granted to the exclusive job (ROCR_VISIBLE_DEVICES: all 8),
    # not the node's own idea of free GPUs (the sim's rocm-smi shows 6 and 7 busy)
    state = json.loads((inv.parent / "ws" / "sl1" / "state.json").read_text())["request"]["campaign"]["slurm"]
    granted = {s["node"]: s["gpus"] for s in state["jobs"].values()}
    assert granted == {"a": list(range(8)), "b": list(range(8))}
    for sub in (inv.parent / "ws" / "sl1" / "targets").iterdir():
        st = json.loads((sub / "state.json").read_text())
        assert st["facts"]["tune_gpus"] == granted[st["node"]]
    # the holders were released: no job of ours is left, and each wrote its exit-code file
    names = {s["name"] for s in state["jobs"].values()}
    assert names == {"tr-sl1-0", "tr-sl1-1"}
    from tests.fake_remote.provision import poll
    poll(lambda: not c.jobs(), timeout=30, what="holder jobs ended")
    for i in state["jobs"]:
        assert Path(state["dir"], i, "rc").read_text().strip() == "0"


def test_resume_after_a_lost_sbatch_answer_submits_nothing_twice(inv, slurm_cluster):
    """The first attempt submitted (id saved) and died; resume finds the job instead of submitting again."""
    c = slurm_cluster
    rc, out = cli(inv, "run", "--slurm", "testslurm", "--variant", "a8w8_blockscale", *NK, "--yes",
                  "--job-id", "sl2", "--dry-run")
    assert rc == 0 and not (inv.parent / "ws" / "sl2").exists()     # dry run: nothing submitted
    assert not [j for j in c.jobs() if j["name"].startswith("tr-sl2")]
    # a submission whose answer was lost: the job exists in Slurm, the laptop has no id for it
    import shlex
    import shutil

    from orchestrator.campaign.slurm import HOLDER, STOP, holder_argv
    from orchestrator.inventory import load_inventory
    ws = inv.parent / "ws" / "sl3"
    ws.mkdir(parents=True)
    home = c.jobs_dir
    d = home / "sl3" / "0"
    d.mkdir(parents=True)
    (d / "holder.sh").write_text(HOLDER)
    (d / "holder.sh").chmod(0o755)
    (d / "stop.py").write_text(STOP)
    shutil.chown(home / "sl3", c.bed.user.name)
    shutil.chown(d, c.bed.user.name)
    argv = holder_argv(load_inventory(str(inv)).cluster("testslurm"), str(d), "sl3")
    sub = c.cmd("su", "-s", "/bin/sh", c.bed.user.name, "-c",
                f"cd /tmp && sbatch --parsable -J tr-sl3-0 -N1 -o /dev/null {shlex.join(argv)}")
    first = sub.stdout.strip()
    from orchestrator.state import JobState, Workspace
    job = JobState(job_id="sl3", node="slurm:testslurm", container="", variant="a8w8_blockscale", created=0,
                   request={"logs": [], "nk": ["7168,2048"], "m_preset": "1,16", "shapes_csv": None, "gpus": None,
                            "batch": None, "timeout": None, "detach": False, "variants": ["a8w8_blockscale"],
                            "campaign": {"nodes": [], "container": None, "sub_jobs": [],
                                         "slurm": {"cluster": "testslurm", "job_id": "sl3", "nodes": 1,
                                                   "jobs": {}, "dir": str(home / "sl3")}}})
    job.step = "submit"
    Workspace(inv.parent / "ws").save(job)
    rc, out = cli(inv, "resume", "sl3", "--yes")
    assert rc == 0, out
    st = json.loads((ws / "state.json").read_text())
    assert st["request"]["campaign"]["slurm"]["jobs"]["0"]["id"] == first     # found by name, not resubmitted
    assert st["state"] == "succeeded"


TUNE_SCRIPT = "gemm_a8w8_blockscale_tune.py"


def _tuners(container) -> list[dict]:
    """Live processes naming the tune script (the tuner, its pipeline and watchdog, a --help probe)."""
    return [p for p in container.processes() if TUNE_SCRIPT in p["args"] and p["state"] != "Z"]


def _tuning(container) -> list[dict]:
    """The tuner itself (`python3 .../..._tune.py -i ...`), not discover's `--help` probe of it."""
    return [p for p in _tuners(container)
            if p["args"].startswith("python3 ") and p["args"].split()[1].endswith(TUNE_SCRIPT) and " -i " in p["args"]]


def _marked(container) -> list[int]:
    """Live container processes carrying a tune-remote job marker (the supervisor, pipeline, tuner...)."""
    script = ("for d in /proc/[0-9]*; do s=$(cut -d' ' -f3 $d/stat 2>/dev/null); [ \"$s\" = Z ] && continue; "
              "if tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -q '^TUNE_REMOTE_JOB='; then "
              "echo ${d#/proc/}; fi; done")
    return [int(x) for x in container.sh(script).stdout.split()]


def _run_in_background(inv: Path, *argv: str) -> subprocess.Popen:
    log = open(inv.parent / "run.out", "wb")
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "--workspace",
                             str(inv.parent / "ws"), *argv], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2", PYTHONFAULTHANDLER="1"))


def test_cancel_during_tuning_leaves_no_slurm_job_and_no_tuner_in_any_container(inv, slurm_cluster):
    """cancel = scancel --full --signal=TERM, wait, scancel: the holders' TERM trap is what stops the tuners
    (docker exec's processes belong to the container runtime: Slurm's process tracking never sees them)."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    for n in c.computes:
        c.container(n).slow(600)          # each tuner sits in its first shape until something stops it
    try:
        proc = _run_in_background(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant",
                                  "a8w8_blockscale", *nk("4608,7168"), "--yes", "--job-id", "slc")
        try:
            poll(lambda: all(_tuning(c.container(n)) for n in c.computes), timeout=240, interval=0.5,
                 what="a tuner running in both compute nodes' containers")
            assert {j["name"] for j in c.jobs()} >= {"tr-slc-0", "tr-slc-1"}
            rc, out = cli(inv, "cancel", "slc", "--grace", "5")
            assert rc == 0, out
            # nothing of the job is left in Slurm, nor in any container
            assert not [j for j in c.jobs() if j["name"].startswith("tr-slc")], c.jobs()
            st = json.loads((inv.parent / "ws" / "slc" / "state.json").read_text())["request"]["campaign"]["slurm"]
            stopped = {i: (Path(st["dir"]) / i / "stopped").read_text() for i in st["jobs"]}   # the traps' account
            for n in c.computes:
                assert _tuners(c.container(n)) == [], (n, stopped)
                assert _marked(c.container(n)) == [], n
            signalled = re.search(r"cancelled \((\d+) process\(es\) signalled", out)
            assert signalled and int(signalled.group(1)) >= 2, (out, stopped)     # the holders' traps counted them
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                import signal
                proc.send_signal(signal.SIGABRT)
                proc.wait(timeout=10)
    finally:
        for n in c.computes:
            c.container(n).reset_control()
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "slc"]
    assert row["state"] == "cancelled", (row, (inv.parent / "run.out").read_text()[-3000:])
    assert {t["state"] for t in row["targets"]} == {"cancelled"}, row


def test_pending_jobs_show_slurm_reason_in_live_view_and_status_then_cancel_leaves_nothing_queued(inv,
                                                                                                 slurm_cluster):
    """Both compute nodes held by other users' jobs: ours pends; the run's live view, `status` and
    `status --json` (job row "slurm", per target "slurm") say why, in Slurm's own words."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    blockers = [c.cmd("sbatch", "--parsable", "-J", f"other-{n}", "-N1", "--exclusive", "-w", n, "-o", "/dev/null",
                      "--chdir", "/tmp", "--wrap", "sleep 600").stdout.strip() for n in c.computes]
    proc = None
    try:
        poll(lambda: {j["id"] for j in c.jobs() if j["state"] == "RUNNING"} >= set(blockers), timeout=60,
             what="the other jobs to hold both nodes")
        proc = _run_in_background(inv, "run", "--slurm", "testslurm", "--variant", "a8w8_blockscale", *NK, "--yes",
                                  "--job-id", "slp")

        def pending_row():
            rc, out = cli(inv, "status", "--json")
            rows = [r for r in json.loads(out) if r["job_id"] == "slp"] if rc == 0 else []
            if rows and rows[0].get("slurm") and rows[0]["slurm"][0]["state"] == "PENDING" \
                    and rows[0]["slurm"][0]["reason"]:
                return rows[0]
            return None

        row = poll(pending_row, timeout=120, interval=0.5, what="status --json to show the job pending")
        (sj,) = row["slurm"]
        assert sj["job"] == "tr-slp-0" and sj["reason"] in ("Resources", "Priority") and sj["node"] is None, sj
        assert row["state"] == "running" and row["targets"] == []       # existing keys keep their meaning
        rc, text = cli(inv, "status", "slp")
        assert rc == 0 and f"tr-slp-0 pending ({sj['reason']})" in text, text
        log = inv.parent / "run.out"
        poll(lambda: f"(tr-slp-0) pending ({sj['reason']})" in log.read_text(), timeout=60,
             what="the live view to print the pending reason")
        rc, out = cli(inv, "cancel", "slp")
        assert rc == 0, out
        assert not [j for j in c.jobs() if j["name"].startswith("tr-slp")], c.jobs()
        assert proc.wait(timeout=120) == 1, log.read_text()
        (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "slp"]
        assert row["state"] == "cancelled", (row, log.read_text()[-2000:])
        assert row["slurm"][0]["state"] == "ENDED"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        c.cmd("scancel", *blockers, check=False)
        poll(lambda: not set(blockers) & set(c.squeue_ids()), timeout=60, what="the other jobs gone")


@pytest.mark.parametrize("field,value,slurm_says", [
    ("partition", "nosuch", "Invalid partition name specified"),
    ("time", "soon", "Invalid --time specification"),
])
def test_sbatch_refusing_the_job_is_one_line_with_slurms_words_exit_2_nothing_queued(tmp_path, slurm_cluster,
                                                                                     capsys, field, value,
                                                                                     slurm_says):
    c = slurm_cluster
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(c.inventory("testslurm", gpus_per_node=2, **{field: value})))
    capsys.readouterr()
    rc, _ = cli(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale", *NK,
                "--yes", "--job-id", f"slr{field[0]}")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2, err
    assert len(err) == 1 and "Slurm refused tr-slr" in err[0] and slurm_says in err[0], err
    assert not [j for j in c.jobs() if j["name"].startswith("tr-slr")], c.jobs()


def test_a_container_template_that_names_no_container_on_a_node_fails_fast_naming_that_node(inv, slurm_cluster,
                                                                                            capsys):
    """Node b's container is renamed away for the test: the template '<login>-{node}' resolves to nothing
    there. The holder on b says so at once; the job fails naming b, and the holder on a is released."""
    import time

    from tests.fake_remote.provision import poll
    from tests.fake_remote.provision import docker as docker_cli
    c = slurm_cluster
    b = c.container("b")
    docker_cli("rename", b.name, b.name + "-away")
    try:
        capsys.readouterr()
        t0 = time.monotonic()
        rc, _ = cli(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale", *NK,
                    "--yes", "--job-id", "slm")
        took = time.monotonic() - t0
    finally:
        docker_cli("rename", b.name + "-away", b.name)
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert rc == 1, err
    assert len(err) == 1 and f"no running container {b.name} on node b" in err[0], err
    assert took < 120, took            # not a 2-minute wait for a node file that never comes
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-slm")], timeout=60,
         what="the campaign's jobs gone (a's holder released)")
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "slm"]
    assert row["state"] == "failed" and "node b" in row["error"], row


def _report(inv: Path, job_id: str) -> str:
    return (inv.parent / "ws" / job_id / "report.md").read_text()


def test_a_job_failing_on_one_node_keeps_the_other_nodes_result_and_the_report_says_which(inv, slurm_cluster):
    c = slurm_cluster
    c.container("b").crash_after(0)           # b's tuner dies at its first shape (exit 139, like a GPU fault)
    try:
        rc, out = cli(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale",
                      *nk("2112,7168"), "--yes", "--job-id", "slf")
    finally:
        c.container("b").reset_control()
    assert rc == 1, out
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "slf"]
    states = {t["node"]: t["state"] for t in row["targets"]}
    assert states == {"a": "succeeded", "b": "failed"}, row
    assert "b/" in row["error"] and "a/" not in row["error"], row
    comp = list(csv.DictReader((inv.parent / "ws" / "slf" / "comparison.csv").open()))
    assert comp and {r["node"] for r in comp} == {"a"}, comp           # a's result kept
    report = _report(inv, "slf")
    assert "| a |" in report and "| b |" in report
    b_row = next(line for line in report.splitlines() if line.startswith("| b |"))
    assert "failed" in b_row, b_row
    from tests.fake_remote.provision import poll
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-slf")], timeout=60, what="holders gone")


def test_a_slurm_job_vanishing_without_an_exit_code_file_is_lost_and_the_report_says_so(inv, slurm_cluster):
    """b's holder is SIGKILLed mid-tuning (its TERM trap cannot run, no exit-code file): b's target is lost,
    its untuned shapes move to a (the survivor), and the report says b was lost and why."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    b = c.container("b")
    b.slow(600)
    proc = _run_in_background(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant",
                              "a8w8_blockscale", *nk("3072,1536"), "--yes", "--job-id", "sll")
    try:
        poll(lambda: _tuning(b), timeout=240, interval=0.5, what="b's tuner running")
        (jid,) = [j["id"] for j in c.jobs() if j["name"].startswith("tr-sll") and j["nodes"] == "b"]
        c.cmd("scancel", "--batch", "--signal=KILL", jid)
        assert proc.wait(timeout=300) == 0, (inv.parent / "run.out").read_text()[-3000:]   # a tuned b's shapes
    finally:
        if proc.poll() is None:
            proc.kill()
        b.reset_control()
        pids = _marked(b)
        if pids:
            b.exec("kill", "-KILL", *map(str, pids), check=False)
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "sll"]
    lost = [t for t in row["targets"] if t["state"] == "lost"]
    assert [t["node"] for t in lost] == ["b"], row
    sub = json.loads(next((inv.parent / "ws" / "sll" / "targets").glob("sll.b.*/state.json")).read_text())
    assert "vanished without an exit-code file" in sub["error"], sub["error"]
    comp = list(csv.DictReader((inv.parent / "ws" / "sll" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a"}, comp    # b's shapes were tuned on a
    b_row = next(line for line in _report(inv, "sll").splitlines() if line.startswith("| b |"))
    assert "lost" in b_row and "vanished without an exit-code file" in b_row, b_row
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-sll")], timeout=60, what="holders gone")


def test_laptop_killed_mid_run_then_resume_submits_nothing_and_tunes_each_shard_once(inv, slurm_cluster):
    """The laptop's `run` is SIGKILLed while both nodes tune; `resume` re-attaches to the same Slurm jobs (no
    sbatch), the tuners go on where they are (no second launch) and the campaign completes."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    launches = {n: len(c.container(n).launches()) for n in c.computes}
    for n in c.computes:
        c.container(n).slow(8)            # 2 shapes per node: ~16 s of tuning to kill the laptop in
    try:
        proc = _run_in_background(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant",
                                  "a8w8_blockscale", *nk("1536,7168"), "--yes", "--job-id", "slk")
        try:
            poll(lambda: all(_tuning(c.container(n)) for n in c.computes), timeout=240, interval=0.3,
                 what="a tuner running in both compute nodes' containers")
        finally:
            proc.kill()
            proc.wait(timeout=30)
        state = json.loads((inv.parent / "ws" / "slk" / "state.json").read_text())
        before = {i: s["id"] for i, s in state["request"]["campaign"]["slurm"]["jobs"].items()}
        assert len(before) == 2 and {j["id"] for j in c.jobs() if j["name"].startswith("tr-slk")} == set(
            before.values())
        rc, out = cli(inv, "resume", "slk", "--yes")
    finally:
        for n in c.computes:
            c.container(n).reset_control()
    assert rc == 0, out
    state = json.loads((inv.parent / "ws" / "slk" / "state.json").read_text())
    assert {i: s["id"] for i, s in state["request"]["campaign"]["slurm"]["jobs"].items()} == before
    assert state["state"] == "succeeded"
    assert all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes)   # no second launch
    comp = list(csv.DictReader((inv.parent / "ws" / "slk" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a", "b"}
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-slk")], timeout=60, what="holders gone")


def test_cancel_while_the_campaign_is_still_planning_leaves_no_pipeline_behind(inv, slurm_cluster):
    """cancel as soon as both holders run (discovery/plan under way): a launch in flight is still stopped by the
    holders' traps, and no srun step starts new work once cancel asked (the step guard)."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    for n in c.computes:
        c.container(n).slow(600)
    try:
        proc = _run_in_background(inv, "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant",
                                  "a8w8_blockscale", *nk("1024,7168"), "--yes", "--job-id", "slq")
        state = inv.parent / "ws" / "slq" / "state.json"

        def both_placed():
            try:
                jobs = json.loads(state.read_text())["request"]["campaign"]["slurm"]["jobs"]
            except (OSError, ValueError, KeyError):
                return False
            return len(jobs) == 2 and all(s.get("node") for s in jobs.values())

        try:
            poll(both_placed, timeout=240, interval=0.2, what="both holders running")
            rc, out = cli(inv, "cancel", "slq", "--grace", "3")
            assert rc == 0, out
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert not [j for j in c.jobs() if j["name"].startswith("tr-slq")], c.jobs()
        for n in c.computes:
            assert _tuners(c.container(n)) == [] and _marked(c.container(n)) == [], n
    finally:
        for n in c.computes:
            c.container(n).reset_control()
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "slq"]
    assert row["state"] == "cancelled", (row, (inv.parent / "run.out").read_text()[-3000:])


# ------------------------------------------------------------------------------------------------
# run --detach --slurm: submit and leave (issue 28)
# ------------------------------------------------------------------------------------------------

def _detach(inv: Path, job_id: str, n_k: str) -> tuple[float, dict]:
    import time
    t = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "--workspace",
                         str(inv.parent / "ws"), "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant",
                         "a8w8_blockscale", *nk(n_k), "--yes", "--job-id", job_id, "--detach"],
                        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))
    took = time.monotonic() - t
    assert cp.returncode == 0, cp.stderr[-3000:]
    (line,) = cp.stdout.strip().splitlines()
    out = json.loads(line)
    assert out["job_id"] == job_id and out["state"] == "running", out
    return took, out


def _resume(inv: Path, job_id: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "--workspace",
                           str(inv.parent / "ws"), "resume", job_id], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))


def test_detached_slurm_campaign_tunes_on_and_resume_finishes_it_with_the_promotion(inv, slurm_cluster):
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    launches = {n: len(c.container(n).launches()) for n in c.computes}
    took, _ = _detach(inv, "sld1", "5120,2560")
    print(f"run --detach --slurm returned in {took:.2f} s")
    assert took < 30
    poll(lambda: all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes), timeout=120,
         interval=0.5, what="both shards tuned without the laptop")
    rc, out = cli(inv, "status", "sld1", "--json")
    (row,) = json.loads(out)
    assert row["state"] == "running" and sorted(t["node"] for t in row["targets"]) == ["a", "b"], row
    assert {j["state"] for j in row["slurm"]} == {"RUNNING"}, row     # the holders keep the nodes for resume
    rc, out = cli(inv, "fetch", "sld1")
    assert rc == 0, out
    poll(lambda: all(not _tuners(c.container(n)) for n in c.computes), timeout=120, interval=0.5,
         what="the tuners done")
    res = _resume(inv, "sld1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "succeeded"
    state = json.loads((inv.parent / "ws" / "sld1" / "state.json").read_text())
    assert state["request"]["campaign"]["spread"]
    rts = 0
    for sub in (inv.parent / "ws" / "sld1" / "targets").iterdir():
        rts += json.loads((sub / "state.json").read_text())["remote"]["stats"][-1]["round_trips"]
    print(f"resume of a detached Slurm campaign whose targets are done: {rts} round trips (targets)")
    comp = list(csv.DictReader((inv.parent / "ws" / "sld1" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a", "b"}
    assert all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes)   # nothing tuned twice
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-sld1")], timeout=60, what="holders gone")


def _kill_holder(c, job_id: str, node: str) -> None:
    """The scheduler kills NODE's holder job of JOB_ID (as a time limit or a node failure would)."""
    (jid,) = [j["id"] for j in c.jobs() if j["name"].startswith(f"tr-{job_id}") and j["nodes"] == node]
    c.cmd("scancel", "--batch", "--signal=KILL", jid)


def _stop(ctr) -> None:
    """The container back to normal speed and whatever still carries a job marker there killed."""
    ctr.reset_control()
    pids = _marked(ctr)
    if pids:
        ctr.exec("kill", "-KILL", *map(str, pids), check=False)


def _resharded_onto_a(inv, c, job_id: str) -> None:
    """`resume` finds b lost, tunes b's shapes on a and finishes: exit 0, every shape tuned on a, no holder left."""
    from tests.fake_remote.provision import poll
    res = _resume(inv, job_id)
    assert res.returncode == 0 and "lost" in res.stderr, res.stderr[-3000:]
    comp = list(csv.DictReader((inv.parent / "ws" / job_id / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a"}, comp
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith(f"tr-{job_id}")], timeout=60, what="holders gone")


def test_a_slurm_job_killed_while_detached_is_resharded_by_resume_and_cancel_leaves_no_tuner(inv, slurm_cluster):
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    b = c.container("b")
    b.slow(600)
    try:
        _detach(inv, "sld2", "6144,3072")
        poll(lambda: _tuning(b), timeout=120, interval=0.5, what="b's tuner running after run returned")
        _kill_holder(c, "sld2", "b")                         # the scheduler kills b's job while nobody watches
    finally:
        _stop(b)
    _resharded_onto_a(inv, c, "sld2")
    # cancel of a detached Slurm campaign: no job, no tuner left
    for n in c.computes:
        c.container(n).slow(600)
    try:
        _detach(inv, "sld3", "7680,3840")
        poll(lambda: all(_tuning(c.container(n)) for n in c.computes), timeout=120, interval=0.5,
             what="both tuners running")
        rc, out = cli(inv, "cancel", "sld3", "--grace", "5")
        assert rc == 0, out
        assert not [j for j in c.jobs() if j["name"].startswith("tr-sld3")], c.jobs()
        for n in c.computes:
            assert _tuners(c.container(n)) == [], n
    finally:
        for n in c.computes:
            c.container(n).reset_control()


def _hold_both_nodes(c) -> list[str]:
    """Other users' jobs on every compute node (exclusive): ours stay PENDING (Resources) until they end."""
    from tests.fake_remote.provision import poll
    blockers = [c.cmd("sbatch", "--parsable", "-J", f"other-{n}", "-N1", "--exclusive", "-w", n, "-o", "/dev/null",
                      "--chdir", "/tmp", "--wrap", "sleep 600").stdout.strip() for n in c.computes]
    try:
        poll(lambda: {j["id"] for j in c.jobs() if j["state"] == "RUNNING"} >= set(blockers), timeout=60,
             what="the other jobs to hold both nodes")
    except BaseException:
        c.cmd("scancel", *blockers, check=False)
        raise
    return blockers


def test_detach_while_the_nodes_are_busy_returns_in_seconds_with_the_jobs_pending(inv, slurm_cluster):
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    blockers = _hold_both_nodes(c)
    try:
        took, _ = _detach(inv, "sldp", "4096,2048")
        print(f"run --detach --slurm with both nodes busy returned in {took:.2f} s")
        assert took < 30
        rc, out = cli(inv, "status", "sldp", "--json")
        (row,) = json.loads(out)
        assert {(j["state"], j["reason"]) for j in row["slurm"]} <= {("PENDING", "Resources"),
                                                                      ("PENDING", "Priority")}, row
        # planned while queued (--nk is read here): one target per holder, each shown as the scheduler says
        assert row["state"] == "running" and sorted(t["node"] for t in row["targets"]) == ["tr-sldp-0",
                                                                                           "tr-sldp-1"], row
        assert {t["slurm"]["state"] for t in row["targets"]} == {"PENDING"}, row
        rc, out = cli(inv, "cancel", "sldp")
        assert rc == 0, out
        assert not [j for j in c.jobs() if j["name"].startswith("tr-sldp")], c.jobs()
        (row,) = json.loads(cli(inv, "status", "sldp", "--json")[1])
        assert row["state"] == "cancelled", row
    finally:
        c.cmd("scancel", *blockers, check=False)
        poll(lambda: not set(blockers) & set(c.squeue_ids()), timeout=60, what="the other jobs gone")


def _laptop_processes(job_id: str) -> list[str]:
    """tune-remote CLI processes on this machine naming the job (the node driver is `python3 .../drive.zip`)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            argv = (d / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if "orchestrator" in argv and "-m" in argv and job_id in argv:
            out.append(" ".join(argv))
    return out


def test_a_campaign_queued_at_detach_tunes_on_its_nodes_without_the_laptop_and_resume_finishes_it(inv,
                                                                                                slurm_cluster):
    """Both nodes busy: `run --detach` plans the --nk shapes over the two pending holders and puts each shard and
    the package on the shared filesystem, then exits. Once Slurm grants them, each holder's node driver launches
    its shard with no tune-remote process on the laptop; `resume` then only waits, fetches and finishes."""
    import time

    from tests.fake_remote.provision import poll
    c = slurm_cluster
    launches = {n: len(c.container(n).launches()) for n in c.computes}
    blockers = _hold_both_nodes(c)
    try:
        took, _ = _detach(inv, "sldq", "3072,1536")
        print(f"run --detach --slurm, both holders pending, plan shipped: returned in {took:.2f} s")
        assert took < 30
        (row,) = json.loads(cli(inv, "status", "sldq", "--json")[1])
        assert len(row["targets"]) == 2 and {t["slurm"]["state"] for t in row["targets"]} == {"PENDING"}, row
    finally:
        c.cmd("scancel", *blockers, check=False)          # the queue moves: Slurm grants the holders
    state = json.loads((inv.parent / "ws" / "sldq" / "state.json").read_text())
    d = Path(state["request"]["campaign"]["slurm"]["dir"])
    assert (d / "drive.zip").is_file() and all((d / i / "drive" / "ready").is_file() for i in ("0", "1"))
    poll(lambda: all((d / i / "drive.rc").is_file() for i in ("0", "1")), timeout=240, interval=0.5,
         what="both node drivers done launching")
    assert [(d / i / "drive.rc").read_text().strip() for i in ("0", "1")] == ["0", "0"], \
        [(d / i / "drive.log").read_text()[-2000:] for i in ("0", "1")]
    for i in ("0", "1"):
        grant_to_launch = (d / i / "drive.rc").stat().st_mtime - (d / i / "node").stat().st_mtime
        print(f"shard {i}: grant (holder wrote node) to launched (drive.rc): {grant_to_launch:.2f} s")
    poll(lambda: all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes), timeout=180,
         interval=0.5, what="both shards tuning on their nodes")
    assert _laptop_processes("sldq") == []                  # nothing of tune-remote runs here meanwhile
    (row,) = json.loads(cli(inv, "status", "sldq", "--json")[1])
    assert sorted(t["node"] for t in row["targets"]) == ["a", "b"], row       # the nodes' launches adopted
    assert all(t.get("node_state") for t in row["targets"]), row                # as each node says now
    poll(lambda: all(not _tuners(c.container(n)) for n in c.computes), timeout=180, interval=0.5,
         what="the tuners done")
    t = time.monotonic()
    res = _resume(inv, "sldq")
    assert res.returncode == 0, res.stderr[-3000:]
    print(f"resume of the campaign its nodes launched: {time.monotonic() - t:.2f} s")
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "succeeded"
    state = json.loads((inv.parent / "ws" / "sldq" / "state.json").read_text())
    assert state["request"]["campaign"]["spread"]
    rts = sum(json.loads((sub / "state.json").read_text())["remote"]["stats"][-1]["round_trips"]
              for sub in (inv.parent / "ws" / "sldq" / "targets").iterdir())
    print(f"resume: {rts} round trips (targets)")
    comp = list(csv.DictReader((inv.parent / "ws" / "sldq" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a", "b"}, comp
    assert all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes)   # nothing tuned twice
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-sldq")], timeout=60, what="holders gone")


def _queued_detach(c, inv: Path, job_id: str, n_k: str, meanwhile=None) -> Path:
    """`run --detach` while other jobs hold both nodes (the plan is shipped to the pending holders), then
    ``meanwhile(dir)`` while they are still pending, then the queue is released. Returns the campaign's
    directory on the shared filesystem."""
    blockers = _hold_both_nodes(c)
    try:
        _detach(inv, job_id, n_k)
        state = json.loads((inv.parent / "ws" / job_id / "state.json").read_text())
        d = Path(state["request"]["campaign"]["slurm"]["dir"])
        if meanwhile is not None:
            meanwhile(d)
        return d
    finally:
        c.cmd("scancel", *blockers, check=False)


def test_a_queued_shard_its_node_could_not_launch_is_launched_by_resume(inv, slurm_cluster):
    """The node driver cannot run (here: a broken drive.zip, as an unusable python3 would): each holder says so
    in drive.rc/drive.log, and `resume` launches those shards itself through srun, once each."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    launches = {n: len(c.container(n).launches()) for n in c.computes}
    # spoiled while the holders are still queued behind the other jobs
    d = _queued_detach(c, inv, "sldf", "2560,1280", meanwhile=lambda d: (d / "drive.zip").write_bytes(b"not a zip"))
    poll(lambda: all((d / i / "drive.rc").is_file() for i in ("0", "1")), timeout=120, interval=0.5,
         what="both node drivers ended")
    assert {(d / i / "drive.rc").read_text().strip() for i in ("0", "1")} != {"0"}
    assert all(len(c.container(n).launches()) == launches[n] for n in c.computes)   # nothing launched there
    res = _resume(inv, "sldf")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "node driver on" in res.stderr and "this machine carries what it left" in res.stderr, res.stderr[-3000:]
    comp = list(csv.DictReader((inv.parent / "ws" / "sldf" / "comparison.csv").open()))
    assert len(comp) == 4 and {r["node"] for r in comp} == {"a", "b"}, comp
    assert all(len(c.container(n).launches()) == launches[n] + 1 for n in c.computes)
    poll(lambda: not [j for j in c.jobs() if j["name"].startswith("tr-sldf")], timeout=60, what="holders gone")


def test_cancel_of_a_queued_campaign_stops_what_its_nodes_launched(inv, slurm_cluster):
    """The node drivers' launches carry the job's marker: the holders' TERM trap stops them like the laptop's."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    for n in c.computes:
        c.container(n).slow(600)
    try:
        d = _queued_detach(c, inv, "sldc", "1536,768")
        poll(lambda: all(_tuning(c.container(n)) for n in c.computes), timeout=180, interval=0.5,
             what="both nodes' own launches tuning")
        assert [(d / i / "drive.rc").read_text().strip() for i in ("0", "1")] == ["0", "0"]
        assert _laptop_processes("sldc") == []
        rc, out = cli(inv, "cancel", "sldc", "--grace", "5")
        assert rc == 0, out
        assert not [j for j in c.jobs() if j["name"].startswith("tr-sldc")], c.jobs()
        for n in c.computes:
            assert _tuners(c.container(n)) == [], n
        (row,) = json.loads(cli(inv, "status", "sldc", "--json")[1])
        assert row["state"] == "cancelled", row
    finally:
        for n in c.computes:
            c.container(n).reset_control()


def test_a_queued_shard_killed_after_its_node_launched_it_is_resharded_by_resume(inv, slurm_cluster):
    """b's holder is killed by the scheduler while b tunes what its node driver launched (no laptop anywhere):
    `resume` adopts both launches, finds b lost and tunes b's shapes on a, the one kind of the partition."""
    from tests.fake_remote.provision import poll
    c = slurm_cluster
    b = c.container("b")
    b.slow(600)
    try:
        d = _queued_detach(c, inv, "sldk", "1280,640")
        poll(lambda: _tuning(b), timeout=180, interval=0.5, what="b's own launch tuning")
        (ib,) = [i for i in ("0", "1") if (d / i / "node").is_file() and (d / i / "node").read_text().strip() == "b"]
        poll(lambda: (d / ib / "drive.rc").is_file(), timeout=60, interval=0.2, what="b's node driver done")
        assert (d / ib / "drive.rc").read_text().strip() == "0", (d / ib / "drive.log").read_text()[-2000:]
        _kill_holder(c, "sldk", "b")
    finally:
        _stop(b)
    _resharded_onto_a(inv, c, "sldk")
