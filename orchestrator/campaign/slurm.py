"""Targets from a Slurm cluster: batch jobs submitted through the login node, one per shard.

Each batch job (``tr-<job id>-<i>``) is a *holder*: it records the node Slurm chose and the GPUs it
granted (``ROCR_VISIBLE_DEVICES``) on the shared filesystem, then keeps the allocation until tune-remote
releases it. All work on the compute node runs as steps of that job (``srun --overlap --jobid J -w NODE
docker exec CTR ...``, see remote/srun.py), so Slurm, not tune-remote, owns the nodes: nothing runs
outside an allocation, and ``scancel`` ends it. State comes from ``squeue`` while the job lives, then
``scontrol show job``, then the job's own exit-code file (``rc``); ``sacct`` is never needed.

Submission is idempotent: every id is saved as soon as ``sbatch`` answers, and before submitting,
``squeue --me --name`` finds a job submitted by an attempt whose answer was lost.
"""

from __future__ import annotations

import time

from ..context import Target
from ..errors import JobError
from ..inventory import ContainerSpec, NodeSpec, SlurmSpec
from ..remote.shell import Cmd, sh
from ..remote.srun import SrunTransport
from ..remote.transport import put_bytes
from .targets import InventoryRunner, TargetRef

HOLDER = """#!/bin/sh
# tune-remote holder job: keeps this allocation while tune-remote works on the node through srun steps.
d="$1"
printf '%s\\n' "${ROCR_VISIBLE_DEVICES:-${CUDA_VISIBLE_DEVICES:-}}" > "$d/gpus"
printf '%s\\n' "$SLURMD_NODENAME" > "$d/node.tmp" && mv "$d/node.tmp" "$d/node"
trap 'echo 143 > "$d/rc"; exit 143' TERM INT
while [ ! -e "$d/release" ]; do sleep 1; done
echo 0 > "$d/rc"
"""


def login_transport(spec: SlurmSpec, accept_new_host_key: bool = False):
    from ..remote.ssh import SshTarget, SshTransport
    return SshTransport(SshTarget(spec.login, spec.port, spec.user, spec.identity_file, spec.ssh_config),
                        accept_new_host_key=accept_new_host_key)


class SlurmSource:
    """``state`` is the campaign's ``request["campaign"]["slurm"]`` dict; ``save`` persists it."""

    def __init__(self, spec: SlurmSpec, state: dict, save, ui, accept_new_host_key: bool = False):
        self.spec = spec
        self.state = state
        self.save = save
        self.ui = ui
        self.accept_new = accept_new_host_key
        self._login = None

    # ------------------------------------------------------------------ login node
    @property
    def login(self):
        if self._login is None:
            self._login = login_transport(self.spec, self.accept_new)
        return self._login

    def _run(self, *argv: str, stdin: bytes | None = None, check: bool = True) -> str:
        return self.login.run(Cmd(tuple(argv)), stdin=stdin, timeout=60, check=check).text

    def close(self) -> None:
        if self._login is not None:
            self._login.close()
            self._login = None

    # ------------------------------------------------------------------ submit, wait
    def submit(self) -> None:
        if not self.state.get("dir"):
            home = self.login.run(sh('printf %s "$HOME"'), timeout=60).text.strip()
            self.state["dir"] = f"{home}/.tune-remote/slurm/{self.state['job_id']}"
            self.save()
        for i in range(int(self.state["nodes"])):
            shard = self.state["jobs"].setdefault(str(i), {"name": f"tr-{self.state['job_id']}-{i}"})
            if shard.get("id"):
                continue
            found = self._run("squeue", "-h", "--me", "--name", shard["name"], "-o", "%i").split()
            if found:
                shard["id"] = found[0]
                self.save()
                continue
            d = f"{self.state['dir']}/{i}"
            # a directory left by an earlier job of the same id must not speak for this one
            self._run("sh", "-c", 'mkdir -p "$1" && rm -f "$1/release" "$1/rc" "$1/node" "$1/gpus"', "sh", d)
            put_bytes(self.login, HOLDER.encode(), f"{d}/holder.sh", mode="755")
            argv = ["sbatch", "--parsable", "-J", shard["name"], "-N1", "-n1", "--exclusive",
                    "-o", f"{d}/slurm-%j.out"]
            for flag, value in (("-p", self.spec.partition), ("-A", self.spec.account), ("-t", self.spec.time)):
                if value:
                    argv += [flag, value]
            if self.spec.gpus_per_node:
                argv.append(f"--gres=gpu:{self.spec.gpus_per_node}")
            out = self._run(*argv, f"{d}/holder.sh", d).strip()
            shard["id"] = out.split(";")[0]
            if not shard["id"].isdigit():
                raise JobError(f"sbatch answered {out!r}", hint="check the partition/account in the inventory")
            self.save()
            self.ui.event(f"slurm: submitted {shard['name']} as job {shard['id']}")

    def wait_running(self, timeout_s: float = 3600) -> None:
        """Until every holder runs and has said where: prints Slurm's pending reason when it changes."""
        deadline = time.monotonic() + timeout_s
        said: dict[str, str] = {}
        running_since: dict[str, float] = {}
        while True:
            live = self.squeue()
            waiting = False
            for i, shard in self.state["jobs"].items():
                row = live.get(shard["id"])
                if row is None:
                    if not shard.get("node"):
                        raise JobError(f"Slurm job {shard['id']} ({shard['name']}) ended before it ran: "
                                       f"{self.final_state(shard)}",
                                       hint="see scontrol show job; resubmit with a new run")
                    continue
                state, node, reason = row
                if state != "RUNNING":
                    waiting = True
                    if said.get(i) != reason and reason not in ("None", ""):
                        self.ui.event(f"slurm: job {shard['id']} {state.lower()} ({reason})")
                        said[i] = reason
                    continue
                if not shard.get("node"):
                    got = self._run("sh", "-c", 'cat "$1/node" "$1/gpus" 2>/dev/null || true', "sh",
                                    f"{self.state['dir']}/{i}", check=False).split("\n")
                    if len(got) >= 2 and got[0].strip():
                        shard["node"] = got[0].strip()
                        shard["gpus"] = [int(g) for g in got[1].replace(",", " ").split() if g.isdigit()]
                        self.save()
                    elif time.monotonic() - running_since.setdefault(i, time.monotonic()) > 120:
                        raise JobError(f"Slurm job {shard['id']} runs on {node} but has not written "
                                       f"{self.state['dir']}/{i}/node in 2 minutes",
                                       hint="tune-remote needs the login node's home directory shared with the "
                                            "compute nodes; `tune-remote cancel JOB` ends the job")
                    else:
                        waiting = True
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise JobError("Slurm jobs did not start in time", hint="see squeue; cancel with tune-remote cancel")
            time.sleep(1.0)

    def squeue(self) -> dict[str, tuple[str, str, str]]:
        ids = [s["id"] for s in self.state["jobs"].values() if s.get("id")]
        if not ids:
            return {}
        out = self._run("squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%N|%r", check=False)
        rows = {}
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                rows[parts[0]] = (parts[1], parts[2], parts[3])
        return rows

    def final_state(self, shard: dict) -> str:
        """scontrol while Slurm remembers the job, else the job's own exit-code file, else lost."""
        show = self._run("scontrol", "show", "job", shard["id"], "--oneliner", check=False)
        for tok in show.split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
        i = next(k for k, v in self.state["jobs"].items() if v is shard)
        rc = self._run("sh", "-c", 'cat "$1/rc" 2>/dev/null || true', "sh", f"{self.state['dir']}/{i}",
                       check=False).strip()
        return f"exit code {rc}" if rc else "lost (no exit-code file)"

    # ------------------------------------------------------------------ the seam
    def targets(self) -> list[TargetRef]:
        self.submit()
        self.wait_running()
        return [TargetRef(s["node"], self.spec.container_on(s["node"])) for s in self.state["jobs"].values()
                if s.get("node")]

    def runner(self, accept_new_host_key: bool = False) -> "SlurmRunner":
        return SlurmRunner(self.spec, self.state, accept_new_host_key)

    def release(self) -> None:
        for i in self.state["jobs"]:
            self._run("sh", "-c", 'touch "$1/release"', "sh", f"{self.state['dir']}/{i}", check=False)

    def scancel(self) -> None:
        ids = [s["id"] for s in self.state["jobs"].values() if s.get("id")]
        if ids:
            self._run("scancel", "--full", *ids, check=False)
            self._run("scancel", *ids, check=False)


class SlurmRunner(InventoryRunner):
    """The inventory runner's engine and cancel, with the target opened through ``srun`` on the login node."""

    def __init__(self, spec: SlurmSpec, state: dict, accept_new_host_key: bool = False):
        super().__init__(None, accept_new_host_key)
        self.spec = spec
        self.state = state

    def _shard(self, node: str) -> dict:
        for s in self.state["jobs"].values():
            if s.get("node") == node:
                return s
        raise JobError(f"no Slurm job of this campaign runs on {node}")

    def granted_gpus(self, ref: TargetRef) -> list[int] | None:
        return self._shard(ref.node).get("gpus") or None

    def open(self, ref: TargetRef) -> Target:
        host = SrunTransport(login_transport(self.spec, self.accept_new), self._shard(ref.node)["id"], ref.node)
        node = NodeSpec(name=ref.node, host=self.spec.login, docker=self.spec.docker)
        return Target(node, ContainerSpec(name=ref.container), host=host)


def new_state(job_id: str, spec: SlurmSpec, nodes: int) -> dict:
    return {"cluster": spec.name, "job_id": job_id, "nodes": nodes, "jobs": {}}
