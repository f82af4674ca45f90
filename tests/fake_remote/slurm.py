"""A real Slurm cluster on this one machine, for the e2e tests of the Slurm target source.

Everything is Debian's own packages (``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``), configured
as ``../shared/reference/scale-speed-noise.md`` A5 measured it:

* munged: the system one (``/run/munge``), started only if ``munge -n | unmunge`` does not answer;
* one ``slurmctld`` and one ``slurmd`` per compute node, each in the foreground (``-D``) as our child,
  with its own ports, spool and log under the cluster's directory (several clusters, e.g. two pytest
  sessions, can run at once); ``proctrack/linuxproc`` + ``task/none`` (no cgroups needed);
* accounting off (no ``sacct``), ``MinJobAge`` short, so the squeue -> scontrol -> exit-code-file path
  that real clusters without accounting need is the one exercised;
* GPUs as real GRES: character devices (``mknod c 1 3``, i.e. /dev/null) in the cluster's directory,
  so Slurm grants GPUs per job and sets ``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` as on a real
  AMD node.

The login node is a test-bed ``Node`` (its own sshd): its sessions get ``SLURM_CONF``, so ``sbatch``,
``squeue``, ``scontrol`` and ``scancel`` run there exactly as on a login node. Each compute node ``X``
has one container of that node named ``<login node>-X`` (the inventory's ``container: "<login>-{node}"``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from .node import ContainerSpec, Node
from .procs import stale_daemons
from .provision import STATE_ROOT, TestbedUnavailable, is_root, poll

SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "munged", "munge")
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
SLURM_USER_ENV = "SLURM_CONF"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                       if os.access(p, os.X_OK)), None)


def slurm_available() -> str | None:
    """None when a cluster can be started here (apt-installing Debian's Slurm as root if missing), else why not."""
    if not is_root():
        return "a Slurm test cluster needs root (slurmd launches jobs as the node user)"
    missing = [b for b in SLURM_BINARIES if not _which(b)]
    if missing and shutil.which("apt-get") and os.environ.get("TRTEST_NO_APT", "") == "":
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *SLURM_PACKAGES],
                       env=env, capture_output=True, timeout=1200)
        missing = [b for b in SLURM_BINARIES if not _which(b)]
    if missing:
        return f"Slurm/munge not installed (missing {', '.join(missing)}): apt-get install {' '.join(SLURM_PACKAGES)}"
    return None


def munge_answers() -> bool:
    try:
        cred = subprocess.run([_which("munge"), "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run([_which("unmunge")], input=cred.stdout, capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired, TypeError):
        return False


def ensure_munged() -> None:
    """The machine's munged (one socket, shared by every cluster): started only if none answers."""
    if munge_answers():
        return
    run_dir = Path("/run/munge")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "munge", "munge")
    key = Path("/etc/munge/munge.key")
    if not key.exists():   # the package's postinst makes one; a stripped image may not have it
        subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, timeout=30)
        shutil.chown(key, "munge", "munge")
        key.chmod(0o600)
    subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", _which("munged")], check=True, timeout=30)
    poll(munge_answers, timeout=15, what="munged answering")


class SlurmCluster:
    """``SlurmCluster(bed, computes=("a", "b")).start()``; ``stop()`` cancels every job and stops the daemons."""

    def __init__(self, bed, computes=("a", "b"), *, name: str | None = None, gpus_per_node: int = 8,
                 profile="current", partition: str = "gpu", min_job_age: int = 30):
        self.bed = bed
        self.name = name or f"{bed.owner.replace('pytest-', 'p')}-slurm{len(bed.nodes) + 1}"
        self.computes = [str(c) for c in computes]
        self.gpus_per_node = gpus_per_node
        self.profile = profile
        self.partition = partition
        self.min_job_age = min_job_age
        self.login: Node | None = None
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self, deadline_s: float = 60.0) -> "SlurmCluster":
        why = slurm_available()
        if why:
            raise TestbedUnavailable(why)
        ensure_munged()
        specs = [ContainerSpec(sim={"profile": self.profile}, suffix=c) for c in self.computes]
        self.login = self.bed.create_node(specs, name=self.name)
        self.dir = self.login.dir / "slurm"
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ctld").mkdir(exist_ok=True)
        self.jobs_dir.mkdir(exist_ok=True)
        shutil.chown(self.jobs_dir, self.bed.user.name)
        self._write_config()
        self._spawn("slurmctld", ["-D", "-f", str(self.conf)])
        for c in self.computes:
            self._spawn(f"slurmd-{c}", ["-D", "-f", str(self.conf), "-N", c], binary="slurmd")
        poll(self._all_idle, timeout=deadline_s, interval=0.2, what=f"Slurm nodes {self.computes} idle")
        # login sessions find the cluster like on a real login node (there: /etc/slurm/slurm.conf)
        self.login.extra_env = {SLURM_USER_ENV: str(self.conf)}
        self.login.restart_sshd()
        return self

    def stop(self) -> None:
        if not self.procs:
            return
        try:
            self.cmd("scancel", "--full", "--signal=KILL", "--user", self.bed.user.name, check=False)
            poll(lambda: not self.squeue_ids(), timeout=20, interval=0.2, what="jobs gone")
        except Exception:  # noqa: BLE001  (teardown: go on stopping the daemons)
            pass
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------ config
    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def jobs_dir(self) -> Path:
        """A directory the node user may write: the 'shared filesystem' of this one-machine cluster."""
        return self.dir / "shared"

    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        d = self.dir
        devs = d / "dev"
        devs.mkdir(exist_ok=True)
        for i in range(self.gpus_per_node):
            dev = devs / f"gpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))   # a char device: Slurm insists on one
        nodes = []
        for c in self.computes:
            gres = f" Gres=gpu:{self.gpus_per_node}" if self.gpus_per_node else ""
            nodes.append(f"NodeName={c} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} "
                         f"CPUs=2 RealMemory=1000{gres} State=UNKNOWN")
        self.conf.write_text("\n".join([
            f"# tune-remote test bed Slurm cluster {self.name} (owner {self.bed.owner})",
            f"ClusterName={self.name.replace('-', '')[:30].lower()}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "GresTypes=gpu",
            f"StateSaveLocation={d / 'ctld'}",
            f"SlurmdSpoolDir={d / 'spool-%n'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"MinJobAge={self.min_job_age}",
            "KillWait=5",
            *nodes,
            f"PartitionName={self.partition} Nodes={','.join(self.computes)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        (d / "gres.conf").write_text("AutoDetect=off\n" + (
            f"Name=gpu File={devs}/gpu[0-{self.gpus_per_node - 1}]\n" if self.gpus_per_node else ""))

    def _spawn(self, name: str, args: list[str], binary: str | None = None) -> None:
        log = open(self.dir / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen([_which(binary or name), *args], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    # ------------------------------------------------------------------ queries (as root, on this machine)
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env[SLURM_USER_ENV] = str(self.conf)
        return env

    def cmd(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Slurm daemon(s) {dead} died; see {self.dir}")
        return subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], env=self.env(), capture_output=True,
                              text=True, check=check, timeout=timeout)

    def _all_idle(self) -> bool:
        out = self.cmd("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return all(states.get(c, "").startswith("idle") for c in self.computes)

    def squeue_ids(self) -> list[str]:
        out = self.cmd("squeue", "-h", "-o", "%i", check=False).stdout
        return [x for x in out.split() if x]

    def jobs(self) -> list[dict]:
        """Live jobs: id, name, state, node list (squeue)."""
        out = self.cmd("squeue", "-h", "-o", "%i|%j|%T|%N").stdout
        return [dict(zip(("id", "name", "state", "nodes"), line.split("|"))) for line in out.splitlines() if line]

    def set_node_state(self, node: str, state: str, reason: str = "test") -> None:
        """e.g. ``down`` a compute node mid-job (the job is requeued or fails, as on a real cluster)."""
        self.cmd("scontrol", "update", f"NodeName={node}", f"State={state}", f"Reason={reason}")

    def container(self, compute: str):
        return self.login.containers[f"{self.login.name}-{compute}"]

    def inventory(self, cluster: str = "testslurm", **extra) -> dict:
        """The inventory's ``slurm:`` entry (issue 11's contract) for this cluster, reached over SSH."""
        entry = {"login": self.login.alias, "container": f"{self.login.name}-{{node}}",
                 "partition": self.partition, "ssh_config": str(self.login.ssh_config_file)}
        if self.gpus_per_node:
            entry["gpus_per_node"] = self.gpus_per_node
        entry.update(extra)
        return {"slurm": {cluster: entry}}


def sweep_stale_clusters(root: Path = STATE_ROOT) -> list[str]:
    """Stop the Slurm daemons of clusters whose pytest session died. Found by their command line
    (``-f <root>/pytest-<pid>/.../slurm.conf``): their directory may already be swept with their nodes."""
    stopped = []
    for pid, argv in stale_daemons(("slurmctld", "slurmd"), "-f", root):
        os.kill(pid, signal.SIGTERM)
        stopped.append(f"{Path(argv[0]).name}[{pid}]")
    return stopped

