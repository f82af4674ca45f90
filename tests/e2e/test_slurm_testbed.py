"""The Slurm test cluster itself (tests/fake_remote/slurm.py): real slurmctld/slurmd/munge from Debian,
reached the way tune-remote will reach a login node: over SSH, as the node user, with the user's keys."""

from __future__ import annotations

import subprocess

from tests.fake_remote.provision import poll


def _login(cluster, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cluster.login.ssh_argv(script), capture_output=True, text=True, timeout=timeout)


def test_sbatch_over_ssh_runs_in_the_compute_nodes_container_with_granted_gpus(slurm_cluster):
    c = slurm_cluster
    out = c.jobs_dir
    script = (f"sbatch --parsable -J tr-testbed-gres -w b --gres=gpu:3 -o {out}/gres-%j.out "
              f"--wrap 'echo node=$SLURMD_NODENAME rocr=$ROCR_VISIBLE_DEVICES; "
              f"docker exec {c.login.name}-$SLURMD_NODENAME hostname; echo 3 > {out}/gres.rc'")
    sub = _login(c, script)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    assert job_id.isdigit()
    poll(lambda: (out / "gres.rc").exists(), timeout=30, what="job wrote its exit-code file")
    text = (out / f"gres-{job_id}.out").read_text()
    assert "node=b rocr=0,1,2" in text                      # Slurm's own GPU grant, as on an AMD node
    assert f"{c.login.name}-b" in text                      # docker exec reached the compute node's container
    # accounting is off: the job is gone from squeue, scontrol still remembers it (MinJobAge)
    poll(lambda: job_id not in c.squeue_ids(), timeout=30, what="job left squeue")
    show = c.cmd("scontrol", "show", "job", job_id, "--oneliner").stdout
    assert "JobState=COMPLETED" in show and "NodeList=b" in show


def test_scancel_over_ssh_ends_the_job_and_its_foreground_work(slurm_cluster):
    c = slurm_cluster
    marker = c.jobs_dir / "sleeper.pid"
    sub = _login(c, f"sbatch --parsable -J tr-testbed-cancel -o /dev/null --wrap 'echo $$ > {marker}; exec sleep 300'")
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    poll(lambda: marker.exists() and marker.read_text().strip(), timeout=30, what="job started")
    pid = int(marker.read_text())
    assert any(j["id"] == job_id and j["state"] == "RUNNING" for j in c.jobs())
    assert _login(c, f"scancel --full {job_id}").returncode == 0
    poll(lambda: job_id not in c.squeue_ids(), timeout=30, what="cancelled job left squeue")
    poll(lambda: not _alive(pid), timeout=30, what="the job's process ended")
    assert "JobState=CANCELLED" in c.cmd("scontrol", "show", "job", job_id, "--oneliner").stdout


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
