"""fetch's host route: a big file in a directory the host mounted into the container is read on the host, and
only kept when it proves to be the node's file (issue 9, fetch near scp speed)."""

import hashlib
import json
import os
import types
from dataclasses import dataclass

import pytest

from orchestrator.context import Ctx, Settings
from orchestrator.nodeside import mounts
from orchestrator.remote.local import LocalTransport
from orchestrator.remote.transport import CommandResult
from orchestrator.state import JobState, Workspace
from orchestrator.steps import fetch
from orchestrator.ui import Ui

# a container started with -v /data/runs:/opt/runs and -v "/srv/my logs":/logs, its root on overlay
CONTAINER = """\
1201 1100 0:123 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A
1202 1201 0:126 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1210 1201 8:1 /data/runs /opt/runs rw,relatime - ext4 /dev/sda1 rw
1211 1201 8:1 /srv/my\\040logs /logs rw,relatime shared:1 - ext4 /dev/sda1 rw
1212 1201 0:50 /tmpdir /scratch rw - tmpfs tmpfs rw
"""
HOST = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 22 0:50 / /run/user/0 rw - tmpfs tmpfs rw
31 22 8:1 /data /mnt/data rw,relatime - ext4 /dev/sda1 rw
"""


def test_a_bind_mounted_file_is_found_on_the_host_and_the_container_root_is_not():
    c, h = mounts.parse(CONTAINER), mounts.parse(HOST)
    src = mounts.source_of("/opt/runs/job1/tuned.csv", c)
    assert src == {"dev": "8:1", "path": "/data/runs/job1/tuned.csv", "fstype": "ext4"}
    assert mounts.host_path(src, h) == "/mnt/data/runs/job1/tuned.csv"     # the deepest host root wins
    logs = mounts.source_of("/logs/server.log", c)
    assert logs["path"] == "/srv/my logs/server.log"                        # octal escapes undone
    assert mounts.host_path(logs, h) == "/srv/my logs/server.log"
    assert mounts.source_of("/tmp/x.csv", c) is None                        # the container's own root fs
    assert mounts.source_of("/opt/runsX/y", c) is None
    assert mounts.host_path(mounts.source_of("/scratch/a", c), h) == "/run/user/0/tmpdir/a"
    assert mounts.host_path({"dev": "9:9", "path": "/a", "fstype": "ext4"}, h) is None
    assert mounts.inside("/mnt/data/runs/job1/tuned.csv", ["/srv/x", "/mnt/data/runs/"])
    assert mounts.inside("/mnt/data/runs", ["/mnt/data/runs"])
    assert not mounts.inside("/mnt/data/runsX/a", ["/mnt/data/runs"])
    assert not mounts.inside("/etc/shadow", ["relative/dir", None, ""])


def test_the_root_mount_is_the_containers_own_whatever_its_driver_and_odd_paths_are_refused():
    plain_root = mounts.parse("1 0 8:2 /var/lib/docker/vfs/dir/abc / rw - ext4 /dev/sda2 rw\n"
                              "2 1 8:1 /data/runs /opt/runs rw - ext4 /dev/sda1 rw\n")
    assert mounts.source_of("/tmp/table.csv", plain_root) is None          # vfs / devicemapper: still its own
    assert mounts.source_of("/opt/runs/a.csv", plain_root)["path"] == "/data/runs/a.csv"
    h = mounts.parse(HOST)
    for bad in ("/data/../etc/shadow", "data/runs/x", "/data//runs/x", "/data/./x", None):
        assert mounts.host_path({"dev": "8:1", "path": bad, "fstype": "ext4"}, h) is None, bad
    undecodable = mounts.parse(b"3 1 8:1 /srv/caf\xe9 /logs rw - ext4 /dev/sda1 rw\n".decode("utf-8",
                                                                                           "surrogateescape"))
    assert mounts.source_of("/logs/x.log", undecodable) is None           # JSON could not carry it


class _Host(LocalTransport):
    """The node's host: its mountinfo says device 7:7 holds ``root`` at the test's host dir."""

    def __init__(self, host_dir):
        super().__init__(label="host")
        self.mountinfo = f"40 1 7:7 /export {host_dir} rw - ext4 /dev/vdb rw\n".encode()
        self.binds = [{"Type": "bind", "Source": str(host_dir), "Destination": "/node"}]   # docker inspect
        self.read = []

    def run(self, cmd, **kw):
        if cmd.argv[:2] == ("sh", "-c") and "/proc/self/mountinfo" in cmd.argv[2]:
            assert cmd.argv[4:] == (fetch.MOUNTS_MARK, "ctr", "docker")     # the container the inventory names
            out = self.mountinfo + f"\n{fetch.MOUNTS_MARK}\n{json.dumps(self.binds)}\n".encode()
            return CommandResult(cmd, 0, out, b"")
        return super().run(cmd, **kw)

    def open_stream(self, cmd):
        self.read.append(cmd.argv[-1])
        return super().open_stream(cmd)


class _Ctr(LocalTransport):
    """The container: reads node paths as they are; remembers what it streamed."""

    def __init__(self, inner):
        super().__init__(label="host/ctr")
        self.inner, self.container, self.docker, self.read = inner, "ctr", ("docker",), []

    def open_stream(self, cmd):
        self.read.append(cmd.argv[-1])
        return super().open_stream(cmd)


@dataclass
class _Ctx(Ctx):
    def call(self, op, request=None, **kw):
        import threading
        self.__dict__.setdefault("ops", []).append(op)
        self.__dict__.setdefault("op_threads", []).append(threading.current_thread().name)
        self.__dict__.setdefault("requests", []).append(request)
        if op == "manifest":      # the hash a lazy manifest left out, asked while the copy runs
            (path,) = request["paths"]
            data = open(path, "rb").read()
            return {"files": {path: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}}
        assert op == "prefix_sha", op
        with open(request["path"], "rb") as f:
            return {"sha256": hashlib.sha256(f.read(request["length"])).hexdigest()}


def _setup(tmp_path, node_bytes, host_bytes, *, log=False):
    node = tmp_path / "node" / "big.bin"
    node.parent.mkdir()
    node.write_bytes(node_bytes)
    if host_bytes is not None:
        (tmp_path / "host").mkdir()
        (tmp_path / "host" / "big.bin").write_bytes(host_bytes)
    host = _Host(tmp_path / "host")
    remote = {"pipeline_log": str(node)} if log else {}
    job = JobState(job_id="j", node="n", container="c", variant="a8w8_blockscale", created=0, request={},
                   remote=remote)
    helper = types.SimpleNamespace(threads=[])

    def helper_call(op, request=None, **kw):   # the hash thread asks the helper directly (no retries)
        import threading
        helper.threads.append(threading.current_thread().name)
        if getattr(helper, "broken", False):
            raise ConnectionError("the channel broke")
        return _Ctx.call(ctx, op, request)
    helper.call = helper_call
    target = types.SimpleNamespace(ctr=_Ctr(host), host=host, helper=helper)
    ctx = _Ctx(job=job, workspace=Workspace(tmp_path / "ws"), target=target, settings=Settings(), ui=Ui(quiet=True))
    meta = {"size": len(node_bytes), "sha256": hashlib.sha256(node_bytes).hexdigest(),
            "source": {"dev": "7:7", "path": "/export/big.bin", "fstype": "ext4"}}
    ctx.prefetched["manifest"] = ([str(node)], {"files": {str(node): meta}})
    return ctx, node, tmp_path / "home" / "big.bin"


def _pull(ctx, node, local):
    out = fetch.pull(ctx, {str(node): local})
    return out[str(node)], ctx.job.step_state("fetch").info["host_reads_last_pull"]


def test_the_host_copy_is_kept_when_it_is_the_node_file(tmp_path):
    data = bytes(range(256)) * 40000
    ctx, node, local = _setup(tmp_path, data, data)
    assert _pull(ctx, node, local) == ("fetched", 1)
    assert local.read_bytes() == data
    assert ctx.target.ctr.read == [] and ctx.target.host.read == [str(tmp_path / "host" / "big.bin")]
    assert [p.name for p in local.parent.iterdir()] == ["big.bin"]            # no temp file left


@pytest.mark.parametrize("binds", [[], [{"Type": "bind", "Source": "/elsewhere"}], None])
def test_a_host_path_outside_what_docker_mounted_into_the_container_is_never_read(tmp_path, binds):
    """The helper in the container names the device and path (it could lie): the host reads only inside the
    directories `docker inspect` says were mounted into that container; else (or when docker cannot say)
    the file comes through the container."""
    data = bytes(range(256)) * 40000
    ctx, node, local = _setup(tmp_path, data, data)
    if binds is None:
        ctx.target.host.binds = "not json ["
    else:
        ctx.target.host.binds = binds
    assert _pull(ctx, node, local) == ("fetched", 0)
    assert local.read_bytes() == data and ctx.target.host.read == [] and ctx.target.ctr.read == [str(node)]


@pytest.mark.parametrize("host_bytes", [b"x" * 6_000_000,          # another file at that place
                                        None,                      # not there / unreadable: cat complains
                                        b"y" * 12_000_000])        # longer than the table: stopped early
def test_anything_but_the_node_file_on_the_host_goes_through_the_container(tmp_path, host_bytes):
    data = b"z" * 6_000_000
    ctx, node, local = _setup(tmp_path, data, host_bytes)
    assert _pull(ctx, node, local) == ("fetched", 0)
    assert local.read_bytes() == data and ctx.target.ctr.read == [str(node)]
    assert [p.name for p in local.parent.iterdir()] == ["big.bin"]


def test_a_log_that_grew_on_the_host_is_kept_as_an_exact_prefix_of_the_node_log(tmp_path):
    written = b"line\n" * 1_200_000
    ctx, node, local = _setup(tmp_path, written, written + b"more\n", log=True)   # the host saw later bytes
    (node).write_bytes(written + b"more\n")                                # ... and so does the node now
    assert _pull(ctx, node, local) == ("fetched", 1)
    assert local.read_bytes() == written + b"more\n"


@pytest.mark.parametrize("host_bytes", ["same", b"w" * 6_000_000])
@pytest.mark.parametrize("broken", [False, True])
def test_a_hash_the_manifest_left_out_is_asked_while_the_copy_runs_and_decides_as_before(tmp_path, host_bytes,
                                                                                         broken):
    data = b"v" * 6_000_000
    ctx, node, local = _setup(tmp_path, data, data if host_bytes == "same" else host_bytes)
    ctx.target.helper.broken = broken                      # the thread's request fails: asked again, with retries
    meta = ctx.prefetched["manifest"][1]["files"][str(node)]
    meta["sha256"] = None                                  # the node's manifest with `sizes`: not hashed yet
    assert _pull(ctx, node, local) == ("fetched", 1 if host_bytes == "same" else 0)
    assert local.read_bytes() == data
    assert ctx.target.helper.threads == ["fetch-sha"]      # asked in the thread, while the copy ran
    assert ctx.ops == ["manifest"]                         # ... and in the main thread only when that failed
    assert ctx.op_threads == ["MainThread" if broken else "fetch-sha"]
    assert ctx.job.fetched[str(node)] == hashlib.sha256(data).hexdigest()


def test_the_host_read_refuses_a_fifo_and_a_symlink(tmp_path):
    from orchestrator.remote.transport import get_file
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "real").write_bytes(b"secret")
    os.symlink(tmp_path / "real", tmp_path / "link")
    for name in ("fifo", "link"):
        got = []
        err = get_file(LocalTransport(), str(tmp_path / name), got.append, timeout=10, regular_only=True)
        assert got == [] and b"not a regular file" in err, name
    got = []
    assert get_file(LocalTransport(), str(tmp_path / "real"), got.append, regular_only=True) == b""
    assert b"".join(got) == b"secret"


@pytest.mark.parametrize("same", [True, False])
def test_a_big_local_copy_is_hashed_while_the_node_answers_and_decides_unchanged_as_before(tmp_path, same):
    data = b"u" * 6_000_000
    ctx, node, local = _setup(tmp_path, data, None)
    del ctx.prefetched["manifest"]                           # the pull asks the node itself
    local.parent.mkdir(parents=True)
    local.write_bytes(data if same else b"t" * len(data))    # the same size: only the hashes can tell
    out = fetch.pull(ctx, {str(node): local})
    (req,) = ctx.requests
    assert req["have"] == {str(node): None} and req["sizes"] == {str(node): len(data)}   # sent before hashing
    assert out[str(node)] == ("unchanged" if same else "fetched") and local.read_bytes() == data
    assert ctx.job.fetched[str(node)] == hashlib.sha256(data).hexdigest()
