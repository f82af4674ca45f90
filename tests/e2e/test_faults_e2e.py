"""The fault matrix (issue 8), end to end on the test bed: node-side ownership of a (container, variant),
work on a running job from a second process, and faults of the container itself."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.e2e.test_reliability_e2e import Bed, _start_hung_detached, desc, err_lines
from tests.fake_remote.provision import poll

pytestmark = pytest.mark.e2e


def laptop(node, path, job_id):
    """Another laptop: its own directory, inventory and workspace."""
    path.mkdir(parents=True, exist_ok=True)
    return Bed(node, path, job_id=job_id)


def test_second_run_for_a_running_variant_exits_1_naming_it_and_launches_nothing(node, tmp_path):
    first = laptop(node, tmp_path / "laptop1", "job1")
    _start_hung_detached(first)
    assert len(first.c.launches()) == 1
    # another laptop (its own workspace), same container and variant: the lock lives on the node
    second = laptop(node, tmp_path / "laptop2", "job2")
    cp = second.cli(*second.run_args())
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert "job job1 is already running for a8w8_blockscale" in line and "cancel job1" in line
    assert len(first.c.launches()) == 1 and not second.c.host_path(
        f"{first.c.aiter_root}/tune_logs/.tune-remote/job2").exists()
    # once the first job is over, the variant is free again (a stale lock is taken over)
    assert first.cli("cancel", "job1", "--grace", "2").returncode == 0
    first.c.reset_control()
    third = laptop(node, tmp_path / "laptop2b", "job3")
    cp = third.cli(*third.run_args())
    assert cp.returncode == 0, desc(cp)
    assert len(first.c.launches()) == 2
    lock = json.loads(first.c.host_path(
        f"{first.c.aiter_root}/tune_logs/.tune-remote/locks/a8w8_blockscale.lock").read_text())
    assert lock["job_id"] == "job3" and "@" in lock["owner"]["who"]


def test_fetch_and_logs_work_while_the_job_runs(node, tmp_path):
    bed = Bed(node, tmp_path)
    _start_hung_detached(bed)
    cp = bed.cli("fetch", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    files = json.loads(cp.stdout)["files"]
    assert any(p.endswith(".log") for p in files), files
    tune_local = bed.job_dir / "logs" / bed.state()["remote"]["logs"]["tune"].rsplit("/", 1)[-1]
    assert tune_local.is_file() and tune_local.read_bytes() == bed.node_bytes(bed.state()["remote"]["logs"]["tune"])
    cp = bed.cli("logs", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    assert b"Distributing" in cp.stdout              # what the tuner wrote so far
    assert bed.state()["state"] == "running"
    assert bed.cli("cancel", bed.job_id, "--grace", "2").returncode == 0
    poll(lambda: not bed.tuner_pids(), timeout=30, what="tuner gone")


def _tuned_keys(bed: Bed) -> list[tuple]:
    import csv
    path = bed.c.host_path(bed.state()["remote"]["tuned_csv"])
    rows = list(csv.DictReader(path.open())) if path.exists() else []
    return [(r["M"], r["N"], r["K"]) for r in rows]


def test_container_restart_is_lost_then_relaunch_tunes_only_the_rest(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(1.0)                                   # the restart lands long before the tuning ends
    proc = bed.popen(*bed.run_args())
    bed.wait_tuning()
    tune_log = bed.state()["remote"]["logs"]["tune"]
    poll(lambda: len(_tuned_keys(bed)) >= 2, timeout=60, what="a first batch of rows written")
    bed.c.restart()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err.decode()[-2000:]
    st = bed.state()
    assert st["state"] == "lost" and "container restarted" in st["error"], st["error"]
    kept = _tuned_keys(bed)
    assert kept, "rows tuned before the restart must stay in the table"
    # resume alone does not relaunch: exit 1, one line, a hint
    launches = len(bed.c.launches())
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 1 and "--relaunch" in err_lines(cp)[0] and len(bed.c.launches()) == launches
    assert "container restarted" in err.decode()
    # resume --relaunch: tunes the shapes not tuned yet, keeps the first baseline, completes
    bed.c.slow(0.0)
    baseline_log = st["remote"]["logs"]["baseline"]
    baseline_before = bed.node_bytes(baseline_log)
    cp = bed.cli("resume", bed.job_id, "--relaunch")
    assert cp.returncode == 0, desc(cp)
    assert len(bed.c.launches()) == launches + 1
    final = _tuned_keys(bed)
    assert len(final) == len(set(final)) and set(kept) <= set(final)
    shapes = {(str(s["m"]), str(s["n"]), str(s["k"])) for s in bed.state()["shapes"]}
    # the relaunched tuner's own summary: it tuned only the shapes without a row yet
    import re
    tuned_now = re.findall(rb"Tuning \w+\. tune (\d+) shapes", bed.node_bytes(tune_log))
    assert [int(x) for x in tuned_now] == [len(shapes - set(kept))]
    # the first baseline is kept, not run again: the log starts with it and holds one first sample
    # (with interleaved repeats the after step appends the later "before" samples to it)
    baseline_after = bed.node_bytes(baseline_log)
    assert baseline_after.startswith(baseline_before)
    assert baseline_after.count(b"== tune-remote sample before 1") == 1
    assert bed.state()["state"] == "succeeded"


def test_container_paused_20s_during_tuning_completes_with_one_launch(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(0.2)
    proc = bed.popen(*bed.run_args())
    bed.wait_tuning()
    bed.c.pause()
    try:
        # the laptop keeps polling into a paused container for 20 s: refused execs, never a verdict
        deadline = time.monotonic() + 20
        poll(lambda: time.monotonic() >= deadline or proc.poll() is not None, timeout=30,
             interval=0.5, what="20 s of pause")
        assert proc.poll() is None, "the run ended while the container was paused"
    finally:
        bed.c.unpause()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert len(bed.c.launches()) == 1
    assert bed.state()["state"] == "succeeded"


def test_stalled_tuner_is_killed_and_relaunched_and_the_job_completes(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.hang_after(2, once=True)              # silent livelock after 2 shapes, the first time only
    cp = bed.cli(*bed.run_args("--stall-timeout", "3"), timeout=240)
    assert cp.returncode == 0, desc(cp)
    assert len(bed.c.launches()) == 2            # the first (stalled) tuner and one relaunch
    assert bed.tuner_pids() == []                # the stalled tuner's group is gone, not orphaned
    st = bed.state()
    assert st["steps"]["remote"]["info"]["stalls"] == 1
    report = (bed.job_dir / "report.md").read_text()
    assert "stalled 1 time(s)" in report and "relaunched" in report


def test_a_tuner_that_keeps_stalling_is_given_up_after_two_relaunches(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.hang_after(1)                          # stalls every time
    cp = bed.cli(*bed.run_args("--stall-timeout", "2"), timeout=240)
    assert cp.returncode == 1, desc(cp)
    assert len(bed.c.launches()) == 3            # first launch + at most two relaunches
    assert bed.tuner_pids() == []
    assert "step tune failed on the node (exit 124)" in err_lines(cp)[0]


def _stderr_lines(proc) -> list[str]:
    """Collect a running process's stderr lines in a thread (readable while it runs)."""
    import threading
    lines: list[str] = []

    def read():
        for raw in proc.stderr:
            lines.append(raw.decode("utf-8", "replace"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_crashing_helper_while_watching_is_retried_never_a_verdict_on_the_job(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(0.3)
    proc = bed.popen(*bed.run_args())
    err = _stderr_lines(proc)
    bed.wait_tuning()
    # a module the helper imports crashes (its own files are checked before it runs: a changed procs.py
    # would just be pushed again, S-01), so a stdlib module it imports at start (csv, through files.py) is
    # shadowed in its dir
    hdir = bed.c.sh("ls -d /tmp/tune-remote/helper-*/").stdout.split()[0].rstrip("/")
    bed.c.sh(f"echo 'raise SystemExit(\"boom\")' > {hdir}/csv.py")
    # the persistent helper imported procs.py already: kill it, so the next helper (and each exec) crashes
    bed.c.sh("pkill -KILL -f '[n]ode_helper.py --serve' || true")
    try:   # every status poll now crashes in the container (exit 1, no JSON answer)
        poll(lambda: sum("retrying" in line for line in err) >= 3 or proc.poll() is not None, timeout=60,
             what="the laptop to retry three crashed polls")
        assert proc.poll() is None, "".join(err)[-2000:]
        assert bed.state()["state"] == "running"
    finally:
        bed.c.sh(f"rm -f {hdir}/csv.py")
    proc.wait(timeout=180)
    assert proc.returncode == 0, "".join(err)[-3000:]
    assert any("could not read the job's state" in line and "crashed" in line for line in err)
    assert len(bed.c.launches()) == 1 and bed.state()["state"] == "succeeded"


def test_cancel_of_a_job_that_already_succeeded_keeps_its_state_and_resume_collects_it(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    rc_file = bed.c.host_path(f"{bed.state()['remote']['run_dir']}/rc")
    poll(rc_file.exists, timeout=120, what="the node pipeline to finish")
    cp = bed.cli("cancel", bed.job_id, "--grace", "1")
    assert cp.returncode == 0, desc(cp)
    assert b"had already succeeded" in cp.stdout and b"resume" in cp.stdout
    assert bed.state()["state"] == "running"          # not "cancelled": its results are still to collect
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    assert bed.state()["state"] == "succeeded" and (bed.job_dir / "report.md").is_file()


def _table(bed: Bed, path: str) -> tuple[list[str], list[dict]]:
    """Header and rows of a node CSV, asserting it is sound: a complete last line, every row full width."""
    import csv
    import io
    data = bed.node_bytes(path).decode()
    assert data.endswith("\n"), f"{path} ends with a torn line: {data[-80:]!r}"
    recs = list(csv.reader(io.StringIO(data)))
    assert all(len(r) == len(recs[0]) for r in recs), f"{path} has rows of the wrong width"
    return recs[0], [dict(zip(recs[0], r)) for r in recs[1:]]


def _mnk_keys(rows: list[dict]) -> set:
    return {(r["gfx"], r["cu_num"], r["M"], r["N"], r["K"]) for r in rows}


def test_a_kill_in_the_middle_of_the_tables_rewrite_is_repaired_before_the_relaunch(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.torn_write_after(2, once=True)    # the rewrite after 2 shapes stops half way; the tuner hangs there
    cp = bed.cli(*bed.run_args("--stall-timeout", "3"), timeout=240)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    backup_rows = _table(bed, st["remote"]["tuned_backup"])[1]
    _, final = _table(bed, st["remote"]["tuned_csv"])
    assert backup_rows and _mnk_keys(backup_rows) <= _mnk_keys(final)      # no row of before lost
    assert len(final) == len(_mnk_keys(final))                             # no duplicated key
    tuned = {(str(s["m"]), str(s["n"]), str(s["k"])) for s in st["shapes"]}
    assert len(tuned & {(r["M"], r["N"], r["K"]) for r in final}) > 2     # the relaunch tuned the rest
    assert len(bed.c.launches()) == 2
    notes = " ".join(st["notes"])
    assert "was damaged" in notes and "repaired from the backup" in notes, notes
    assert "repaired from the backup" in (bed.job_dir / "report.md").read_text()
    damaged = bed.c.sh(f"ls {st['remote']['job_dir']}/damaged").stdout.split()
    assert len(damaged) == 1, damaged                                      # the torn bytes are kept


def test_a_cancel_in_the_middle_of_the_tables_rewrite_leaves_a_sound_table(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.torn_write_after(2)
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    table = st["remote"]["tuned_csv"]
    poll(lambda: bed.tuner_pids() and not bed.node_bytes(table).endswith(b"\n"), timeout=60,
         what="the tuner to stop half way through its table rewrite")
    cp = bed.cli("cancel", bed.job_id, "--grace", "2")
    assert cp.returncode == 0, desc(cp)
    # the watchdog repairs it when the cancel's TERM reaches it; the laptop checks again after the cancel
    said = cp.stderr + bed.node_bytes(st["remote"]["logs"]["tune"])
    assert b"repaired from the backup" in said, desc(cp)
    backup_rows = _table(bed, st["remote"]["tuned_backup"])[1]
    _, final = _table(bed, table)
    assert _mnk_keys(backup_rows) <= _mnk_keys(final)
    assert not bed.tuner_pids() and bed.state()["state"] == "cancelled"


def test_the_same_job_id_from_another_laptop_is_refused_and_the_running_jobs_files_are_untouched(node, tmp_path):
    first = laptop(node, tmp_path / "laptop1", "samejob")
    _start_hung_detached(first)
    untuned = first.state()["remote"]["untuned_csv"]
    before = first.node_bytes(untuned)
    second = laptop(node, tmp_path / "laptop2", "samejob")      # another workspace, the same --job-id
    cp = second.cli(*second.run_args("--m-preset", "1,8"))
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert "job samejob is already running for a8w8_blockscale" in line, line
    assert len(first.c.launches()) == 1 and first.node_bytes(untuned) == before
    assert first.cli("cancel", "samejob", "--grace", "2").returncode == 0


def test_fetch_and_logs_of_a_log_that_grows_all_the_time_exit_0_with_an_exact_prefix(node, tmp_path):
    bed = Bed(node, tmp_path)
    _start_hung_detached(bed)
    tune_log = bed.state()["remote"]["logs"]["tune"]
    # a log written without pause (a chatty tuner): every copy differs from the manifest taken before it
    bed.c.sh(f"nohup sh -c 'echo $$ > /tmp/grow.pid; i=0; while :; do i=$((i+1)); echo line $i >> {tune_log}; "
             f"done' >/dev/null 2>&1 &")
    try:
        poll(lambda: bed.c.sh("cat /tmp/grow.pid 2>/dev/null").stdout.strip(), timeout=10, what="the writer")
        size0 = len(bed.node_bytes(tune_log))
        poll(lambda: len(bed.node_bytes(tune_log)) > size0 + 10000, timeout=10, what="the log to grow")
        cp = bed.cli("fetch", bed.job_id)
        assert cp.returncode == 0, desc(cp)
        local = (bed.job_dir / "logs" / tune_log.rsplit("/", 1)[-1]).read_bytes()
        assert len(local) > size0 and bed.node_bytes(tune_log).startswith(local)
        cp = bed.cli("logs", bed.job_id)
        assert cp.returncode == 0 and b"warning" not in cp.stderr, desc(cp)
        assert bed.node_bytes(tune_log).startswith(cp.stdout) and len(cp.stdout) >= len(local)
    finally:
        bed.c.sh("kill $(cat /tmp/grow.pid)")
    assert bed.cli("cancel", bed.job_id, "--grace", "2").returncode == 0


def _fetch_of(node, tmp_path):
    """A finished job whose tune log lives in a host dir bind-mounted into the container: (that host file,
    fetch_of(data) -> (bytes on the wire, files read on the host)), which writes ``data`` there, runs `fetch`
    and checks the local copy."""
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    tune_log = bed.state()["remote"]["logs"]["tune"]
    host_file = bed.c.host_path(tune_log)
    local = bed.job_dir / "logs" / tune_log.rsplit("/", 1)[-1]

    def fetch_of(data: bytes) -> tuple[int, int]:
        host_file.write_bytes(data)
        wire = node.proxy.bytes_down
        cp = bed.cli("fetch", bed.job_id)
        assert cp.returncode == 0, desc(cp)
        assert local.read_bytes() == data
        return node.proxy.bytes_down - wire, bed.state()["steps"]["fetch"]["info"]["host_reads_last_pull"]

    return host_file, fetch_of


def test_fetch_reads_a_big_file_of_a_mounted_dir_on_the_host_and_one_the_host_user_cannot_read_in_the_container(
        node, tmp_path):
    host_file, fetch_of = _fetch_of(node, tmp_path)
    assert fetch_of(os.urandom(9 << 20))[1] == 1              # bigger than what a manifest carries inline
    os.chmod(host_file, 0o600)                                # root's; the node's SSH user is not root
    assert fetch_of(os.urandom(9 << 20))[1] == 0              # so it comes through docker exec (root there)
    assert fetch_of(b"small\n")[1] == 0                       # and a small one inside the manifest answer


def test_fetch_sends_a_big_text_log_gzipped_on_both_routes_and_random_bytes_plain(node, tmp_path):
    """Logs shrink ~10x: a big one is read through `gzip -1` (on the host, or in the container), inflated and
    sha256-verified here; counted on the wire by the node's proxy. Random bytes go plain (zlib rates them 1.0)."""
    host_file, fetch_of = _fetch_of(node, tmp_path)
    text = b"".join(b"[aiter] tuning M:%d N:7168 K:2048 kernelId %d us %.3f tflops %.1f\n"
                    % (i % 4096, i % 731, i / 7.0, i / 3.0) for i in range(300000))
    wire, on_host = fetch_of(text)
    assert on_host == 1 and wire < len(text) / 4, (wire, len(text))
    os.chmod(host_file, 0o600)                                # root's: through docker exec
    wire, on_host = fetch_of(text + b"one more line\n")
    assert on_host == 0 and wire < len(text) / 4, (wire, len(text))
    noise = os.urandom(9 << 20)
    wire, _ = fetch_of(noise)
    assert wire > len(noise)


def test_status_without_an_id_shows_the_nodes_state_of_running_jobs(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    rc_file = bed.c.host_path(f"{bed.state()['remote']['run_dir']}/rc")
    poll(rc_file.exists, timeout=120, what="the node pipeline to finish")
    saved = (bed.job_dir / "state.json").read_bytes()
    cp = bed.cli("status")
    assert cp.returncode == 0, desc(cp)
    assert b"node: succeeded" in cp.stdout and f"resume {bed.job_id}".encode() in cp.stdout, cp.stdout
    (row,) = json.loads(bed.cli("status", "--json").stdout)
    assert row["state"] == "running" and row["node_state"] == "succeeded"
    assert json.loads((bed.job_dir / "state.json").read_bytes())["state"] == json.loads(saved)["state"]
    assert bed.cli("resume", bed.job_id).returncode == 0 and bed.state()["state"] == "succeeded"


def test_without_rocm_smi_unknown_gpus_are_not_called_busy_and_problems_reach_the_report(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.sh("mv /opt/aiter-sim/bin/rocm-smi /opt/aiter-sim/bin/rocm-smi.gone")   # deprecated, removed
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert "cannot tell which GPUs are free" in line and "rocm-smi not found" in line and "--gpus" in line
    assert "busy" not in line and bed.c.launches() == []
    bed.job_id = "job2"
    cp = bed.cli(*bed.run_args("--gpus", "0"))
    assert cp.returncode == 0, desc(cp)
    assert "rocm-smi not found" in (bed.job_dir / "report.md").read_text()


# ------------------------------------------------------------------------------------------------
# GPUs are the ones the container sees (C-02, R-09; issue 12: amd-smi, partition mode)
# ------------------------------------------------------------------------------------------------

def test_gpus_are_mapped_to_the_containers_hip_devices_and_busy_means_use_vram_or_processes(make_node, tmp_path):
    from tests.fake_remote import ContainerSpec
    # the host has 8 GPUs (rocm-smi lists them all); the container has the device nodes of 2..7 and
    # ROCR_VISIBLE_DEVICES=0,1,2,3,4,5 over them; 6 and 7 serve (use, VRAM, a KFD process), 4 holds VRAM
    # while idle, 5 has an idle KFD process: only physical 2 and 3 are free, HIP devices 0 and 1 here
    node = make_node(ContainerSpec(sim={"dri_gpus": (2, 3, 4, 5, 6, 7), "vram_gpus": (4,), "kfd_gpus": (5,)},
                                   env={"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5"}))
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    facts = bed.state()["facts"]
    assert facts["free_gpus"] == [2, 3] and facts["tune_gpus"] == [2, 3] and facts["tune_hip"] == [0, 1]
    assert facts["gpu_map"] == {"2": 0, "3": 1, "4": 2, "5": 3, "6": 4, "7": 5}
    assert "VRAM 60% used" in facts["gpus"]["4"]["busy"] and "KFD process(es) 40005" in facts["gpus"]["5"]["busy"]
    assert facts["gpus"]["0"]["busy"] == ["not visible in this container"]
    (launch,) = bed.c.launches()
    assert launch["hip_visible_devices"] == "0,1" and launch["physical_gpus"] == [2, 3]
    assert bed.state()["remote"]["bench_env"]["before"]["HIP_VISIBLE_DEVICES"] == "0"   # physical 2
    # --gpus names physical GPUs; one the container cannot see is refused before anything runs
    bed.job_id = "job2"
    cp = bed.cli(*bed.run_args("--gpus", "0,3"))
    assert cp.returncode == 2, desc(cp)
    (line,) = err_lines(cp)
    assert "GPU 0: not visible in this container" in line and "2,3,4,5,6,7" in line
    assert len(bed.c.launches()) == 1


def test_amd_smi_where_rocm_smi_is_gone_gives_use_memory_partition_and_cu_num(make_node, tmp_path):
    node = make_node({"amd_smi": True, "rocm_smi": False, "partition": "CPX", "cu_num": 32, "vram_gpus": (2,)})
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    facts = bed.state()["facts"]
    assert not any("rocm-smi" in p for p in facts["problems"]), facts["problems"]
    assert facts["free_gpus"] == [0, 1, 3, 4, 5] and facts["gpu_cu_nums"] == [32] * 8
    assert facts["partitions"] == {str(g): "CPX" for g in range(8)}
    assert bed.c.launches()[-1]["physical_gpus"] == [0, 1, 3, 4, 5]


def test_a_running_jobs_gpus_are_reserved_on_the_node(node, tmp_path):
    first = laptop(node, tmp_path / "laptop1", "job1")
    first.c.hang_after(1)
    cp = first.cli(*first.run_args("--detach", "--gpus", "0,1"))
    assert cp.returncode == 0, desc(cp)
    first.wait_tuning()
    first.c.wait_stalled()          # reset only once the tuner sleeps: earlier, job1 would tune on and end
    first.c.reset_control()
    lock = json.loads(first.c.host_path(
        f"{first.c.aiter_root}/tune_logs/.tune-remote/locks/gpu-1.lock").read_text())
    assert lock["job_id"] == "job1" and "@" in lock["owner"]["who"]
    # another variant from another laptop: GPUs 0 and 1 look idle to rocm-smi, but job1 owns them
    second = laptop(node, tmp_path / "laptop2", "job2")
    cp = second.cli(*second.run_args(variant="a8w8"))
    assert cp.returncode == 0, desc(cp)
    facts = second.state()["facts"]
    assert facts["tune_gpus"] == [2, 3, 4, 5] and facts["reserved_gpus"] == {"0": "job1", "1": "job1"}
    assert first.c.launches()[-1]["physical_gpus"] == [2, 3, 4, 5]
    # asking for a reserved GPU is refused naming the job, launching nothing
    third = laptop(node, tmp_path / "laptop3", "job3")
    n = len(first.c.launches())
    cp = third.cli(*third.run_args("--gpus", "1,2", variant="a8w8"))
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert "job job1 is already running on GPU 1" in line and len(first.c.launches()) == n
    # a dead owner's reservation is taken over
    assert first.cli("cancel", "job1", "--grace", "2").returncode == 0
    fourth = laptop(node, tmp_path / "laptop4", "job4")
    cp = fourth.cli(*fourth.run_args("--gpus", "1,2", variant="a8w8"))
    assert cp.returncode == 0, desc(cp)
    assert first.c.launches()[-1]["physical_gpus"] == [1, 2]


# ------------------------------------------------------------------------------------------------
# two processes on one laptop
# ------------------------------------------------------------------------------------------------

def test_a_second_resume_of_a_driven_job_exits_1_naming_it_and_readers_never_revert_the_driver(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(1.0)                                   # the tuning lasts until the checks below are done
    proc = bed.popen(*bed.run_args())
    bed.wait_tuning()
    launches = len(bed.c.launches())
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert f"job {bed.job_id} is being driven by another tune-remote process (pid {proc.pid}: tune-remote run)" \
        in line, line
    assert len(bed.c.launches()) == launches
    # readers on the side while `run` drives: logs -f to the end, status JOB, fetch; none writes over it
    follower = bed.popen("logs", bed.job_id, "-f")
    assert bed.cli("status", bed.job_id).returncode == 0
    assert bed.cli("fetch", bed.job_id).returncode == 0
    bed.c.slow(0.0)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()[-2000:]
    follower.communicate(timeout=240)
    assert follower.returncode == 0
    assert bed.state()["state"] == "succeeded" and len(bed.c.launches()) == launches
    # the driver is gone: resume may drive again (a finished job: it collects, exit 0)
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 0, desc(cp)


# ------------------------------------------------------------------------------------------------
# S-01: the helper runs only from a directory of ours, with the bundle's content
# ------------------------------------------------------------------------------------------------

TROJAN = "import os\nopen('/tmp/pwned', 'w').write('x')\n"


def test_a_helper_dir_planted_by_another_user_or_changed_never_runs(node, tmp_path):
    from orchestrator.remote.detached import ENTRY, _bundle, helper_files
    version = _bundle()[0]
    bed = Bed(node, tmp_path)

    def pwned() -> bool:
        return bed.c.exec("sh", "-c", "test -e /tmp/pwned && echo yes || echo no").stdout.strip() == "yes"

    assert bed.cli(*bed.run_args()).returncode == 0
    ours = f"/tmp/tune-remote/helper-{version}"
    assert bed.c.exec("stat", "-c", "%u %a", "/tmp/tune-remote").stdout.split() == ["0", "700"]
    # our own dir with changed content (an edit, a partial push): pushed again, the changed code never runs
    bed.c.exec("sh", "-c", f'printf %s "$1" > {ours}/orchestrator/nodeside/discovery.py', "sh", TROJAN)
    bed.job_id = "job2"
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert not pwned()
    # another user owns the shared base dir (world-writable) and planted the whole helper in it
    files = " ".join(f"{ours}/{n}" for n in helper_files())
    dirs = " ".join(sorted({f"{ours}/{n.rsplit('/', 1)[0]}" for n in helper_files()}))
    bed.c.exec("sh", "-c", f'rm -rf /tmp/tune-remote && mkdir -p {dirs} && for f in {files}; do printf %s "$1" > $f; '
               "done && chown -R 1234:1234 /tmp/tune-remote && chmod -R 0777 /tmp/tune-remote", "sh", TROJAN)
    bed.job_id = "job3"
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert not pwned()
    # it ran from a per-user dir of its own instead (0700, ours)
    assert bed.c.exec("stat", "-c", "%u %a", "/tmp/tune-remote-0").stdout.split() == ["0", "700"]
    assert bed.c.exec("sh", "-c", f"test -f /tmp/tune-remote-0/helper-{version}/{ENTRY} && echo ok"
                      ).stdout.strip() == "ok"


# ------------------------------------------------------------------------------------------------
# S-02 / S-03: host keys are named the way OpenSSH names them, and accepting one is never silent
# ------------------------------------------------------------------------------------------------

def _openssh_fingerprint(node) -> str:
    import subprocess
    out = subprocess.run(["ssh-keygen", "-lf", f"{node.host_key_file}.pub"], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]                                  # "256 SHA256:... comment (ED25519)"


def test_host_keys_show_openssh_sha256_fingerprints_and_strict_no_warns_visibly(node, tmp_path):
    from tests.e2e.test_reliability_e2e import _ssh_config
    fp = _openssh_fingerprint(node)
    assert fp.startswith("SHA256:")
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    bed = Bed(node, tmp_path, ssh_config=_ssh_config(node, tmp_path / "ssh_config", kh, "yes"))
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 3 and fp in err_lines(cp)[0], desc(cp)     # the user can compare it with ssh-keygen
    # StrictHostKeyChecking no: it connects, but one visible line says so, with the fingerprint
    bed = Bed(node, tmp_path, ssh_config=_ssh_config(node, tmp_path / "ssh_config_no", kh, "no"))
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    warned = [l for l in cp.stderr.decode().splitlines() if "accepting the unknown host key" in l]
    assert warned and all(fp in l and "StrictHostKeyChecking no" in l for l in warned), desc(cp)
    assert kh.read_text() == ""                                       # and nothing is recorded


def test_accept_new_honours_hash_known_hosts(node, tmp_path):
    from tests.e2e.test_reliability_e2e import _ssh_config
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "accept-new")
    cfg.write_text(cfg.read_text() + "    HashKnownHosts yes\n")
    bed = Bed(node, tmp_path, ssh_config=cfg)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    (line,) = kh.read_text().splitlines()
    assert line.startswith("|1|") and node.host not in line and line.split()[1:3] == node.host_public_key.split()[:2]
    import subprocess
    found = subprocess.run(["ssh-keygen", "-F", f"[{node.host}]:{node.port}", "-f", str(kh)],
                           capture_output=True, text=True)
    assert found.returncode == 0, found                                # OpenSSH finds the hashed entry
    bed.job_id = "job2"
    assert bed.cli(*bed.run_args()).returncode == 0 and len(kh.read_text().splitlines()) == 1


# ------------------------------------------------------------------------------------------------
# S-04: the node cannot name a laptop file
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("live", ["/opt/aiter-sim/state.json", "/opt/aiter-sim/x/comparison.csv"])
def test_a_table_path_from_the_node_never_names_a_laptop_file(node, tmp_path, live):
    import yaml
    bed = Bed(node, tmp_path)
    inv = yaml.safe_load(bed.inv.read_text())
    inv["nodes"][node.alias]["containers"][bed.c.name] = {"env": {"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": live}}
    bed.inv.write_text(yaml.safe_dump(inv))
    cp = bed.cli(*bed.run_args("--promote", "none"))
    assert cp.returncode == 0, desc(cp)
    st = bed.state()                                  # state.json is still the job's state
    assert st["state"] == "succeeded" and st["remote"]["live_csv"] == live
    assert st["remote"]["tuned_csv"].endswith("/staging/a8w8_blockscale_tuned_gemm.csv")
    assert (bed.job_dir / "a8w8_blockscale_tuned_gemm.csv").is_file()
    import csv
    header = next(csv.reader((bed.job_dir / "comparison.csv").open()))
    assert "kernelName" not in header and any("before" in h for h in header), header   # the comparison


# ------------------------------------------------------------------------------------------------
# C-06: a job whose run directory vanished is never launched again silently
# ------------------------------------------------------------------------------------------------

def test_resume_of_a_job_whose_run_dir_vanished_launches_nothing(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    run_dir = bed.state()["remote"]["run_dir"]
    poll(bed.c.host_path(f"{run_dir}/rc").exists, timeout=120, what="the node pipeline to finish")
    bed.c.exec("rm", "-rf", run_dir)                  # tune_logs cleaned (or the container recreated)
    launches = len(bed.c.launches())
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 1, desc(cp)
    (line,) = err_lines(cp)
    assert "is gone from the node" in line and "not launched again" in line, line
    assert len(bed.c.launches()) == launches and not bed.node_exists(run_dir)


# ------------------------------------------------------------------------------------------------
# job files never go into site-packages
# ------------------------------------------------------------------------------------------------

def test_install_mode_keeps_job_files_out_of_site_packages_and_workdir_moves_them(make_node, tmp_path):
    import yaml
    node = make_node({"install_mode": "install"})
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    remote = bed.state()["remote"]
    assert remote["job_dir"] == f"/root/.tune-remote/tune_logs/.tune-remote/{bed.job_id}", remote["job_dir"]
    assert remote["logs"]["tune"].startswith("/root/.tune-remote/tune_logs/")
    site = remote["aiter_root"]
    assert site.endswith("site-packages")
    assert bed.c.exec("test", "-e", f"{site}/tune_logs", check=False).returncode != 0   # nothing written there
    # the inventory's workdir: wins
    inv = yaml.safe_load(bed.inv.read_text())
    inv["nodes"][node.alias]["containers"][bed.c.name] = {"workdir": "/opt/tr-work"}
    bed.inv.write_text(yaml.safe_dump(inv))
    bed.job_id = "job2"
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert bed.state()["remote"]["job_dir"] == "/opt/tr-work/.tune-remote/job2"
    assert bed.c.exec("test", "-f", "/opt/tr-work/.tune-remote/locks/a8w8_blockscale.lock", check=False).returncode == 0


def test_a_relative_table_path_is_resolved_in_the_aiter_root_and_said(node, tmp_path):
    import yaml
    bed = Bed(node, tmp_path)
    rel = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"
    inv = yaml.safe_load(bed.inv.read_text())
    inv["nodes"][node.alias]["containers"][bed.c.name] = {"env": {"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": rel}}
    bed.inv.write_text(yaml.safe_dump(inv))
    cp = bed.cli(*bed.run_args("--promote", "none"))
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    assert st["remote"]["live_csv"] == f"{st['remote']['aiter_root']}/{rel}" and st["remote"]["tuned_backup"]
    assert any("is a relative path" in n for n in st["notes"]), st["notes"]


def test_resume_retry_runs_a_failed_laptop_step_again_without_touching_the_node(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--promote", "none"))
    assert cp.returncode == 0, desc(cp)
    # a laptop-side bug in compare after hours of tuning: the job is failed, the node's work is done
    st = bed.state()
    st.update(state="failed", error="compare: internal error", step="compare")
    for name in ("compare", "promote", "report", "fetch"):
        st["steps"][name]["status"] = "pending"
    st["steps"]["compare"]["status"] = "failed"
    (bed.job_dir / "state.json").write_text(json.dumps(st))
    (bed.job_dir / "report.md").unlink()
    launches = len(bed.c.launches())
    assert bed.cli("resume", bed.job_id).returncode == 1            # a failed job stays failed by default
    cp = bed.cli("resume", bed.job_id, "--retry")
    assert cp.returncode == 0, desc(cp)
    assert bed.state()["state"] == "succeeded" and (bed.job_dir / "report.md").is_file()
    assert len(bed.c.launches()) == launches                          # nothing ran again on the node
