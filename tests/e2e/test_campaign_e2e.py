"""Campaigns end to end on the test bed: several nodes (a group, all) and several variants in one job.

Fleet: n1 and n2 alike (cu_num 256), n3 partitioned (cu_num 64: its own GPU kind). Every node has one
container, so --container may be left out.
"""

from __future__ import annotations

import csv
import io
import json
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from tests.fake_remote import ContainerSpec

pytestmark = pytest.mark.e2e

NK = ["--nk", "7168,2048", "--nk", "2048,7168", "--m-preset", "1,16,64,256"]   # 8 shapes per variant


@pytest.fixture(scope="module")
def fleet(testbed):
    nodes = [testbed.create_node(("current",), proxy=False),
             testbed.create_node(("current",), proxy=False),
             testbed.create_node((ContainerSpec(sim={"profile": "current", "cu_num": 64}),), proxy=False)]
    yield nodes
    for n in nodes:
        testbed.destroy_node(n)


@pytest.fixture
def inv(tmp_path, fleet, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    data = {"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                "containers": {c: {} for c in n.containers}} for n in fleet},
            "groups": {"pair": [fleet[0].alias, fleet[1].alias]}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli(inv: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(inv.parent / "ws"), *argv])
    return rc, out.getvalue()


def rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def key(r: dict) -> tuple:
    return (int(r["m"]), int(r["n"]), int(r["k"]))


def test_two_variants_over_a_group_shard_disjointly_and_merge(inv, fleet):
    rc, out = cli(inv, "run", "--node", "pair", "--variant", "a8w8_blockscale,a8w8_blockscale_bpreshuffle",
                  *NK, "--yes", "--job-id", "camp1")
    assert rc == 0, out
    job = inv.parent / "ws" / "camp1"
    status = json.loads(cli(inv, "status", "--json")[1])
    (row,) = [r for r in status if r["job_id"] == "camp1"]
    assert row["state"] == "succeeded"
    assert row["node"] == f"{fleet[0].alias},{fleet[1].alias}" and isinstance(row["container"], str)
    assert row["variant"] == "a8w8_blockscale,a8w8_blockscale_bpreshuffle"
    assert sorted((t["node"], t["variant"]) for t in row["targets"]) == sorted(
        (n.alias, v) for n in fleet[:2] for v in ("a8w8_blockscale", "a8w8_blockscale_bpreshuffle"))
    assert all(t["state"] == "succeeded" for t in row["targets"])
    for variant in ("a8w8_blockscale", "a8w8_blockscale_bpreshuffle"):
        comp = rows(job / variant / "comparison.csv")
        keys = [key(r) for r in comp]
        assert len(keys) == len(set(keys)) == 8                     # each shape tuned exactly once
        assert {r["node"] for r in comp} == {fleet[0].alias, fleet[1].alias}   # both targets did work
    assert not (job / "comparison.csv").exists()
    # proven rows of each target are promoted on every target of the kind (both nodes here)
    comp = rows(job / "a8w8_blockscale" / "comparison.csv")
    proven = {key(r) for r in comp if r["promoted"] == "true"}
    assert proven and {r["node"] for r in comp if r["promoted"] == "true"} == {fleet[0].alias, fleet[1].alias}
    for n in fleet[:2]:
        c = next(iter(n.containers.values()))
        live = list(csv.DictReader(c.host_path(f"{c.aiter_root}/aiter/configs/a8w8_blockscale_tuned_gemm.csv")
                                   .open()))
        assert proven <= {(int(r["M"]), int(r["N"]), int(r["K"])) for r in live}, n.alias
    assert "## Promotion across each GPU kind" in (job / "report.md").read_text()
    assert (job / "report.md").is_file() and (job / "report.html").is_file()
    report = (job / "report.md").read_text()
    assert fleet[0].alias in report and fleet[1].alias in report


def test_all_nodes_make_two_gpu_kinds_each_tuning_every_shape_once(inv, fleet):
    rc, out = cli(inv, "run", "--node", "all", "--variant", "a8w8_blockscale", *NK, "--yes", "--job-id", "camp2")
    assert rc == 0, out
    comp = rows(inv.parent / "ws" / "camp2" / "comparison.csv")
    alike = [key(r) for r in comp if r["node"] in (fleet[0].alias, fleet[1].alias)]
    parted = [key(r) for r in comp if r["node"] == fleet[2].alias]
    assert len(alike) == len(set(alike)) == 8        # the cu_num-256 group: every shape once
    assert len(parted) == len(set(parted)) == 8      # the cu_num-64 group: every shape once, on n3 alone


def test_dry_run_prints_the_plan_and_launches_nothing(inv, fleet, capsys):
    before = [len(n.containers[next(iter(n.containers))].launches()) for n in fleet]
    rc, _ = cli(inv, "run", "--node", "all", "--variant", "a8w8_blockscale", *NK, "--dry-run", "--job-id", "dry")
    assert rc == 0
    err = capsys.readouterr().err
    assert "plan:" in err and "8 shapes" in err and fleet[2].alias in err
    assert not (inv.parent / "ws" / "dry").exists()
    assert [len(n.containers[next(iter(n.containers))].launches()) for n in fleet] == before


def test_a_budget_cuts_each_gpu_kind_to_what_fits_and_the_plan_gives_times(inv, fleet, capsys):
    # 8 shapes; nothing measured in this workspace: 90 s per small shape and GPU; a budget of one shape's
    # time on a kind's GPUs together leaves each kind with the shapes that fit, and the plan says so
    rc, _ = cli(inv, "run", "--node", "all", "--variant", "a8w8_blockscale", *NK, "--dry-run", "--budget", "1s",
                "--job-id", "dryb")
    assert rc == 0
    err = capsys.readouterr().err
    assert err.count("--budget 1s: a8w8_blockscale on ") == 2 and "most-missed shape(s) fit, 7 left" in err
    assert "est. tuning time" in err and "assumed 90 s per shape-GPU" in err
    rc, _ = cli(inv, "run", "--node", "all", "--variant", "a8w8_blockscale", *NK, "--budget", "2 hours", "--yes")
    assert rc == 2 and "--budget '2 hours' is not a duration" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--node", "nosuch", "--variant", "a8w8_blockscale"], "unknown node 'nosuch'"),
    (["--node", "pair", "--variant", "auto"], "--variant auto finds the variants in server logs"),
    (["--node", "pair", "--variant", "a8w8_blockscale,nope"], "nope"),
    (["--node", "pair", "--variant", "a8w8_blockscale", "--detach", "--dry-run"], "--detach"),
])
def test_bad_campaign_input_is_one_line_exit_2_and_nothing_runs(inv, fleet, capsys, argv, needle):
    rc, _ = cli(inv, "run", *argv, *NK, "--yes")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and needle in err[0]
    assert not (inv.parent / "ws").exists() or not any((inv.parent / "ws").iterdir())


def test_a_target_lost_mid_run_has_its_untuned_shapes_moved_to_the_survivor(inv, fleet):
    import os
    import subprocess
    from tests.e2e.test_reliability_e2e import TR
    from tests.fake_remote.provision import poll
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    for c in (c1, c2):
        c.slow(0.4)
    before = {c.name: len(c.launches()) for c in (c1, c2)}
    proc = subprocess.Popen([*TR, "--inventory", str(inv), "--workspace", str(inv.parent / "ws"), "run", "--node",
                             "pair", "--variant", "a8w8_blockscale", *NK, "--yes", "--job-id", "lost1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))
    try:
        poll(lambda: len(c2.launches()) > before[c2.name] or proc.poll() is not None, timeout=60,
             what="n2's tuner started")
        assert proc.poll() is None, proc.communicate()
        c2.restart()                              # every process of n2's job dies: its sub-job is lost
    finally:
        c2.slow(0.0)
        c1.slow(0.0)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]      # carried to its end: the survivor tuned the rest
    assert f"{fleet[1].alias}/" in err.decode() and "lost" in err.decode()   # ... and the lost target is named
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "lost1"]
    assert row["state"] == "succeeded" and {t["node"]: t["state"] for t in row["targets"]}[fleet[1].alias] == "lost"
    assert f"{fleet[1].alias}/" in (inv.parent / "ws" / "lost1" / "report.md").read_text()
    comp = rows(inv.parent / "ws" / "lost1" / "comparison.csv")
    keys = [key(r) for r in comp]
    assert len(keys) == len(set(keys)) and {r["node"] for r in comp} == {fleet[0].alias}
    # every shape was tuned exactly once: by the survivor, or by n2 before it was lost (rows kept there)
    lost_sub = next(d for d in (inv.parent / "ws" / "lost1" / "targets").iterdir() if fleet[1].alias in d.name)
    staging = json.loads((lost_sub / "state.json").read_text())["remote"]["tuned_csv"]
    on_n2 = {(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(c2.host_path(staging).open())} \
        if c2.host_path(staging).exists() else set()
    wanted = {(m, n, k) for m in (1, 16, 64, 256) for n, k in ((7168, 2048), (2048, 7168))}
    assert wanted <= set(keys) | on_n2
    assert len(c1.launches()) == before[c1.name] + 2 and len(c2.launches()) == before[c2.name] + 1


def test_a_no_kernel_shape_served_by_a_row_of_the_other_node_has_that_after_in_the_merged_comparison(inv, fleet):
    """M=116 finds no kernel on its node (the simulated tuner fails it); M=128, its padded-M bucket, is tuned
    and proven on the other node. After the promotion across the kind, M=116 is served by that row: the merged
    `after` is measured again on its node and is that time, not the default kernel's (issue 28)."""
    from orchestrator.sim import perf_model as pm
    nk = (3584, 1792)
    assert pm.outcome("a8w8_blockscale", {"m": 116, "n": nk[0], "k": nk[1]}) == "failed"
    assert pm.outcome("a8w8_blockscale", {"m": 128, "n": nk[0], "k": nk[1]}) == "improved"
    rc, out = cli(inv, "run", "--node", "pair", "--variant", "a8w8_blockscale", "--nk", "3584,1792",
                  "--m-preset", "116,128", "--yes", "--job-id", "again1")
    assert rc == 0, out
    job = inv.parent / "ws" / "again1"
    comp = {key(r): r for r in rows(job / "comparison.csv")}
    nokernel, served = comp[(116, *nk)], comp[(128, *nk)]
    assert nokernel["node"] != served["node"] and served["promoted"] == "true"    # two nodes, as the shards fell
    own = next(r for d in (job / "targets").iterdir() if nokernel["node"] in d.name
               for r in rows(d / "comparison.csv") if key(r) == (116, *nk))
    assert abs(float(own["speedup_pct"])) < 2          # measured on its own node: the default kernel, as before
    want = pm.bench_value("a8w8_blockscale", {"m": 116, "n": nk[0], "k": nk[1]}, nokernel["metric"],
                          tuned_from={"m": 128, "n": nk[0], "k": nk[1]})
    assert abs(float(nokernel["after"]) - want) / want < 0.05, (nokernel, want)   # what the kind serves now
    assert float(nokernel["speedup_pct"]) > 10 and nokernel["verdict"] == "improved", nokernel
    assert nokernel["after_n"] == "1" and nokernel["p_value"] == ""     # one fresh-process sample, no test
    assert float(served["after"]) == float(next(r for d in (job / "targets").iterdir() if served["node"] in d.name
                                                for r in rows(d / "comparison.csv") if key(r) == (128, *nk))["after"])
    report = (job / "report.md").read_text()
    assert "## After the promotion across each GPU kind" in report and "padded-M row M=128" in report, report


# ------------------------------------------------------------------------------------------------
# --node: status, logs, fetch, cancel and resume of one target of a campaign (issue 10)
# ------------------------------------------------------------------------------------------------

NK_FILTER = ["--nk", "3072,1536", "--nk", "1536,3072", "--m-preset", "1,16,64,256"]   # shapes no other test tunes


def _tr(inv: Path, *argv: str, timeout: float = 300):
    import os
    import subprocess
    from tests.e2e.test_reliability_e2e import TR
    return subprocess.run([*TR, "--inventory", str(inv), "--workspace", str(inv.parent / "ws"), *argv],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))


def _start(inv: Path, job_id: str, *extra: str):
    import os
    import subprocess
    from tests.e2e.test_reliability_e2e import TR
    return subprocess.Popen([*TR, "--inventory", str(inv), "--workspace", str(inv.parent / "ws"), "run", "--node",
                             "pair", "--variant", "a8w8_blockscale", *NK_FILTER, "--yes", "--job-id", job_id, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))


def _tuning(c) -> list[dict]:
    """The tuner at work: not discover's capability probe, which runs the same script with --help."""
    return [p for p in c.processes() if "_tune.py" in p["args"] and "--help" not in p["args"].split()
            and p["state"] != "Z"]


def test_node_filter_on_status_logs_fetch_and_cancel_of_a_running_campaign(inv, fleet):
    from tests.fake_remote.provision import poll
    a, b = fleet[0].alias, fleet[1].alias
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    before = {c.name: len(c.launches()) for c in (c1, c2)}
    c1.slow(3.0)                                  # 4 shapes: ~12 s of tuning, time for the commands
    c2.slow(30.0)                                 # b is cancelled below: it must still be tuning then, however
    proc = _start(inv, "nodef1")                  # slowly the five commands before run on a loaded machine
    try:
        poll(lambda: (_tuning(c1) and _tuning(c2)) or proc.poll() is not None, timeout=120,
             what="both targets tuning")
        assert proc.poll() is None, proc.communicate()
        st = _tr(inv, "status", "nodef1", "--json", "--node", a)
        assert st.returncode == 0, st.stderr
        (row,) = json.loads(st.stdout)
        assert row["targets"] and {t["node"] for t in row["targets"]} == {a}
        lg = _tr(inv, "logs", "nodef1", "--node", a, "--step", "tune")
        assert lg.returncode == 0 and "module_gemm_a8w8_blockscale_tune" in lg.stdout and f"==> {a}/" not in lg.stdout, lg.stderr
        both = _tr(inv, "logs", "nodef1", "--step", "tune")
        assert both.returncode == 0, both.stderr
        assert f"==> {a}/" in both.stdout and f"==> {b}/" in both.stdout
        fe = _tr(inv, "fetch", "nodef1", "--node", b)
        assert fe.returncode == 0, fe.stderr
        (frow,) = json.loads(fe.stdout)["targets"]
        assert frow["node"] == b and frow["files"]
        bad = _tr(inv, "logs", "nodef1", "--node", "no-such-node")
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and a in bad.stderr
        ca = _tr(inv, "cancel", "nodef1", "--node", b)
        assert ca.returncode == 0 and f"on {b} cancelled" in ca.stdout, ca.stderr
        assert not _tuning(c2)                   # b's tuner is gone at once; a goes on (its end state below)
        c1.slow(0.0)
        (row,) = json.loads(_tr(inv, "status", "nodef1", "--json").stdout)
        assert {t["node"]: t["state"] for t in row["targets"]}[a] in ("running", "succeeded"), row
    finally:
        for c in (c1, c2):
            c.slow(0.0)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err.decode()[-2000:]        # one target cancelled by the user
    (row,) = json.loads(_tr(inv, "status", "nodef1", "--json").stdout)
    states = {t["node"]: t["state"] for t in row["targets"]}
    assert states == {a: "succeeded", b: "cancelled"} and row["state"] == "cancelled", row
    comp = rows(inv.parent / "ws" / "nodef1" / "comparison.csv")
    assert comp and {r["node"] for r in comp} == {a}
    assert len(c1.launches()) == before[c1.name] + 1 and len(c2.launches()) == before[c2.name] + 1


def test_resume_node_drives_one_target_then_the_whole_job_finishes_it(inv, fleet):
    import signal
    from tests.fake_remote.provision import poll
    a, b = fleet[0].alias, fleet[1].alias
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    before = {c.name: len(c.launches()) for c in (c1, c2)}
    for c in (c1, c2):
        c.slow(0.3)
    proc = _start(inv, "nodef2", "--m-preset", "2,32,128,512")
    try:
        poll(lambda: (_tuning(c1) and _tuning(c2)) or proc.poll() is not None, timeout=120,
             what="both targets tuning")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)          # the laptop process dies; both nodes go on
        proc.wait(timeout=30)
    finally:
        for c in (c1, c2):
            c.slow(0.0)
    assert _tr(inv, "resume", "nodef2", "--node", "no-such-node").returncode == 2
    one = _tr(inv, "resume", "nodef2", "--node", a, "--yes")
    assert one.returncode == 0, one.stderr[-2000:]
    (row,) = json.loads(_tr(inv, "status", "nodef2", "--json").stdout)
    states = {t["node"]: t["state"] for t in row["targets"]}
    assert states[a] == "succeeded" and states[b] == "running" and row["state"] == "running", row
    assert not (inv.parent / "ws" / "nodef2" / "comparison.csv").exists()   # the job is not over
    whole = _tr(inv, "resume", "nodef2", "--yes")
    assert whole.returncode == 0, whole.stderr[-2000:]
    (row,) = json.loads(_tr(inv, "status", "nodef2", "--json").stdout)
    assert row["state"] == "succeeded" and {t["state"] for t in row["targets"]} == {"succeeded"}, row
    comp = rows(inv.parent / "ws" / "nodef2" / "comparison.csv")
    assert {r["node"] for r in comp} == {a, b} and len(comp) == 8
    assert len(c1.launches()) == before[c1.name] + 1 and len(c2.launches()) == before[c2.name] + 1


def test_a_campaign_over_an_ansible_inventory(tmp_path, fleet, monkeypatch):
    """--inventory takes the Ansible YAML inventory a fleet already has: ansible_host/port/user/key per host,
    a group of them as --node, tune_remote_containers per host (issue 10)."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    a, b = fleet[:2]
    known = tmp_path / "known_hosts"
    known.write_text("".join(n.known_hosts_line + "\n" for n in (a, b)))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host *\n    UserKnownHostsFile {known}\n    StrictHostKeyChecking yes\n"
                   "    IdentitiesOnly yes\n    BatchMode yes\n")
    hosts = {n.alias: {"ansible_host": n.host, "ansible_port": n.port, "ansible_ssh_private_key_file":
                       str(n.identity_file), "tune_remote_containers": list(n.containers)} for n in (a, b)}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_user": a.user, "tune_remote_ssh_config": str(cfg)},
                                           "children": {"lab": {"hosts": hosts}}}}))
    rc, _ = cli(inv, "run", "--node", "lab", "--variant", "a8w8_blockscale", "--nk", "2560,1024",
                "--m-preset", "1,16,64,256", "--yes", "--job-id", "ansible1")
    assert rc == 0
    (row,) = [r for r in json.loads(cli(inv, "status", "--json")[1]) if r["job_id"] == "ansible1"]
    assert {t["node"] for t in row["targets"]} == {a.alias, b.alias}
    comp = rows(tmp_path / "ws" / "ansible1" / "comparison.csv")
    assert len(comp) == 4 and len({key(r) for r in comp}) == 4 and {r["node"] for r in comp} == {a.alias, b.alias}


def test_a_campaign_opens_one_ssh_connection_per_node(testbed, tmp_path, monkeypatch):
    """Plan (discover), mining, each variant's job and the promotion across the kind all borrow the node's one
    connection (remote/pool.py): one handshake and one authentication per node for the whole campaign, and
    one more for `status`/`logs` afterwards. Counted by the node's proxy, which sees every TCP connection."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = testbed.create_node(("current",), proxy=True)
    try:
        path = tmp_path / "inventory.yaml"
        path.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                                "containers": {c: {} for c in node.containers}}}}))
        ctr = next(iter(node.containers.values()))
        before = node.proxy.connections_total
        rc, out = cli(path, "run", "--node", node.alias, "--variant", "a8w8_blockscale,a8w8_blockscale_bpreshuffle",
                      "--log", "/opt/aiter-sim/logs/vllm_tp8_dsv3.log", "--m-preset", "1,64", "--yes",
                      "--job-id", "pooled")
        assert rc == 0, out
        subs = json.loads(cli(path, "status", "--json")[1])[0]["targets"]
        assert sorted(t["variant"] for t in subs) == ["a8w8_blockscale", "a8w8_blockscale_bpreshuffle"]
        assert all(t["state"] == "succeeded" for t in subs), subs
        assert node.proxy.connections_total - before == 1
        # one helper for the container, started by the plan's discover: each variant's job found its channel
        # open (the runner lends the container's target to one job after the other) and counts only its own
        # round trips and ops
        for sid in (tmp_path / "ws" / "pooled" / "targets").iterdir():
            stats = json.loads((sid / "state.json").read_text())["remote"]["stats"][-1]
            assert stats["helpers_started"] == 0 and stats["helper_ops"]["discover"] == 1, stats
            # the waits' long polls (status) follow how long the tuner runs (a loaded machine: more of them);
            # everything else is fixed
            polls = stats["helper_ops"].get("status", 0) - stats.get("helper_ops_batched", {}).get("status", 0)
            assert 3 <= stats["round_trips"] - polls <= 20, stats
        # and the helpers ended with their channels (EOF), although the connection outlived each target
        deadline = time.monotonic() + 10
        while ctr.exec("sh", "-c", "pgrep -f 'node_helper[.]py --serve' || true").stdout.strip():
            assert time.monotonic() < deadline, "a node helper outlived the campaign"
    finally:
        testbed.destroy_node(node)


# ------------------------------------------------------------------------------------------------
# --detach: a campaign the laptop walks away from (issue 28)
# ------------------------------------------------------------------------------------------------

NK_DETACH = ["--nk", "2560,1280", "--nk", "1280,2560", "--m-preset", "1,16,64,256"]   # shapes no other test tunes


def _detached(inv: Path, job_id: str, nk: list[str] = NK_DETACH) -> dict:
    cp = _tr(inv, "run", "--node", "pair", "--variant", "a8w8_blockscale", *nk, "--yes", "--job-id", job_id,
             "--detach")
    assert cp.returncode == 0, cp.stderr[-2000:]
    (line,) = cp.stdout.strip().splitlines()          # the same one JSON line as a detached single job
    out = json.loads(line)
    assert out["job_id"] == job_id and out["state"] == "running", out
    return out


def _start_resume(inv: Path, job_id: str):
    import os
    import subprocess
    from tests.e2e.test_reliability_e2e import TR
    return subprocess.Popen([*TR, "--inventory", str(inv), "--workspace", str(inv.parent / "ws"), "resume", job_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))


def test_a_detached_campaign_tunes_on_without_the_laptop_and_resume_finishes_it(inv, fleet):
    from tests.fake_remote.provision import poll
    a, b = fleet[0].alias, fleet[1].alias
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    before = {c.name: len(c.launches()) for c in (c1, c2)}
    for c in (c1, c2):
        c.slow(1.0)
    first = None
    try:
        _detached(inv, "det1")                            # run has exited: no laptop process drives it
        assert _tuning(c1) or _tuning(c2) or poll(lambda: _tuning(c1) and _tuning(c2), timeout=60,
                                                   what="both targets tuning after run returned")
        (row,) = json.loads(_tr(inv, "status", "det1", "--json").stdout)
        assert row["state"] == "running" and {t["node"] for t in row["targets"]} == {a, b}
        assert all(t.get("node_state") == "running" for t in row["targets"]), row   # asked on the node
        fe = _tr(inv, "fetch", "det1", "--node", a)
        assert fe.returncode == 0, fe.stderr
        lg = _tr(inv, "logs", "det1", "--step", "tune")
        assert lg.returncode == 0 and f"==> {a}/" in lg.stdout, lg.stderr
        first = _start_resume(inv, "det1")               # waits for the targets, then finishes the campaign
        lock = inv.parent / "ws" / "det1" / ".lock"       # the first resume owns the campaign before a second
        poll(lambda: first.poll() is not None or (lock.is_file() and lock.read_text().startswith("{")
                                                  and json.loads(lock.read_text()).get("pid") == first.pid),
             timeout=60, what="the first resume to own the campaign")
        poll(lambda: "is being driven" in _tr(inv, "resume", "det1").stderr or first.poll() is not None,
             timeout=60, what="a second resume refused while the first drives")
        assert first.poll() is None
        second = _tr(inv, "resume", "det1")
        assert second.returncode == 1 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert len(c1.launches()) == before[c1.name] + 1 and len(c2.launches()) == before[c2.name] + 1
    finally:
        for c in (c1, c2):
            c.slow(0.0)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().strip().splitlines()[-1])["state"] == "succeeded"
    assert len(c1.launches()) == before[c1.name] + 1 and len(c2.launches()) == before[c2.name] + 1
    state = json.loads((inv.parent / "ws" / "det1" / "state.json").read_text())
    assert state["request"]["campaign"]["spread"]             # the promotion across the kind ran
    comp = rows(inv.parent / "ws" / "det1" / "comparison.csv")
    keys = [key(r) for r in comp]
    assert len(keys) == len(set(keys)) == 8 and {r["node"] for r in comp} == {a, b}
    assert (inv.parent / "ws" / "det1" / "report.md").exists()


def test_a_target_killed_while_detached_is_resharded_by_resume(inv, fleet):
    from tests.fake_remote.provision import poll
    a, b = fleet[0].alias, fleet[1].alias
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    before = {c.name: len(c.launches()) for c in (c1, c2)}
    for c in (c1, c2):
        c.slow(1.0)
    try:
        _detached(inv, "det2", ["--nk", "2304,1152", "--nk", "1152,2304", "--m-preset", "1,16,64,256"])
        poll(lambda: _tuning(c2), timeout=60, what="n2 tuning")
        c2.restart()                                      # every process of n2's job dies while nobody watches
        (row,) = json.loads(_tr(inv, "status", "det2", "--json").stdout)
        assert {t["node"]: t["state"] for t in row["targets"]}[b] == "lost", row   # not the cached 'running'
    finally:
        for c in (c1, c2):
            c.slow(0.0)
    res = _tr(inv, "resume", "det2")
    assert res.returncode == 0 and b in res.stderr and "lost" in res.stderr, res.stderr[-2000:]   # carried to its end
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "succeeded"
    assert f"{b}/" in (inv.parent / "ws" / "det2" / "report.md").read_text() and "was lost" in (
        inv.parent / "ws" / "det2" / "report.md").read_text()
    comp = rows(inv.parent / "ws" / "det2" / "comparison.csv")
    keys = [key(r) for r in comp]
    assert len(keys) == len(set(keys)) and {r["node"] for r in comp} == {a}
    assert len(c1.launches()) == before[c1.name] + 2       # the survivor tuned the lost target's shapes too


def test_cancel_of_a_detached_campaign_leaves_no_tuner_and_a_second_driver_is_refused(inv, fleet):
    from tests.fake_remote.provision import poll
    c1, c2 = (next(iter(n.containers.values())) for n in fleet[:2])
    for c in (c1, c2):
        c.slow(3.0)
    try:
        _detached(inv, "det3", ["--nk", "2816,1408", "--nk", "1408,2816", "--m-preset", "1,16,64,256"])
        poll(lambda: _tuning(c1) and _tuning(c2), timeout=60, what="both targets tuning")
        ca = _tr(inv, "cancel", "det3")
        assert ca.returncode == 0, ca.stderr
        assert not _tuning(c1) and not _tuning(c2)
    finally:
        for c in (c1, c2):
            c.slow(0.0)
    (row,) = json.loads(_tr(inv, "status", "det3", "--json").stdout)
    assert row["state"] == "cancelled" and {t["state"] for t in row["targets"]} == {"cancelled"}, row


NK_CHAIN = ["--nk", "3328,1664", "--nk", "1664,3328", "--m-preset", "1,16,64,256"]   # shapes no other test tunes
TWO = "a8w8_blockscale,a8w8_blockscale_bpreshuffle"


def _node_side(c) -> list[dict]:
    """tune-remote's processes on the node: a pipeline's supervising wrapper (waiting or running) and its steps."""
    return [p for p in c.processes() if p["state"] != "Z" and ("_supervise" in p["args"] or "pipeline.sh" in p["args"])]


def test_a_detached_two_variant_campaign_tunes_both_variants_on_the_node_alone(inv, fleet):
    from tests.fake_remote.provision import poll
    n3 = fleet[2].alias
    c = next(iter(fleet[2].containers.values()))
    before = len(c.launches())
    c.slow(1.0)
    try:
        cp = _tr(inv, "run", "--node", n3, "--variant", TWO, *NK_CHAIN, "--yes", "--job-id", "chain1", "--detach")
        assert cp.returncode == 0, cp.stderr[-2000:]     # run has exited: nothing on the laptop drives it
        assert json.loads(cp.stdout.strip().splitlines()[-1])["state"] == "running"
        (row,) = json.loads(_tr(inv, "status", "chain1", "--json").stdout)
        states = {t["variant"]: t.get("node_state") for t in row["targets"]}
        assert states == {"a8w8_blockscale": "running", "a8w8_blockscale_bpreshuffle": "waiting"}, row
        assert "running (node: waiting)" in _tr(inv, "status", "chain1").stdout   # the words say it too
    finally:
        c.slow(0.0)
    poll(lambda: len(c.launches()) == before + 2 and not _node_side(c), timeout=300,
         what="both variants tuned on the node, no tune-remote process left")
    res = _tr(inv, "resume", "chain1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "succeeded"
    assert len(c.launches()) == before + 2                 # resume found both runs done: nothing launched again
    for variant in TWO.split(","):                          # each variant's shapes tuned once, on n3
        keys = [key(r) for r in rows(inv.parent / "ws" / "chain1" / variant / "comparison.csv")]
        assert len(keys) == len(set(keys)) == 8, variant


def test_cancel_of_a_detached_chain_leaves_no_tuner_and_no_waiting_pipeline(inv, fleet):
    from tests.fake_remote.provision import poll
    n3 = fleet[2].alias
    c = next(iter(fleet[2].containers.values()))
    before = len(c.launches())
    c.slow(3.0)
    try:
        cp = _tr(inv, "run", "--node", n3, "--variant", TWO, *NK_CHAIN[:2], "--m-preset", "2,32,128,512", "--yes",
                 "--job-id", "chain2", "--detach")
        assert cp.returncode == 0, cp.stderr[-2000:]
        poll(lambda: _tuning(c), timeout=120, what="the first variant tuning")
        ca = _tr(inv, "cancel", "chain2")
        assert ca.returncode == 0, ca.stderr
        assert not _tuning(c) and not _node_side(c), _node_side(c)   # the waiting variant is gone too
    finally:
        c.slow(0.0)
    assert len(c.launches()) == before + 1                 # the chained variant never started
    (row,) = json.loads(_tr(inv, "status", "chain2", "--json").stdout)
    assert row["state"] == "cancelled" and {t["state"] for t in row["targets"]} == {"cancelled"}, row


def _sub_state(inv: Path, job_id: str, variant: str) -> dict:
    (path,) = [p for p in (inv.parent / "ws" / job_id / "targets").glob(f"*.{variant}/state.json")]
    return json.loads(path.read_text())


def test_a_chained_variant_waits_on_the_node_for_gpus_another_job_reserved_then_runs(inv, fleet):
    """When the first variant ends, another job (another laptop's) holds its GPUs: the chained run waits on the
    node (status shows it waiting, its log says for whom); then a server takes one of them: it waits on (the
    GPUs were chosen free); it takes them once both are gone, and resume finishes the campaign."""
    from tests.fake_remote.provision import poll
    n3 = fleet[2].alias
    c = next(iter(fleet[2].containers.values()))
    before = len(c.launches())
    node_json = c.host_dir / "sim" / "node.json"
    sim_node = node_json.read_text()
    c.slow(3.0)                                  # the first variant is still tuning when run returns
    paths: list[str] = []
    try:
        cp = _tr(inv, "run", "--node", n3, "--variant", TWO, "--nk", "3840,1920", "--nk", "1920,3840",
                 "--m-preset", "1,16,64,256", "--yes", "--job-id", "chain3", "--detach")
        assert cp.returncode == 0, cp.stderr[-2000:]
        first = _sub_state(inv, "chain3", "a8w8_blockscale")
        poll(lambda: _tuning(c), timeout=120, what="the first variant tuning")
        lockdir = f"{first['remote']['logs_dir']}/.tune-remote/locks"
        record = json.dumps({"job_id": "other-laptop-job", "run_dir": f"{lockdir}/../other-laptop-job/pipeline",
                             "owner": {"who": "someone@laptop2"}, "created": time.time(), "variant": "a8w8"})
        for g in first["facts"]["tune_gpus"]:    # reserved by a job not started yet ('preparing': held)
            paths.append(f"{lockdir}/gpu-{g}.lock")
            c.exec("sh", "-c", 'cat > "$1.tmp" && mv "$1.tmp" "$1"', "sh", paths[-1], input=record)
        c.slow(0.0)                              # the rest of the first variant's shapes go fast

        def ended_first() -> dict | None:
            (row,) = json.loads(_tr(inv, "status", "chain3", "--json").stdout)
            states = {t["variant"]: t.get("node_state") for t in row["targets"]}
            return row if states["a8w8_blockscale"] == "succeeded" else None

        row = poll(ended_first, timeout=300, what="the first variant to end on the node")
        states = {t["variant"]: (t["state"], t.get("node_state")) for t in row["targets"]}
        assert states["a8w8_blockscale_bpreshuffle"] == ("running", "waiting"), row
        assert "running (node: waiting)" in _tr(inv, "status", "chain3").stdout
        log = _sub_state(inv, "chain3", "a8w8_blockscale_bpreshuffle")["remote"]["pipeline_log"]

        def waits() -> list[str]:
            return [ln for ln in c.exec("cat", log).stdout.splitlines() if "waiting for GPU(s)" in ln]

        (said,) = waits()                        # what it waits for: the job holding the GPUs, by whom
        assert "reserved by job other-laptop-job" in said and "someone@laptop2" in said, said
        assert len(c.launches()) == before + 1 and _node_side(c)   # not started, not ended: still waiting
        served = first["facts"]["tune_gpus"][0]  # a server starts on one of them as the reservation ends
        node_json.write_text(json.dumps(dict(json.loads(sim_node), busy_gpus=[served])))
        c.exec("rm", "-f", *paths)
        poll(lambda: len(waits()) == 2, timeout=120, what="the chained run to say it waits for the busy GPU")
        assert f"GPU {served} is in use (use 98%" in waits()[1], waits()
        assert len(c.launches()) == before + 1 and _node_side(c)
        (row,) = json.loads(_tr(inv, "status", "chain3", "--json").stdout)
        assert {t["variant"]: t.get("node_state") for t in row["targets"]}["a8w8_blockscale_bpreshuffle"] == "waiting"
    finally:
        c.slow(0.0)
        node_json.write_text(sim_node)           # the server stops
        if paths:                                 # the other job's reservation is released
            c.exec("rm", "-f", *paths)
    poll(lambda: len(c.launches()) == before + 2 and not _node_side(c), timeout=300,
         what="the chained variant to run once the GPUs are free")
    assert len(waits()) == 2
    res = _tr(inv, "resume", "chain3")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "succeeded"
    for variant in TWO.split(","):
        keys = [key(r) for r in rows(inv.parent / "ws" / "chain3" / variant / "comparison.csv")]
        assert len(keys) == len(set(keys)) == 8, variant
