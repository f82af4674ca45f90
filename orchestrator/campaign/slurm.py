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

from ..errors import JobError, TuneRemoteError, UsageError
from ..inventory import SlurmSpec
from ..remote.shell import Cmd, sh
from ..remote.transport import put_bytes
from .slurm_runner import SlurmRunner, login_transport
from .slurm_scripts import HOLDER, STOP
from .targets import SourceEnv, TargetRef, TargetSource


class SlurmSource(TargetSource):
    """``state`` is the campaign's ``request.campaign.slurm`` dict; ``save`` persists it."""

    kind = "slurm"
    acquires = True
    cancelled_whole = "a Slurm campaign is cancelled as a whole (its batch jobs share one allocation plan)"

    @classmethod
    def from_job(cls, env: SourceEnv) -> "SlurmSource":
        state = env.state.slurm
        return cls(env.inventory().cluster(state["cluster"]), state, env.save, env.ui, env.accept_new_host_key)

    @classmethod
    def begin(cls, env: SourceEnv, options: dict) -> list[str] | None:
        """``options``: ``cluster`` (--slurm), ``nodes`` (--slurm-nodes), ``dry_run``."""
        spec = env.inventory().cluster(options["cluster"])
        if options.get("dry_run"):
            return [f"submit {options['nodes']} Slurm job(s) to {spec.name} through {spec.login}, then shard "
                    "over the nodes Slurm grants"]
        env.job.node, env.job.container = f"slurm:{spec.name}", spec.container
        env.state.slurm = new_state(env.job.job_id, spec, options["nodes"])
        env.job.step = "submit"
        return None

    @classmethod
    def status(cls, env: SourceEnv, targets: list[dict], live: bool) -> dict:
        """The Slurm jobs as squeue shows them now (a running campaign; else as last seen): the job row's
        ``slurm`` list, and each target's ``slurm`` (its job, state, pending reason)."""
        state = env.state.slurm
        if not state:
            return {}
        rows = saved_rows(state)
        if live:
            try:
                source = cls(env.inventory().cluster(state["cluster"]), state, lambda: None, env.ui)
                try:
                    rows = source.live()
                finally:
                    source.close()
            except TuneRemoteError:
                pass
        by_node = {r["node"]: r for r in rows if r.get("node")}
        by_node.update({r["job"]: r for r in rows})   # a target planned before its grant: on the job's name
        for t in targets:
            r = by_node.get(t["node"])
            if r:
                t["slurm"] = {k: r[k] for k in ("job", "id", "state", "reason")}
        return {"slurm": rows}

    def ended_by_cancel(self, exc: BaseException, running: bool) -> bool:
        return isinstance(exc, Cancelled) or (running and isinstance(exc, TuneRemoteError)
                                              and self.cancel_requested())

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
            self._run("sh", "-c", 'mkdir -p "$1" && cd "$1" && rm -rf release rc node gpus error cancel stopped drive drive.rc drive.log',
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

    def wait_running(self, timeout_s: float = 3600, patience_s: float | None = None) -> bool:
        """Until every holder runs and has said where: prints Slurm's pending reason when it changes.
        ``patience_s``: False when they are not all running by then (``run --detach`` returns)."""
        deadline = time.monotonic() + timeout_s
        patience = None if patience_s is None else time.monotonic() + patience_s
        said: dict[str, str] = {}
        running_since: dict[str, float] = {}
        while True:
            live = self.squeue()
            waiting = False
            for i, shard in self.state["jobs"].items():
                row = live.get(shard["id"])
                if row is None:
                    if not shard.get("node") and self.cancel_asked(i):
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
                return True
            if patience is not None and time.monotonic() > patience:
                return False
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

    def started(self, patience_s: float) -> bool:
        self.submit()
        return self.wait_running(patience_s=patience_s)

    def pending_plan(self, job, workspace=None) -> dict | str:
        from . import slurm_drive
        return slurm_drive.blocker(job.request) or slurm_drive.pending_plan(job, self.state)

    def ship(self, job, workspace, plan: dict, lines: list[str]) -> None:
        from . import slurm_drive
        slurm_drive.ship(job, workspace, self, plan, lines)

    def adopt(self, job, workspace, wait_s: float = 0.0) -> bool:
        from . import slurm_drive
        return slurm_drive.adopt(job, workspace, self, self.ui, wait_s)

    def runner(self, accept_new_host_key: bool = False) -> "SlurmRunner":
        return SlurmRunner(self.spec, self.state, accept_new_host_key,   # its own pool of login connections
                           query=lambda login: SlurmSource(self.spec, self.state, lambda: None, None,
                                                           accept_new_host_key, login=login))

    def cancel_requested(self) -> bool:
        """`tune-remote cancel` asked for this campaign (a `cancel` file in any job's directory)."""
        try:
            return bool(self.state.get("dir")) and any(self.cancel_asked(i) for i in self.state["jobs"])
        except TuneRemoteError:
            return False

    def cancel_asked(self, i: str) -> bool:
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
