"""Job state on the laptop: a cache of the node's truth, saved atomically as <workspace>/<job>/state.json."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path

from .errors import JobError, JobNotFound, UsageError
from .records import Facts, JobRequest, NodePaths



class Status(str, Enum):
    """One vocabulary for a job's state (running, then succeeded/failed/cancelled/lost) and a step's status
    (pending, running, then done/skipped/failed). A member is its JSON value: ``Status.DONE == "done"``,
    ``str(Status.DONE) == "done"``, and state.json holds the same words it always did."""
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__
    __hash__ = str.__hash__      # Enum hashes the member's name: {"done"} == {Status.DONE} needs the value's

    @classmethod
    def read(cls, value):
        """A member for a known word; a word this code does not know (a newer writer's) stays as it is."""
        try:
            return cls(value)
        except ValueError:
            return value


TERMINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST)
JOB_STATES = (Status.RUNNING,) + TERMINAL
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")


def resolve_workspace(cli_value: str | None) -> Path:
    return Path(cli_value or os.environ.get("TUNE_REMOTE_WORKSPACE") or "tune-workspace")


def check_job_id(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise UsageError(f"invalid job id {job_id!r}",
                         hint="use letters, digits, '-', '_' and '.' (at most 81 characters)")
    return job_id


def new_job_id(variant: str, node: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{node}-{variant}"[:81]


@dataclass
class StepState:
    status: Status = Status.PENDING
    started: float | None = None
    finished: float | None = None
    info: dict = field(default_factory=dict)


@dataclass
class JobState:
    job_id: str
    node: str
    container: str
    variant: str
    created: float
    request: JobRequest                # what the user asked for (flags), never secrets
    state: Status = Status.RUNNING
    step: str = "discover"
    steps: dict[str, StepState] = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)            # discover output
    remote: NodePaths = field(default_factory=NodePaths)   # node paths: job dir, logs, csvs, run dir
    shapes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    fetched: dict = field(default_factory=dict)    # node path -> sha256 of the local copy
    rev: int = 0                                   # bumped by every save: who wrote since I loaded

    _RECORDS = {"request": JobRequest, "facts": Facts, "remote": NodePaths}

    def __setattr__(self, name: str, value) -> None:
        kind = self._RECORDS.get(name)      # a plain dict given for a record (old callers, a loaded file)
        object.__setattr__(self, name, kind.from_dict(value) if kind else value)

    @property
    def is_campaign(self) -> bool:
        """A campaign (its targets' jobs live in its directory), not a single job or a campaign's target job."""
        return bool(self.request.campaign)

    def step_state(self, name: str) -> StepState:
        return self.steps.setdefault(name, StepState())

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def to_dict(self) -> dict:
        out = {**self.__dict__.get("_extra", {}), **{f.name: getattr(self, f.name) for f in fields(self)}}
        out["steps"] = {k: asdict(v) for k, v in self.steps.items()}
        for name in self._RECORDS:
            out[name] = out[name].to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "JobState":
        """A job from its state.json; keys this code does not know are written back as they were."""
        steps = {k: StepState(**{**v, "status": Status.read(v.get("status", Status.PENDING))})
                 for k, v in data.pop("steps", {}).items()}
        if "state" in data:
            data["state"] = Status.read(data["state"])
        known = {f.name for f in fields(cls)}
        job = cls(steps=steps, **{k: v for k, v in data.items() if k in known})
        object.__setattr__(job, "_extra", {k: v for k, v in data.items() if k not in known})
        return job


def hold_lock(path: Path, command: str) -> tuple[int | None, dict]:
    """Take the exclusive lock ``path`` for this process (until it closes the fd or exits) and write who holds
    it there: ``(fd, {})``; when another process holds it, ``(None, what that one wrote)``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            who = json.loads(os.read(fd, 4096) or b"{}")
        except ValueError:
            who = {}
        os.close(fd)
        return None, who
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "since": time.time()}).encode())
    return fd, {}


_OWNED: dict[str, int] = {}     # job dirs this process drives -> the fd holding their .lock (until exit)


class Workspace:
    """Jobs on the laptop. One process *drives* a job (`run`, `resume`): it holds ``<job>/.lock`` (flock) and
    its saves win. Others (`status JOB`, `logs -f`, `fetch`, `cancel`) never write over it: their save is
    dropped while the job is driven elsewhere or when state.json changed since they loaded it; `cancel`
    goes through ``update`` (re-read, change, write under ``<job>/.save.lock``), and the driver keeps a
    cancellation it finds on disk (R-05)."""

    observers: list = []    # f(workspace, job) after every write of a state.json: the store's sync (cli/store.py)

    def __init__(self, root: Path):
        self.root = Path(root)

    def _owned_here(self, job_id: str) -> bool:
        """This process drives the job, or the campaign whose sub-job it is (<campaign>/targets/<sub>)."""
        d = os.path.abspath(self.job_dir(job_id))
        return any(d == o or d.startswith(o + os.sep) for o in _OWNED)

    def own(self, job_id: str, command: str) -> None:
        """Become the process driving job_id until exit; another live driver -> JobError naming it."""
        if os.path.abspath(self.job_dir(job_id)) in _OWNED:
            return
        d = self._dir(job_id)
        fd, who = hold_lock(d / ".lock", command)
        if fd is None:
            raise JobError(f"job {job_id} is being driven by another tune-remote process "
                           f"(pid {who.get('pid', '?')}: tune-remote {who.get('command', '?')})",
                           hint=f"follow it with `tune-remote logs {job_id} -f` or `tune-remote status {job_id}`; "
                                "the job is free again as soon as that process ends")
        _OWNED[os.path.abspath(d)] = fd

    def driven_elsewhere(self, job_id: str) -> bool:
        """Another process drives the job (or the campaign it belongs to)."""
        if self._owned_here(job_id):
            return False
        d = self.job_dir(job_id)
        for lock in (d / ".lock", d.parent.parent / ".lock" if d.parent.name == "targets" else None):
            if lock is None:
                continue
            try:
                fd = os.open(lock, os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            finally:
                os.close(fd)
        return False

    def _dir(self, job_id: str) -> Path:
        d = self.job_dir(job_id)
        if not d.is_dir():   # private: logs and tables may name internal hosts and paths (S-08)
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        return d

    @contextlib.contextmanager
    def _state_lock(self, d: Path):
        fd = os.open(d / ".save.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _disk(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def job_dir(self, job_id: str) -> Path:
        return self.root / check_job_id(job_id)

    def claim(self, job_id: str) -> str:
        """``job_id`` (a generated one), or ``job_id-2``, ``-3``... : the first whose directory this process
        creates. Ids have a one-second clock: two runs started in the same second must not collide."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for n in range(1, 1000):
            jid = job_id if n == 1 else f"{job_id[:76]}-{n}"
            try:
                self.job_dir(jid).mkdir(mode=0o700)
                return jid
            except FileExistsError:
                continue
        raise JobError(f"no free job id like {job_id} in {self.root}", hint="pass --job-id")

    @contextlib.contextmanager
    def keeping(self, claimed: str | None):
        """A claimed id's directory goes again when the command ends before the job's state was saved (a
        refused connection, a failed plan, Ctrl-C at the confirmation): no empty job dirs left behind."""
        try:
            yield
        except BaseException:
            d = self.job_dir(claimed) if claimed else None
            if d is not None and not (d / "state.json").exists():
                with contextlib.suppress(OSError):
                    (d / ".lock").unlink()
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise

    def exists(self, job_id: str) -> bool:
        return (self.job_dir(job_id) / "state.json").is_file()

    def save(self, job: JobState) -> bool:
        """Write job's state unless that would overwrite someone else's newer update (see the class)."""
        d = self._dir(job.job_id)
        path = d / "state.json"
        with self._state_lock(d):
            disk = self._disk(path)
            disk_rev = int(disk.get("rev") or 0) if disk else 0
            if not self._owned_here(job.job_id):
                if self.driven_elsewhere(job.job_id) or (disk is not None and disk_rev != job.rev):
                    if job.state == Status.CANCELLED and disk is not None and disk.get("state") not in TERMINAL:
                        disk.update(state=Status.CANCELLED, error=job.error, rev=disk_rev + 1)   # cancel is kept
                        atomic_write(path, json.dumps(disk, indent=2, sort_keys=True).encode())
                        job.rev = disk_rev + 1
                        return True
                    return False
            elif disk is not None and disk_rev != job.rev:
                if disk.get("state") == Status.CANCELLED and job.state == Status.RUNNING:   # `cancel` said so meanwhile
                    job.state, job.error = Status.CANCELLED, disk.get("error")
                job.fetched = {**(disk.get("fetched") or {}), **job.fetched}
            job.rev = disk_rev + 1
            atomic_write(path, job.to_json().encode())
        for observe in Workspace.observers:
            observe(self, job)
        return True

    def update(self, job_id: str, change) -> JobState:
        """Re-read, change (a function of the JobState), write: for a process that does not drive the job."""
        d = self._dir(job_id)
        with self._state_lock(d):
            job = self.load(job_id)
            change(job)
            job.rev += 1
            atomic_write(d / "state.json", job.to_json().encode())
        return job

    def load(self, job_id: str) -> JobState:
        path = self.job_dir(job_id) / "state.json"
        if not path.is_file():
            raise JobNotFound(f"no job {job_id!r} in workspace {self.root}",
                              hint="run `tune-remote status` to list jobs, or pass --workspace DIR")
        try:
            return JobState.from_dict(json.loads(path.read_text()))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path} is corrupt: {exc}", hint="restore it or remove the job directory") from exc

    def jobs(self) -> list[JobState]:
        out = []
        if self.root.is_dir():
            for d in sorted(self.root.iterdir()):
                if (d / "state.json").is_file():
                    try:
                        out.append(self.load(d.name))
                    except UsageError:
                        continue
        return out


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
