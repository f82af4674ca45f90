"""The one error tree and exit-code enum of tune-remote; the CLI maps every error to one line + a code."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses of every tune-remote command (documented in README.md)."""

    OK = 0
    JOB_FAILED = 1          # the job (or the requested operation on it) failed
    USAGE = 2               # bad arguments / inventory / input files; nothing ran remotely but a read-only look
    CONNECT = 3             # cannot connect or authenticate, or host key refused
    INTERRUPTED = 130       # Ctrl-C on the laptop; the remote job is untouched, `resume` continues it
    CONNECTION_LOST = 75    # EX_TEMPFAIL: connection lost and not re-established; `resume` continues


class TuneRemoteError(Exception):
    """Base of every error the CLI turns into one line and an exit code.

    ``hint`` is a short sentence telling the user what to do next.
    """

    exit_code: ExitCode = ExitCode.JOB_FAILED

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class UsageError(TuneRemoteError):
    """Bad command line, inventory, variant or input file. Raised before anything remote runs, or after a
    read-only look found the input wrong (a log path not in the container)."""

    exit_code = ExitCode.USAGE


class InventoryError(UsageError):
    """inventory.yaml is missing, malformed, or does not name the node/container."""


class ConnectError(TuneRemoteError):
    """SSH connection or authentication failed, or the host key was refused."""

    exit_code = ExitCode.CONNECT


class HostKeyError(ConnectError):
    """The node's host key is unknown (and not accepted) or does not match known_hosts."""


class ConnectionLost(TuneRemoteError):
    """An established connection dropped and could not be re-established in time."""

    exit_code = ExitCode.CONNECTION_LOST


class AllocationEnded(ConnectionLost):
    """The Slurm job holding a target's allocation has ended: nothing can run there any more. A ConnectionLost,
    so that watch loops stop retrying at once; the Slurm runner turns it into the target's end (cancelled or
    lost), never into a resume."""

    exit_code = ExitCode.JOB_FAILED


class ObserverError(TuneRemoteError):
    """Watching a job failed (the helper crashed, the node answered garbage or too slowly) for longer than the
    retry window. It says nothing about the job itself: the job stays `running` and `resume` re-attaches."""


class CommandTimeout(TuneRemoteError):
    """A remote command did not finish in time while the connection itself worked (not exit 75)."""


class RemoteCommandError(TuneRemoteError):
    """A short remote command exited non-zero (the transport itself worked)."""

    def __init__(self, message: str, *, result=None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.result = result


class JobError(TuneRemoteError):
    """The tuning job failed (a step failed, the node refused the work, results unusable)."""


class JobNotFound(UsageError):
    """No job with that id in the workspace."""
