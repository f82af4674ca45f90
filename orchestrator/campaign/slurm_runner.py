"""The runner of a Slurm campaign's targets: each target's commands run as steps of the Slurm job that holds its
node (``srun --overlap``, remote/srun.py) through a connection to the login node; a sub-job whose Slurm job ended
under it ends ``cancelled`` or ``lost`` saying what Slurm says (slurm.py holds the jobs themselves)."""

from __future__ import annotations

from ..context import Target, docker_exec
from ..errors import AllocationEnded, JobError, TuneRemoteError
from ..inventory import ContainerSpec, NodeSpec, SlurmSpec
from ..remote.pool import Borrowed
from ..remote.srun import SrunTransport
from ..state import Status
from .targets import PooledRunner, TargetRef


def login_transport(spec: SlurmSpec, accept_new_host_key: bool = False):
    from ..remote.openssh import ssh_transport
    from ..remote.sshtarget import SshTarget
    return ssh_transport(SshTarget(spec.login, spec.port, spec.user, spec.identity_file, spec.ssh_config),
                         accept_new_host_key=accept_new_host_key)


class SlurmRunner(PooledRunner):
    """The pooled runner's engine and cancel, with the target opened through ``srun`` on the login node."""

    def __init__(self, spec: SlurmSpec, state: dict, accept_new_host_key: bool = False, *, query):
        super().__init__(accept_new_host_key)
        self.spec = spec
        self.state = state
        self.query = query      # login transport -> the campaign's SlurmSource over it (squeue, scontrol, files)

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
        src = self.query(self.login())
        try:
            if src.cancel_asked(i):
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
        node, container = NodeSpec(name=ref.node, host=self.spec.login, docker=self.spec.docker), \
            ContainerSpec(name=ref.container)
        return Target(node, container, host=host, ctr=docker_exec(host, node, container))  # inside the step
