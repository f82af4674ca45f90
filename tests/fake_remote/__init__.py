"""The tune-remote test bed: real sshd + Docker containers with a simulated AITER inside.

Quick use (pytest): see the fixtures in ``tests/conftest.py`` (``testbed``, ``make_node``, ``node``).
People: ``python -m tests.fake_remote up [--name NAME] [--profile current|legacy|newest] [--json]`` and
``python -m tests.fake_remote down --name NAME``. Details: ``tests/fake_remote/README.md``.
"""

from .bigfiles import LogFill, write_log
from .node import Container, ContainerSpec, Node
from .provision import LABEL, OWNER_LABEL, PREFIX, STATE_ROOT, TestbedUnavailable, is_ci
from .proxy import FaultProxy
from .testbed import TestBed, node_name, sim_available, sweep_stale

__all__ = [
    "Container", "ContainerSpec", "FaultProxy", "LABEL", "LogFill", "Node", "OWNER_LABEL", "PREFIX",
    "STATE_ROOT", "TestBed", "TestbedUnavailable", "is_ci", "node_name", "sim_available", "sweep_stale",
    "write_log",
]
