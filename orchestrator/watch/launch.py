"""Jobs a watch starts: ordinary ``run`` jobs (one target) or campaigns (several), over the shapes a cycle
chose (an untuned CSV in the watch's directory), never asking anything; and the same jobs re-attached by
the next watch when the one that started them was stopped or killed."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..context import Settings
from ..errors import ConnectionLost, ObserverError, TuneRemoteError
from ..records import JobRequest
from ..state import TERMINAL, JobState, Status, Workspace, atomic_write
from .mine import WatchTarget

NO_GPU = "no free GPU"


@dataclass
class JobOptions:
    """What every job of a watch is asked (run's flags of the same names)."""
    promote: str = "proven"
    budget: str | None = None
    repeats: int = 3
    serve_cmd: str | None = None        # --serve-cmd: the serving check of every job (issue 37)
    serve_repeats: int = 3


@dataclass
class Outcome:
    job_id: str
    state: str
    tuned: list
    promoted: int = 0
    error: str | None = None
    detached: bool = False     # left running (connection lost, stopped): the next watch re-attaches it
    tables: dict = field(default_factory=dict)   # target label -> its live table (served.table_of)
    never_started: bool = False   # failed before the job was saved (e.g. the node refused the connection)

    @property
    def no_gpu(self) -> bool:
        return self.state == Status.FAILED and NO_GPU in (self.error or "")

    @property
    def retry(self) -> bool:
        """Nothing was tuned and the shapes are owed: tried again next cycle (``skipped``, not failed)."""
        return self.no_gpu or self.never_started


class Launcher:
    def __init__(self, workspace: Workspace, settings: Settings, ui, inventory: Callable, options: JobOptions,
                 watch_dir: Path, name: str):
        self.ws, self.settings, self.ui, self.inventory = workspace, settings, ui, inventory
        self.options, self.dir, self.name = options, Path(watch_dir), name

    def job_id(self, cycle: int, variant: str) -> str:
        """``watch-NAME-cN-VARIANT``; a long NAME is cut, never the cycle and the variant (job ids: <= 81)."""
        tail = f"-c{cycle}-{variant}"
        return f"watch-{self.name}"[:81 - len(tail)] + tail

    def shapes_csv(self, job_id: str, variant: str, shapes: list[dict]) -> str:
        from ..parsing.untuned import write_untuned_csv
        path = self.dir / "shapes" / f"{job_id}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, write_untuned_csv(shapes, variant).encode())
        return str(path)

    def request(self, job_id: str, variant: str, shapes: list[dict]) -> JobRequest:
        o = self.options
        serving = ({"serve_cmd": o.serve_cmd, **({"serve_repeats": o.serve_repeats} if o.serve_repeats != 1 else {})}
                   if o.serve_cmd else {})
        return JobRequest.of_run(shapes_csv=self.shapes_csv(job_id, variant, shapes), repeats=o.repeats,
                                 promote=o.promote, budget=o.budget, watch=self.name, **serving)

    def drive(self, job_id: str, variant: str, shapes: list[dict], targets: list[WatchTarget]) -> Outcome:
        """Start the job (or re-attach it when the workspace has it already) and carry it to its end."""
        if self.ws.exists(job_id):
            job = self.ws.load(job_id)
            self.ui.event(f"watch: re-attaching job {job_id} ({job.state})")
        else:
            job = None
        if job is not None and job.state in TERMINAL:
            return self.outcome(job)
        try:
            if len(targets) == 1:
                job = self._single(job, job_id, variant, shapes, targets[0])
            else:
                job = self._campaign(job, job_id, variant, shapes, targets)
        except (ConnectionLost, ObserverError):
            raise
        except TuneRemoteError as exc:
            if job is None and self.ws.exists(job_id):
                job = self.ws.load(job_id)
            if job is None:
                return Outcome(job_id, Status.FAILED, [], error=exc.one_line(), never_started=True)
        return self.outcome(job)

    def _single(self, job, job_id, variant, shapes, wt: WatchTarget) -> JobState:
        from ..campaign.runs import one
        if job is None:
            request = self.request(job_id, variant, shapes)
            if wt.demo_dir:
                request["demo_dir"] = wt.demo_dir
            job = JobState(job_id=job_id, node=wt.node, container=wt.container, variant=variant,
                           created=time.time(), request=request)
        job.request.detach = False
        one(self.ws, job, wt.open(), self.settings, self.ui, owner="watch", announce=False,
            inventory=self.inventory)
        return job

    def _campaign(self, job, job_id, variant, shapes, targets: list[WatchTarget]) -> JobState:
        from ..campaign import lifecycle
        console = lifecycle.Console(ui=self.ui, show=self.ui.event, confirm=None)
        if job is not None:
            job.request.detach = False
            lifecycle.carry(self.ws, job, self.inventory, self.settings, console)
            return job
        nodes = list(dict.fromkeys(t.node for t in targets))
        containers = sorted({t.container for t in targets})
        container = containers[0] if len(containers) == 1 else None
        job = lifecycle.new_job(job_id, nodes, container, [variant], self.request(job_id, variant, shapes))
        lifecycle.start(self.ws, job, "inventory", {}, self.inventory, self.settings, console, False)
        return job

    def outcome(self, job: JobState) -> Outcome:
        out = Outcome(job.job_id, str(job.state), list(job.shapes or []), error=job.error,
                      detached=job.state not in TERMINAL)
        subs = []
        if job.is_campaign:
            from ..campaign.driver import sub_jobs
            subs = sub_jobs(job, self.ws)
        jobs = subs or [job]
        from .served import table_of
        for j in jobs:
            if table_of(j):
                out.tables[f"{j.node}/{j.container}"] = table_of(j)
            info = j.step_state("promote").info if "promote" in j.steps else {}
            out.promoted += int(info.get("promoted") or 0)
            if subs:
                out.tuned.extend(s for s in j.shapes or [] if s not in out.tuned)
        return out
