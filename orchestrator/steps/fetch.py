"""Fetch: pull logs, CSVs and reports home, each verified by sha256 against the node; unchanged files
are not transferred again."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..context import Ctx
from ..errors import CommandTimeout, JobError
from ..nodeside import mounts
from ..remote.shell import Cmd
from ..remote.transport import TransportError, get_file, gzip_failed
from ..state import atomic_write

INLINE_MAX = 4 << 20   # files up to this size come back inside the manifest answer (no extra exec)
GROW_MAX = 256 << 20   # a log read on the host may have grown this much past the manifest's size
Z_BELOW = 0.5          # a big file whose first 256 KiB zlib halves (logs, CSVs) is copied through gzip -1


def _sha(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _size(path: Path) -> int | None:
    return path.stat().st_size if path.is_file() else None


def _name(node_path: str, fallback: str) -> str:
    """A node path's file name as a local name: never empty, '.', '..' or hidden (S-04)."""
    name = os.path.basename(node_path)
    return name if name and not name.startswith(".") else fallback


def manifest_request(ctx: Ctx, paths: list[str]) -> dict:
    """The manifest a poll asks ahead for (``on_end``): every file that fits inline comes with its content (the
    poll cannot know what the local copies will hold once its own bytes are written; a few small files are
    sent twice), a bigger one by sha only (pull copies it if the local copy differs)."""
    return {"paths": paths, "have": {p: None for p in paths}, "inline_max": INLINE_MAX, "sources": True,
            "compress": True}


def wanted_files(ctx: Ctx, dest: Path) -> dict[str, Path]:
    """node path -> local path, for everything a job produced that exists so far."""
    r = ctx.job.remote
    out: dict[str, Path] = {}
    for node_path in (r.logs or {}).values():
        out[node_path] = dest / "logs" / _name(node_path, "step.log")
    if r.pipeline_log:
        out[r.pipeline_log] = dest / "logs" / "pipeline.log"
    if r.tuned_csv:
        out[r.tuned_csv] = dest / os.path.basename(r.tuned_csv)   # prepare.staging_name: a safe name
    fly = (r.get("moe_flydsl") or {}).get("staging")
    if fly:     # run --moe-tuners both: the flydsl path's own staging table (issue 30)
        out[fly] = dest / ("flydsl_" + os.path.basename(fly))
    if r.untuned_csv:
        out[r.untuned_csv] = dest / "untuned" / _name(r.untuned_csv, "untuned.csv")
    if r.tuned_backup:
        out[r.tuned_backup] = dest / "backup" / _name(r.tuned_backup, "backup.csv")
    if r.report_md:
        out[r.report_md] = dest / "logs" / _name(r.report_md, "node_report.md")
    return out


def pull(ctx: Ctx, files: dict[str, Path], *, record: bool = True, writes: list[dict] | None = None) -> dict[str, str]:
    """Copy node files to local paths; returns {node path: 'fetched'|'unchanged'|'missing'}. ``writes``
    (write_files entries) are written on the node first, in the same round trip."""
    if not files:
        return {}
    # one round trip: sizes + sha256 of every file, and the content of the small ones that changed; the laptop
    # hashes its big copies meanwhile (the node never inlines a file of their size, so it needs only the size)
    sizes = {node_path: _size(local) for node_path, local in files.items()}
    big = {node_path: local for node_path, local in files.items() if (sizes[node_path] or 0) > INLINE_MAX}
    have = {node_path: None if node_path in big else _sha(local) for node_path, local in files.items()}
    req = {"paths": list(files), "have": dict(have), "inline_max": INLINE_MAX, "sources": True, "sizes": sizes,
           "compress": True}
    ahead = ctx.prefetched.pop("manifest", None)
    ctx.prefetched.pop("host_mounts", None)     # the host's mounts are read again by each pull that needs them
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(lambda: {node_path: _sha(local) for node_path, local in big.items()})
        if ahead is not None and ahead[0] == list(files) and not writes:   # the poll that saw the end brought it
            manifest = ahead[1]["files"]
        elif writes:
            manifest = ctx.call_batch([("write_files", {"files": writes}), ("manifest", req)])[1]["files"]
        else:
            manifest = ctx.call("manifest", req)["files"]
    have.update(later.result())
    outcome: dict[str, str] = {}
    info = ctx.job.step_state("fetch").info
    info["bytes_last_pull"] = 0     # payload bytes copied (0 when everything was unchanged)
    info["host_reads_last_pull"] = 0   # of those files, how many were read on the host (_copy_verified)
    for node_path, local in files.items():
        meta = manifest.get(node_path)
        if meta is None:
            outcome[node_path] = "missing"
            continue
        sha = meta["sha256"]    # None: a big file that differs for sure, hashed on the node while it is copied
        if sha is not None and have[node_path] == sha:
            outcome[node_path] = "unchanged"
        else:
            data = _inline(meta)
            if data is not None and hashlib.sha256(data).hexdigest() == sha:
                atomic_write(local, data)
                size = len(data)
            else:
                sha, size = _copy_verified(ctx, node_path, local, meta, growing=node_path in _logs(ctx))
            info["bytes_last_pull"] += size
            outcome[node_path] = "fetched"
        if record:
            ctx.job.fetched[node_path] = sha
    return outcome


def _inline(meta: dict) -> bytes | None:
    """A small file's bytes sent inside the manifest answer (zlib-compressed when that made them smaller)."""
    if meta.get("data_z64") is not None:     # inflated no further than the size the manifest gives
        size, inflate = int(meta.get("size") or 0), zlib.decompressobj()
        try:
            data = inflate.decompress(base64.b64decode(meta["data_z64"]), size + 1)
        except (ValueError, zlib.error):
            return None         # copied by stream instead (its sha256 decides)
        return data if inflate.eof and len(data) == size else None
    return base64.b64decode(meta["data_b64"]) if meta.get("data_b64") is not None else None


def _logs(ctx: Ctx) -> set[str]:
    r = ctx.job.remote
    return {*(r.logs or {}).values(), *([r.pipeline_log] if r.pipeline_log else [])}


class _Longer(Exception):
    """More bytes came than the copy may hold: the file changed under us."""


def _stream(transport, path: str, local: Path, limit: int | None = None, *, regular_only: bool = False,
            compress: bool = False) -> tuple[str, str, int, bytes]:
    """``path`` through ``transport`` into a temp file beside ``local``: (temp path, sha256, size, what cat said
    on stderr). Raises _Longer past ``limit`` bytes, if one is given (the temp file is gone then)."""
    fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.")
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as fh:
            def write(chunk: bytes) -> None:
                nonlocal size
                size += len(chunk)
                if limit is not None and size > limit:
                    raise _Longer
                digest.update(chunk)
                fh.write(chunk)
            err = get_file(transport, path, write, regular_only=regular_only, compress=compress)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, digest.hexdigest(), size, err


def _intact(ctx: Ctx, node_path: str, sha: "_NodeSha", got: str, size: int, growing: bool) -> bool:
    """The copy is the node's file (sha256 equal) or, for a log still being written (``growing``), an exact,
    non-empty prefix of it: what was written so far (C-05). Tables must match whole."""
    if got == sha():
        return True
    return growing and size > 0 and ctx.call("prefix_sha", {"path": node_path, "length": size})["sha256"] == got


MOUNTS_MARK = "@@tune-remote: docker inspect .Mounts@@"
# the host's mountinfo, then what docker itself says it mounted into the container (read-only, one exec)
_HOST_MOUNTS = ('cat /proc/self/mountinfo || exit 1; printf "\\n%s\\n" "$1"; c=$2; shift 2; '
                'exec "$@" inspect --format "{{json .Mounts}}" "$c"')


def _host_file(ctx: Ctx, source: dict | None) -> tuple[object, str] | None:
    """(host transport, host path) of a container file stored in a directory the host mounted in, or None
    (own root fs, no docker, a host that cannot say, a path outside what docker mounted into the container:
    the helper's word is not enough). The host's mounts are asked once per pull."""
    ctr = ctx.target.ctr
    inner = ctr.inner
    if not source or inner is None or not ctr.container:      # not a docker exec: no host path to read
        return None
    if "host_mounts" not in ctx.prefetched:   # dropped by each pull; a failed read is asked again next time
        try:
            res = inner.run(Cmd(("sh", "-c", _HOST_MOUNTS, "sh", MOUNTS_MARK, ctr.container, *ctr.docker)),
                            timeout=30, check=False)
        except (TransportError, CommandTimeout):
            return None
        info, mark, inspected = res.text.partition("\n" + MOUNTS_MARK + "\n")
        try:
            sources = [m.get("Source") for m in json.loads(inspected) or []] if res.ok and mark else None
        except (ValueError, AttributeError):
            sources = None
        if not sources:
            return None
        ctx.prefetched["host_mounts"] = (mounts.parse(info), sources)
    found, sources = ctx.prefetched["host_mounts"]
    path = mounts.host_path(source, found)
    return (inner, path) if path and mounts.inside(path, sources) else None


def _node_sha(ctx: Ctx, node_path: str, files: dict | None = None) -> str:
    """The file's sha256 from a manifest answer (``files``; None: asked now, with ``Ctx.call``'s retries)."""
    if files is None:
        files = ctx.call("manifest", {"paths": [node_path]})["files"]
    meta = files.get(node_path)
    if meta is None:
        raise JobError(f"{node_path} went away from the node while it was fetched",
                       hint="run `tune-remote fetch` again")
    return meta["sha256"]


class _NodeSha:
    """The node file's sha256: from the manifest, or (``None`` there) asked in a daemon thread while the copy
    runs, so that hashing on the node and copying overlap. The thread asks the helper once, without the
    retries and reconnects of ``Ctx.call`` (those stay in the main thread: when the thread's request failed,
    calling this asks again there). The helper's lock keeps requests on its channel one at a time."""

    def __init__(self, ctx: Ctx, node_path: str, sha: str | None):
        self.ctx, self.node_path, self.sha = ctx, node_path, sha
        self._files: dict | None = None     # the thread's manifest answer (None: it failed)
        self._thread = None
        if sha is None:
            self._thread = threading.Thread(target=self._ask, name="fetch-sha", daemon=True)
            self._thread.start()

    def _ask(self) -> None:
        try:
            self._files = self.ctx.target.helper.call("manifest", {"paths": [self.node_path]})["files"]
        except Exception:    # noqa: BLE001 - asked again in the main thread, where errors are handled
            pass

    def __call__(self) -> str:
        if self.sha is None:
            self._thread.join()
            self.sha = _node_sha(self.ctx, self.node_path, self._files)
        return self.sha

    def settle(self) -> None:
        """Before another helper request of this thread: the asked hash is in (a fallback then uses it)."""
        if self._thread is not None:
            self._thread.join()


def _copy_verified(ctx: Ctx, node_path: str, local: Path, meta: dict, *, growing: bool = False) -> tuple[str, int]:
    """Stream the node file into ``local`` (a temp name renamed into place once verified; never held in
    memory): (the sha256 it has, its size). A big file in a directory the host mounted into the container is
    read on the host (no ``docker exec`` in the way: ~2x the throughput) when the copy proves intact; any
    other (unreadable there, changed, not the same file) goes through the container. Not fsynced: a copy lost
    to a laptop crash no longer matches the node's sha256, and the next fetch copies it again."""
    local.parent.mkdir(parents=True, exist_ok=True)
    host = _host_file(ctx, meta.get("source"))
    sha = _NodeSha(ctx, node_path, meta["sha256"])
    compress = meta.get("z") is not None and meta["z"] < Z_BELOW
    expect = int(meta.get("size") or 0)
    if host is not None:
        got = _host_copy(ctx, node_path, local, host, sha, expect, growing, compress)
        if got is not None:
            return got
        sha.settle()
    return _ctr_copy(ctx, node_path, local, sha, growing, compress, expect)


def _host_copy(ctx, node_path, local, host, sha, expect, growing, compress) -> tuple[str, int] | None:
    for gz in (True, False) if compress else (False,):     # a host without gzip: plain
        try:
            tmp, got, size, err = _stream(*host, local, expect + (GROW_MAX if growing else 0), regular_only=True,
                                          compress=gz)
        except (_Longer, TransportError, CommandTimeout):
            return None
        try:
            if not err and _intact(ctx, node_path, sha, got, size, growing):
                os.replace(tmp, local)
                ctx.job.step_state("fetch").info["host_reads_last_pull"] += 1
                return got, size
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if not (err and gzip_failed(err)):
            return None
    return None


def _ctr_copy(ctx, node_path, local, sha, growing, compress=False, expect=0) -> tuple[str, int]:
    for attempt in range(3):
        try:    # inflated no further than the file could have grown to (a stream is not a bomb)
            tmp, got, size, err = _stream(ctx.target.ctr, node_path, local, expect + GROW_MAX if compress else None,
                                          compress=compress)
        except _Longer:
            compress = False
            continue
        except (TransportError, CommandTimeout):
            sha.settle()
            ctx.call("version")  # reconnect with back-off, then try again
            continue
        try:
            if _intact(ctx, node_path, sha, got, size, growing):
                os.replace(tmp, local)
                return got, size
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if err and compress and gzip_failed(err):
            compress = False
            continue
        if err:
            raise JobError(f"could not fetch {node_path}: "
                           + err.decode("utf-8", "replace").strip().splitlines()[-1][:200],
                           hint="run `tune-remote fetch` again")
        # the file changed between manifest and copy (a live log): take the newer manifest
        sha = _NodeSha(ctx, node_path, _node_sha(ctx, node_path))
    raise JobError(f"could not fetch {node_path} intact (sha256 mismatch)",
                   hint="run `tune-remote fetch` again")


def report_for_the_node(ctx: Ctx) -> list[dict]:
    """The report step's markdown, for the node's logs dir (once; the report step leaves it to us)."""
    r = ctx.job.remote
    local = ctx.job_dir / "report.md"
    if r.report_md_on_node is not False or not r.report_md or not local.is_file():
        return []
    return [{"path": r.report_md, "content": local.read_bytes().decode("utf-8"), "backup_dir": None}]


def run(ctx: Ctx, dest: Path | None = None) -> dict[str, str]:
    dest = Path(dest) if dest else ctx.job_dir
    writes = report_for_the_node(ctx)
    outcome = pull(ctx, wanted_files(ctx, dest), writes=writes)
    if writes:
        ctx.job.remote.report_md_on_node = True
    fetched = sum(1 for v in outcome.values() if v == "fetched")
    unchanged = sum(1 for v in outcome.values() if v == "unchanged")
    ctx.job.step_state("fetch").info.update(fetched=fetched, unchanged=unchanged, dest=str(dest))
    ctx.ui.event(f"fetched {fetched} file(s), {unchanged} unchanged, into {dest}")
    return outcome
