"""Job state on the laptop: a cache of the node's truth, saved atomically as <workspace>/<job>/state.json."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import JobNotFound, UsageError

TERMINAL = ("succeeded", "failed", "cancelled", "lost")
JOB_STATES = ("running",) + TERMINAL
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
    status: str = "pending"          # pending | running | done | failed | skipped
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
    request: dict                      # what the user asked for (flags), never secrets
    state: str = "running"
    step: str = "discover"
    steps: dict[str, StepState] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)      # discover output
    remote: dict = field(default_factory=dict)     # node paths: job dir, logs, csvs, run dir
    shapes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    fetched: dict = field(default_factory=dict)    # node path -> sha256 of the local copy

    def step_state(self, name: str) -> StepState:
        return self.steps.setdefault(name, StepState())

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "JobState":
        steps = {k: StepState(**v) for k, v in data.pop("steps", {}).items()}
        return cls(steps=steps, **data)


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root)

    def job_dir(self, job_id: str) -> Path:
        return self.root / check_job_id(job_id)

    def exists(self, job_id: str) -> bool:
        return (self.job_dir(job_id) / "state.json").is_file()

    def save(self, job: JobState) -> None:
        d = self.job_dir(job.job_id)
        if not d.is_dir():   # private: logs and tables may name internal hosts and paths (S-08)
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(d / "state.json", job.to_json().encode())

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
