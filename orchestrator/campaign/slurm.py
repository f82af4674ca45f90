"""Targets from a Slurm cluster: batch jobs submitted through the login node, one per shard.

Each batch job (``tr-<job id>-<i>``) is a *holder* (slurm_scripts.py): it records the node Slurm chose and
the GPUs it granted (``ROCR_VISIBLE_DEVICES``) on the shared filesystem, then keeps the allocation until
tune-remote releases it; on TERM it stops the container-side processes of the job. All work on the compute node runs as steps of that job (``srun --overlap --jobid J -w NODE
docker exec CTR ...``, see remote/srun.py), so Slurm, not tune-remote, owns the nodes: nothing runs
outside an allocation, and ``scancel`` ends it. State comes from ``squeue`` while the job lives, then
``scontrol show job``, then the job's own exit-code file (``rc``); ``sacct`` is never needed.

Submission is idempotent: every id is saved as soon as ``sbatch`` answers, and before submitting,
``squeue --me --name`` finds a job submitted by an attempt whose answer was lost.
"""

from __future__ import annotations

import json
import time

from ..context import Target
from ..errors import AllocationEnded, JobError, TuneRemoteError, UsageError
from ..inventory import ContainerSpec, NodeSpec, SlurmSpec
from ..remote.pool import Borrowed
from ..remote.shell import Cmd, sh
from ..remote.srun import SrunTransport
from ..remote.transport import put_bytes
from ..state import Status
from .slurm_scripts import HOLDER, STOP
from .targets import InventoryRunner, TargetRef



def login_transport(spec: SlurmSpec, accept_new_host_key: bool = False):
    from ..remote.openssh import ssh_transport
    from ..remote.sshtarget import SshTarget
    return ssh_transport(SshTarget(spec.login, spec.port, spec.user, spec.identity_file, spec.ssh_config),
                         accept_new_host_key=accept_new_host_key)


class SlurmSource:
    """``state`` is the campaign's ``request["campaign"]["slurm"]`` dict; ``save`` persists it."""

    def __init__(self, spec: SlurmSpec, state: dict, save, ui, accept_new_host_key: bool = False, login=None):
        self.spec = spec
        self.state = state
        self.save = save
        self.ui = ui
        self.accept_new = accept_new_host_key
        self._login = login         # a borrowed one (remote/pool.py) is left open by close()

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
            self._run("sh", "-c", 'mkdir -p "$1" && cd "$1" && rm -f release rc node gpus error cancel stopped',
                      "sh", d)
            put_bytes(self.login, HOLDER.encode(), f"{d}/holder.sh", mode="755")
            put_bytes(self.login, STOP.encode(), f"{d}/stop.py")
            argv = ["sbatch", "--parsable", "-J", shard["name"], "-N1", "-n1", "--exclusive",
                    "-o", f"{d}/slurm-%j.out"]
            for flag, value in (("-p", self.spec.partition), ("-A", self.spec.account), ("-t", self.spec.time)):
                if value:
                    argv += [flag, value]
            if self.spec.gpus_per_node:
                argv.append(f"--gres=gpu:{self.spec.gpus_per_node}")
            res = self.login.run(Cmd((*argv, *holder_argv(self.spec, d, self.state["job_id"]))), timeout=60,
                                 check=False)
            out = res.text.strip()
            if res.exit_code != 0 or not out.split(";")[0].isdigit():
                self._refused(shard["name"], res)
            shard["id"] = out.split(";")[0]
            self.save()
            self.ui.event(f"slurm: submitted {shard['name']} as job {shard['id']}")

    def _refused(self, name: str, res) -> None:
        """sbatch said no (partition, account, time, GRES): cancel what this campaign already queued, then one
        line with Slurm's own words. Bad input (exit 2): the inventory's cluster entry asks for what Slurm
        does not give."""
        ids = [s["id"] for s in self.state["jobs"].values() if s.get("id")]
        if ids:
            self._run("scancel", *ids, check=False)
        said = [ln.split("error:", 1)[1].strip() for ln in res.err_text.splitlines() if "sbatch: error:" in ln]
        said = said or [ln.strip() for ln in (res.err_text + res.text).splitlines() if ln.strip()][-1:]
        raise UsageError(f"Slurm refused {name}: " + ("; ".join(said) or f"sbatch exit {res.exit_code}"),
                         hint=f"check partition/account/time/gpus_per_node of slurm cluster {self.spec.name!r} "
                              "in the inventory (sinfo, sacctmgr show assoc)")

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
                    if not shard.get("node") and self._cancel_asked(i):
                        raise Cancelled(f"Slurm job {shard['id']} ({shard['name']}) was cancelled before it ran")
                    if not shard.get("node"):
                        said_err = self.shard_error(i)
                        if said_err:
                            raise JobError(f"Slurm job {shard['id']} ({shard['name']}): {said_err}",
                                           hint="fix container: in the inventory's slurm: entry ('{node}' "
                                                "expands to the node name), or start the container there")
                        raise JobError(f"Slurm job {shard['id']} ({shard['name']}) ended before it ran: "
                                       f"{self.final_state(shard)}",
                                       hint="see scontrol show job; resubmit with a new run")
                    continue
                state, node, reason = row
                if (shard.get("state"), shard.get("reason")) != (state, _reason(reason)):
                    shard["state"], shard["reason"] = state, _reason(reason)   # for `status` while offline
                    self.save()
                if state != "RUNNING":
                    waiting = True
                    if said.get(i) != reason and reason not in ("None", ""):
                        self.ui.event(f"slurm: job {shard['id']} ({shard['name']}) {state.lower()} ({reason})")
                        said[i] = reason
                    continue
                if not shard.get("node"):
                    got = self._run("sh", "-c",         # 'node' is written last: the holder's commit mark
                                    '[ -e "$1/node" ] && cat "$1/node" "$1/gpus" 2>/dev/null || true', "sh",
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

    def live(self) -> list[dict]:
        """One row per Slurm job of the campaign, from one ``squeue`` call: job name, id, state, reason (why it
        is pending: ``Resources``, ``Priority``...; None when running) and node. ``ENDED``: no longer in squeue."""
        rows = self.squeue()
        out = []
        for i in sorted(self.state.get("jobs", {}), key=int):
            s = self.state["jobs"][i]
            state, node, reason = rows.get(s.get("id") or "", ("ENDED", "", ""))
            out.append({"job": s["name"], "id": s.get("id"), "state": state, "reason": _reason(reason),
                        "node": s.get("node") or node or None})
        return out

    def final_state(self, shard: dict) -> str:
        """scontrol while Slurm remembers the job, else the job's own exit-code file, else lost."""
        state = self.scontrol_state(shard)
        if state:
            return state
        rc = self.exit_code(next(k for k, v in self.state["jobs"].items() if v is shard))
        return f"exit code {rc}" if rc else "lost (no exit-code file)"

    def scontrol_state(self, shard: dict) -> str:
        """``JobState`` (with ``Reason`` when not None) while slurmctld remembers the job (MinJobAge), or ''."""
        show = self._run("scontrol", "show", "job", shard["id"], "--oneliner", check=False)
        toks = dict(t.split("=", 1) for t in show.split() if "=" in t)
        if not toks.get("JobState"):
            return ""
        reason = toks.get("Reason", "None")
        return toks["JobState"] + (f" ({reason})" if reason not in ("None", "") else "")

    def exit_code(self, i: str) -> str:
        return self._run("sh", "-c", 'cat "$1/rc" 2>/dev/null || true', "sh", f"{self.state['dir']}/{i}",
                         check=False).strip()

    def shard_error(self, i: str) -> str:
        """What the holder said when it refused to hold (e.g. no such container on its node), or ''."""
        return self._run("sh", "-c", 'cat "$1/error" 2>/dev/null || true', "sh", f"{self.state['dir']}/{i}",
                         check=False).strip()

    # ------------------------------------------------------------------ the seam
    def targets(self) -> list[TargetRef]:
        self.submit()
        self.wait_running()
        return [TargetRef(s["node"], self.spec.container_on(s["node"])) for s in self.state["jobs"].values()
                if s.get("node")]

    def runner(self, accept_new_host_key: bool = False) -> "SlurmRunner":
        return SlurmRunner(self.spec, self.state, accept_new_host_key)   # its own pool of login connections

    def cancel_requested(self) -> bool:
        """`tune-remote cancel` asked for this campaign (a `cancel` file in any job's directory)."""
        try:
            return bool(self.state.get("dir")) and any(self._cancel_asked(i) for i in self.state["jobs"])
        except TuneRemoteError:
            return False

    def _cancel_asked(self, i: str) -> bool:
        return self.login.run(Cmd(("test", "-e", f"{self.state['dir']}/{i}/cancel")), timeout=60,
                              check=False).exit_code == 0

    def release(self, keep: set | None = None) -> None:
        """The campaign is over: running holders end by themselves (exit-code file 0); a job still pending
        (the campaign failed before it ran) is cancelled, so nothing is left queued. ``keep``: the plan is
        made, only the nodes it left out are given back now (not held for the hours the campaign runs)."""
        jobs = {i: s for i, s in self.state["jobs"].items() if keep is None or s.get("node") not in keep}
        dirs = [f"{self.state['dir']}/{i}" for i in jobs]
        if dirs:
            self._run("sh", "-c", 'for d; do touch "$d/release"; done', "sh", *dirs, check=False)
        ids = [s["id"] for s in jobs.values() if s.get("id")]
        if ids:
            self._run("scancel", "--state=PENDING", *ids, check=False)
        for s in jobs.values():
            s["state"], s["reason"] = "ENDED", None
        self.save()

    def cancel(self, grace_s: float, wait_s: float = 60.0) -> tuple[int, int]:
        """TERM to the whole of every job (each holder's trap stops its container-side processes: TERM,
        ``grace_s``, KILL), wait until they leave squeue, then ``scancel`` whatever is left (pending, stuck).
        Returns (processes signalled, killed) as the holders reported them."""
        jobs = {i: s for i, s in self.state["jobs"].items() if s.get("id")}
        if not jobs:
            return 0, 0
        dirs = [f"{self.state['dir']}/{i}" for i in jobs]
        self._run("sh", "-c", 'g=$1; shift; for d; do [ -d "$d" ] && echo "$g" > "$d/cancel"; done', "sh",
                  str(grace_s), *dirs, check=False)
        ids = [s["id"] for s in jobs.values()]
        running = [j for j, row in self.squeue().items() if row[0] in ("RUNNING", "CONFIGURING", "COMPLETING")]
        idle = [j for j in ids if j not in running]
        if idle:                 # pending (or gone): nothing of theirs runs, no grace to wait for
            self._run("scancel", *idle, check=False)
        if running:
            self._run("scancel", "--full", "--signal=TERM", *running, check=False)
            deadline = time.monotonic() + grace_s + wait_s
            while set(running) & set(self.squeue()) and time.monotonic() < deadline:
                time.sleep(0.5)
            self._run("scancel", *running, check=False)     # what is still there (stuck)
        signalled = killed = 0
        out = self._run("sh", "-c", 'for d; do tail -n 1 "$d/stopped" 2>/dev/null; echo; done', "sh", *dirs,
                        check=False)
        for line in out.splitlines():
            try:
                got = json.loads(line)
            except ValueError:
                continue
            signalled += int(got.get("signalled") or 0)
            killed += int(got.get("killed") or 0)
        return signalled, killed


class Cancelled(JobError):
    """``tune-remote cancel`` ended the campaign's Slurm jobs before they ran."""


class SlurmRunner(InventoryRunner):
    """The inventory runner's engine and cancel, with the target opened through ``srun`` on the login node."""

    def __init__(self, spec: SlurmSpec, state: dict, accept_new_host_key: bool = False):
        super().__init__(None, accept_new_host_key)
        self.spec = spec
        self.state = state

    def login(self) -> Borrowed:
        """A view of a login-node connection of the pool: every compute node's steps go through the login node,
        a few targets to a connection (pool.PER_CONNECTION: sshd's MaxSessions)."""
        return self.pool.borrow(("login", self.spec.login), lambda: login_transport(self.spec, self.accept_new))

    def _shard(self, node: str) -> dict:
        for s in self.state["jobs"].values():
            if s.get("node") == node:
                return s
        raise JobError(f"no Slurm job of this campaign runs on {node}")

    def granted_gpus(self, ref: TargetRef) -> list[int] | None:
        return self._shard(ref.node).get("gpus") or None

    def run(self, sub, workspace, settings) -> str:
        """As on an inventory node. When the Slurm job under it ends first, the sub-job ends ``cancelled`` (a
        ``cancel`` asked for it) or ``lost``, saying what Slurm (or the holder's exit-code file) says."""
        try:
            state = super().run(sub, workspace, settings)
        except TuneRemoteError as exc:
            ended = self._ended(sub.node)
            if ended is None and not isinstance(exc, AllocationEnded):
                raise
            state = Status.FAILED
        else:
            ended = self._ended(sub.node) if state != Status.SUCCEEDED else None
        if ended is None:
            return state
        sub = workspace.load(sub.job_id)
        sub.state, sub.error = ended
        workspace.save(sub)
        return sub.state

    def _ended(self, node: str) -> tuple[str, str] | None:
        """(state, why) when this node's Slurm job was cancelled by tune-remote or is gone; else None."""
        i = next((k for k, s in self.state["jobs"].items() if s.get("node") == node), None)
        if i is None or not self.state.get("dir"):
            return None
        src = SlurmSource(self.spec, self.state, lambda: None, None, self.accept_new, login=self.login())
        try:
            if src._cancel_asked(i):
                return Status.CANCELLED, "cancelled by the user"
            shard = self.state["jobs"][i]
            if shard["id"] in src.squeue():
                return None
            rc = src.exit_code(i)
            slurm = src.scontrol_state(shard)
            said = ", ".join(x for x in (f"Slurm: {slurm}" if slurm else "", f"exit code {rc}" if rc else "") if x)
            if not rc:      # no exit-code file: the holder never ended by itself (node lost, killed, purged)
                return Status.LOST, (f"lost: Slurm job {shard['id']} ({shard['name']}) on node {node} vanished without "
                                f"an exit-code file" + (f" ({said})" if said else ""))
            return Status.FAILED, f"Slurm job {shard['id']} ({shard['name']}) on node {node} ended under the work ({said})"
        except TuneRemoteError:
            return None
        finally:
            src.close()

    def _make(self, ref: TargetRef) -> Target:
        i = next(k for k, s in self.state["jobs"].items() if s.get("node") == ref.node)
        host = SrunTransport(self.login(), self._shard(ref.node)["id"], ref.node,
                             guard=f"{self.state['dir']}/{i}/cancel" if self.state.get("dir") else None)
        node = NodeSpec(name=ref.node, host=self.spec.login, docker=self.spec.docker)
        return Target(node, ContainerSpec(name=ref.container), host=host)


def _reason(reason: str) -> str | None:
    return None if reason in ("None", "", "(null)") else reason


def saved_rows(state: dict) -> list[dict]:
    """``live()``'s rows from what the run last saw (``status`` without reaching the login node)."""
    return [{"job": s["name"], "id": s.get("id"), "state": s.get("state"), "reason": s.get("reason"),
             "node": s.get("node")} for _, s in sorted(state.get("jobs", {}).items(), key=lambda kv: int(kv[0]))]


def holder_argv(spec: SlurmSpec, d: str, job_id: str) -> list[str]:
    """The batch script and its arguments (slurm_scripts.HOLDER's usage line)."""
    return [f"{d}/holder.sh", d, spec.container, job_id, *spec.docker]


def new_state(job_id: str, spec: SlurmSpec, nodes: int) -> dict:
    return {"cluster": spec.name, "job_id": job_id, "nodes": nodes, "jobs": {}}
