"""The test bed's daemons left by a pytest session that died are found by their command line and stopped; those
of a live session are left alone (tests/fake_remote/procs.stale_daemons, for PostgreSQL and Slurm)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.fake_remote.postgres import sweep_stale_servers
from tests.fake_remote.slurm import sweep_stale_clusters


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _daemon(name: str, flag: str, path: str) -> subprocess.Popen:
    """A process whose command line reads ``name ... flag path`` (a postmaster's -D, a slurmd's -f)."""
    return subprocess.Popen([name, "-c", "import sys; sys.stdin.read()", flag, path], executable=sys.executable,
                            stdin=subprocess.PIPE)


def test_daemons_of_a_dead_session_are_stopped_and_a_live_sessions_are_not(tmp_path):
    dead, live = _dead_pid(), os.getpid()
    orphan_pg = _daemon("postgres", "-D", f"{tmp_path}/pytest-{dead}/pg/data")
    kept_pg = _daemon("postgres", "-D", f"{tmp_path}/pytest-{live}/pg/data")
    orphan_slurm = _daemon("slurmd", "-f", f"{tmp_path}/pytest-{dead}/slurm/slurm.conf")
    kept_slurm = _daemon("slurmctld", "-f", f"{tmp_path}/pytest-{live}/slurm/slurm.conf")
    try:
        assert sweep_stale_servers(tmp_path) == [orphan_pg.pid]
        assert sweep_stale_clusters(tmp_path) == [f"slurmd[{orphan_slurm.pid}]"]
        assert orphan_pg.wait(timeout=10) != 0 and orphan_slurm.wait(timeout=10) != 0
        assert kept_pg.poll() is None and kept_slurm.poll() is None
    finally:
        for p in (orphan_pg, kept_pg, orphan_slurm, kept_slurm):
            if p.poll() is None:
                p.kill()
                p.wait()
