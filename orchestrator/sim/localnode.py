"""Run commands "inside" a locally installed simulated node (no docker, no ssh).

Used by ``tune-remote demo`` and by the sim's own tests. The node must have been installed with
``target_dir`` equal to its host directory (the default of ``sim.install``).
"""

from __future__ import annotations

import os
import subprocess
from typing import Mapping, Sequence

from . import SimInstall

# variables passed through from the caller's environment (everything else is dropped, like a fresh
# `docker exec` shell would)
_PASS = ("HOME", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR")


def node_env(inst: SimInstall, extra: Mapping[str, str] | None = None) -> dict:
    env = {k: os.environ[k] for k in _PASS if k in os.environ}
    env.update(inst.env)
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def run(inst: SimInstall, argv: Sequence[str] | str, cwd: str | None = None,
        env: Mapping[str, str] | None = None, timeout: float | None = None, check: bool = False,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run argv (a list, or a string for /bin/sh -c) in the node; stdout/stderr captured as text.

    cwd defaults to the node's AITER root (where AITER's relative default paths resolve).
    """
    if isinstance(argv, str):
        argv = ["/bin/sh", "-c", argv]
    return subprocess.run(list(argv), cwd=cwd or inst.aiter_root, env=node_env(inst, env), timeout=timeout,
                          check=check, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


def popen(inst: SimInstall, argv: Sequence[str] | str, cwd: str | None = None,
          env: Mapping[str, str] | None = None, **kw) -> subprocess.Popen:
    """Start argv in the node without waiting (own session, so it can be killed as a group)."""
    if isinstance(argv, str):
        argv = ["/bin/sh", "-c", argv]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.STDOUT)
    kw.setdefault("start_new_session", True)
    return subprocess.Popen(list(argv), cwd=cwd or inst.aiter_root, env=node_env(inst, env),
                            universal_newlines=True, **kw)


def python(inst: SimInstall, script: str, *args: str, **kw) -> subprocess.CompletedProcess:
    """`python3 <script> args...` in the node (script relative to the AITER root or absolute)."""
    return run(inst, ["python3", script, *args], **kw)
