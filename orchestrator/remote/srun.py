"""SrunTransport: wraps the login node's transport and runs each Cmd as a step of a running Slurm job on
one of its nodes: ``srun --overlap --jobid J -N1 -n1 -w NODE sh -c '<inner line>'`` (quoted once, here).

The step shares the job's allocation (``--overlap``), so the container work tune-remote does on a compute
node always runs inside the allocation Slurm granted, on the node Slurm chose. The persistent node helper
is one long-lived step (``open_stream``); one-off commands are one step each.
"""

from __future__ import annotations

from ..errors import AllocationEnded
from .shell import Cmd, render
from .transport import CommandResult, Transport, TransportBase, check_result

# what srun says when the job (the allocation) is over: finished, cancelled, expired from slurmctld's memory
ENDED = (b"has expired", b"Invalid job id", b"Expired or invalid job", b"already completing or completed")

SRUN_PREFIX = ("env", "-u", "SLURM_JOB_ID", "-u", "SLURM_JOBID", "-u", "SLURM_STEP_ID", "srun")


# a step refuses to start work once `cancel` asked for the job (the file exists): nothing new is launched
# while the holder's TERM trap is stopping what runs
GUARD = ('[ -e "$1" ] && { echo "tune-remote: cancel requested for this Slurm job" >&2; exit 143; }; '
         'exec sh -c "$2"')
CANCELLED = b"tune-remote: cancel requested for this Slurm job"


class SrunTransport(TransportBase):
    def __init__(self, inner: Transport, job_id: str, node: str, guard: str | None = None):
        self.inner = inner
        self.job_id = str(job_id)
        self.node = node
        self.guard = guard          # a file on the shared filesystem: while it exists, steps do nothing
        self.label = f"{node}(slurm job {job_id})"

    def wrap(self, cmd: Cmd) -> Cmd:
        argv = [*SRUN_PREFIX, "--overlap", "--quiet", "--jobid", self.job_id, "-N1", "-n1", "-w", self.node,
                "--cpu-bind=none", "sh", "-c"]
        argv += [GUARD, "sh", self.guard, render(cmd)] if self.guard else [render(cmd)]
        return Cmd(tuple(argv))

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        result = self.inner.run(self.wrap(cmd), stdin=stdin, timeout=timeout, check=False)
        if result.exit_code != 0 and any(m in result.stderr for m in ENDED):
            raise AllocationEnded(f"Slurm job {self.job_id} (node {self.node}) has ended",
                                  hint="see `tune-remote status`; its Slurm state is in the report")
        if result.exit_code == 143 and CANCELLED in result.stderr:
            raise AllocationEnded(f"Slurm job {self.job_id} (node {self.node}) is being cancelled",
                                  hint="`tune-remote cancel` asked for it")
        result = CommandResult(cmd, result.exit_code, result.stdout, result.stderr)
        return check_result(result) if check else result

    def open_stream(self, cmd: Cmd):
        """The persistent node helper as one long-lived step (its requests then cost no new step each).
        When the job has ended the step cannot start: the helper falls back to one step per op, and that
        raises AllocationEnded."""
        if not self.inner.streams:
            raise NotImplementedError(f"{self.inner.label} has no long-lived channels")
        return self.inner.open_stream(self.wrap(cmd))

    @property
    def streams(self) -> bool:
        return self.inner.streams

    def connect(self) -> None:
        self.inner.connect()

    @property
    def round_trips(self) -> int:
        return self.inner.round_trips

    def close(self) -> None:
        self.inner.close()
