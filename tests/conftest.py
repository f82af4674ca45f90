"""Shared pytest fixtures. The e2e test bed (tests/fake_remote) is provisioned lazily: only tests that
ask for ``testbed`` / ``make_node`` / ``node`` / ``shared_node`` start a Docker engine and sshds.

Without root/docker/sshd/orchestrator.sim those tests are skipped -- except when ``CI`` is true, where
they FAIL instead (a CI run must never pass by skipping the e2e suite).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# the default store (issue 39: $XDG_DATA_HOME/tune-remote/store.sqlite) of every job the suite runs: one of
# the session's own, never the user's
os.environ["XDG_DATA_HOME"] = __import__("tempfile").mkdtemp(prefix="tune-remote-xdg-")
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.fake_remote import (  # noqa: E402
    ContainerSpec, Node, TestBed, TestbedUnavailable, is_ci, sim_available, sweep_stale,
)

E2E_FIXTURES = {"testbed", "make_node", "node", "shared_node", "slurm_cluster", "postgres"}
_BED_TIMINGS: dict = {}


@pytest.fixture(autouse=True)
def _own_default_store(tmp_path_factory, monkeypatch):
    """Each test starts with an empty default store (issue 39: `--reuse proven` is the default, so a job
    would otherwise be offered the rows an earlier test's job promoted on the same simulated GPU kind)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg")))


def testbed_unavailable(reason: str):
    """Skip (locally) or fail (CI=true) because the e2e test bed cannot run here."""
    if is_ci():
        pytest.fail(f"e2e test bed unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"e2e test bed unavailable: {reason}")


def pytest_collection_modifyitems(config, items):
    # Every test that uses the test bed is an e2e test, marked or not (so `-m "not e2e"` works).
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbed():
    """Session-wide ``TestBed``: Docker engine (started only if none answers), base image, node user.

    Returns the provisioned ``tests.fake_remote.TestBed``; ``testbed.create_node(...)`` makes nodes that
    live until the end of the session. At the end every node it made is removed, and the engine is
    stopped only if this session started it and nothing else uses it (TRTEST_KEEP_ENGINE=1 keeps it).
    """
    if not sim_available():
        testbed_unavailable("orchestrator.sim (the simulated AITER) is not importable")
    sweep_stale()
    bed = TestBed()
    t0 = time.monotonic()
    try:
        bed.provision()
    except TestbedUnavailable as e:
        testbed_unavailable(str(e))
    _BED_TIMINGS.update(bed.timings, provision_wall_s=time.monotonic() - t0)
    try:
        yield bed
    finally:
        t1 = time.monotonic()
        notes = bed.close()
        _BED_TIMINGS.update(teardown_s=time.monotonic() - t1, teardown_notes=notes)


@pytest.fixture(scope="module")
def slurm_cluster(testbed):
    """A real Slurm cluster (munge, slurmctld, two slurmd: ``a`` and ``b``, 8 GRES GPUs each) whose login
    node is a test-bed node; see ``tests/fake_remote/slurm.py``. One per test module."""
    from tests.fake_remote.slurm import SlurmCluster, slurm_available, sweep_stale_clusters
    why = slurm_available()
    if why:
        testbed_unavailable(why)
    sweep_stale_clusters()
    cluster = SlurmCluster(testbed, computes=("a", "b"))
    try:
        cluster.start()
    except TestbedUnavailable as e:
        testbed_unavailable(str(e))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server (Debian's package, run by the test bed itself; tests/fake_remote/postgres.py):
    ``postgres.url`` is a store URL, ``kill()`` crashes it, ``start()`` brings it back. One per test module."""
    from tests.fake_remote.postgres import PostgresServer, postgres_available, sweep_stale_servers
    why = postgres_available()
    if why:
        testbed_unavailable(why)
    sweep_stale_servers()
    server = PostgresServer()
    try:
        server.start()
    except TestbedUnavailable as e:
        testbed_unavailable(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_node(testbed):
    """Factory: ``make_node(*containers, name=None, proxy=True) -> Node``.

    Each ``containers`` entry is "current" / "legacy", an ``orchestrator.sim.SimSpec``, a dict of SimSpec
    kwargs, or a ``tests.fake_remote.ContainerSpec``; no entry = one current/develop container.
    Nodes made here are removed (containers, sshd, proxy, files) when the test ends.
    """
    made: list[Node] = []

    def factory(*containers, name: str | None = None, proxy: bool = True) -> Node:
        t0 = time.monotonic()
        node = testbed.create_node(containers or ("current",), name=name, proxy=proxy)
        _BED_TIMINGS.setdefault("node_up_s", []).append(round(time.monotonic() - t0, 3))
        made.append(node)
        return node

    yield factory
    for node in made:
        testbed.destroy_node(node)


@pytest.fixture
def node(make_node) -> Node:
    """A fresh node with one current-profile, develop-mode container ``<node>-aiter-dev`` behind a proxy."""
    return make_node("current")


@pytest.fixture(scope="session")
def shared_node(testbed) -> Node:
    """Session-wide node, READ-ONLY use (no restarts, no control-file changes, no proxy faults):
    containers ``<node>-aiter-dev`` (current, develop) and ``<node>-aiter-legacy`` (legacy, install)."""
    node = testbed.create_node(
        ("current", ContainerSpec(sim={"profile": "legacy", "install_mode": "install"}, suffix="aiter-legacy")),
        name=f"p{os.getpid()}-shared")
    yield node
    testbed.destroy_node(node)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _BED_TIMINGS:
        return
    t = _BED_TIMINGS
    ups = t.get("node_up_s", [])
    line = (f"test bed: engine {'cold start' if t.get('engine_cold_start') else 'reused'} "
            f"{t.get('engine_s', 0):.2f}s, base image {t.get('base_image_s', 0):.2f}s, "
            f"provision {t.get('provision_wall_s', 0):.2f}s")
    if ups:
        line += f", {len(ups)} nodes (median up {sorted(ups)[len(ups) // 2]:.2f}s)"
    if "teardown_s" in t:
        line += f", teardown {t['teardown_s']:.2f}s"
    terminalreporter.write_line(line)
