"""A Slurm campaign that tunes without the laptop (docs/internals.md, "Slurm, pending"): when ``run --detach``
returns with the holders still pending, the plan is made now (shapes read here, sharded evenly over the holders:
the partition is one GPU kind until the grant says otherwise), one sub-job per (holder, variant) is created, and
each holder's shard goes to the shared filesystem with the package (bundle.py); the holder runs the node driver
(nodedrive.py) once Slurm grants it. ``adopt`` brings the node driver's sub-job states home (``status``,
``resume``): one round trip to the login node for the whole campaign.

A pending sub-job is named before its node is known: ``<job>.slurm<i>.<cluster>.<variant>`` (sub_job_id), on the
placeholder node ``tr-<job>-<i>`` (the holder's Slurm job name) until the grant names the node.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import fields

from ..session import NodeSession, Settings
from ..errors import UsageError
from ..remote.shell import Cmd, sh
from ..state import TERMINAL, JobState, Workspace
from ..ui import Ui
from . import driver
from .bundle import package_zip
from .merge import sub_workspace
from .targets import TargetRef

PENDING_KIND = "(pending grant)"


def blocker(request) -> str | None:
    """Why the plan cannot be made before a node runs (None: it can): shapes read on a node, or shaped by it."""
    if "auto" in (request.get("variants") or []):
        return "--variant auto finds its variants in the logs on a node"
    if [lg for lg in request.get("logs") or [] if not lg.startswith("local:")]:
        return "logs on the nodes are read there"
    if request.get("model"):
        return "--model's shapes depend on the node's GPU"
    if request.get("budget"):
        return "--budget is fitted to the GPUs Slurm grants"
    return None


def local_shapes(job: JobState, variant: str) -> list[dict]:
    """The variant's shapes from the local sources (--shapes-csv, local: logs, --nk), as a plan's mining finds
    them, without a target."""
    from ..records import Facts, JobRequest, NodePaths
    from ..steps.shape_sources import ShapeSearch, find
    session = NodeSession(None, Settings(), Ui(quiet=True), facts=Facts())     # no node: local sources only
    found, _ = find(ShapeSearch(session, JobRequest.from_dict(dict(job.request)), variant, NodePaths(),
                                lambda n: None, dict))
    return found


def pending_plan(job: JobState, state: dict) -> dict:
    """The plan's form (``driver.make_plan``'s) over the holders, equal weights, labels ``tr-<job>-<i>/pending``."""
    from .plan import shard
    refs = {TargetRef(s["name"], "pending"): i for i, s in sorted(state["jobs"].items(), key=lambda kv: int(kv[0]))}
    out = {"variants": {}, "excluded": [], "unreachable": [], "facts": {r.label: {} for r in refs},
           "repeats": job.request.get("repeats")}
    for variant in job.request["variants"]:
        rows = local_shapes(job, variant)
        if not rows:
            out["excluded"].append(f"{variant}: no untuned shapes found")
            continue
        out["variants"][variant] = {PENDING_KIND: {r.label: s for r, s in shard(rows, dict.fromkeys(refs, 1)).items()}}
    if not out["variants"]:
        raise UsageError("no shapes to tune for " + ", ".join(job.request["variants"]),
                         hint="check --variant and the shape sources")
    return out


def ship(job: JobState, workspace: Workspace, source, plan: dict, lines: list[str]) -> None:
    """Create the plan's sub-jobs and put each holder's shard and the bundle on the shared filesystem (one
    round trip); the holder starts its node driver once its shard's ``ready`` is there."""
    state = source.state
    index = {s["name"]: i for i, s in state["jobs"].items()}
    subs = driver.create_sub_jobs(job, workspace, plan, name=lambda ref, variant: driver.sub_job_id(
        job.job_id, TargetRef(f"slurm{index[ref.node]}", source.spec.name), variant))
    subws = sub_workspace(workspace, job)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "drive.zip", package_zip())
        for i, shard in state["jobs"].items():
            mine = [s for s in subs if s.node == shard["name"]]
            shard["subs"] = [s.job_id for s in mine]
            for s in mine:
                subws.save(s)
                _add(tar, f"{i}/drive/{s.job_id}/state.json", s.to_json().encode())
                with open(s.request.shapes_csv, "rb") as fh:
                    _add(tar, f"{i}/drive/shards/{s.job_id}.csv", fh.read())
            _add(tar, f"{i}/drive/order.json", json.dumps({"job": job.job_id, "subs": shard["subs"]}).encode())
        for i, shard in state["jobs"].items():       # last: the holder starts the node driver once it is there
            if shard["subs"]:
                _add(tar, f"{i}/drive/ready", b"")
    source.login.run(Cmd(("tar", "-C", state["dir"], "-xf", "-")), stdin=buf.getvalue(), timeout=300)
    state["pending_plan"] = True
    camp = job.request.campaign
    camp.sub_jobs, camp.plan_lines, camp.unreachable = [s.job_id for s in subs], lines, []
    camp.kinds = {}                     # known once the node's discover says (driver.fill_kinds)
    job.variant = ",".join(plan["variants"])
    job.step = "remote"
    source.save()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(data))


# every shard's node, grant, node-driver exit code and log, and its sub-jobs' states, as one tar on stdout
_COLLECT = ('cd "$1" || exit 0; shift; set -- $(for i; do for f in "$i/node" "$i/gpus" "$i/drive.rc" '
            '"$i/drive.log" "$i"/drive/*/state.json; do [ -f "$f" ] && printf "%s\\n" "$f"; done; done); '
            '[ $# -gt 0 ] && exec tar -cf - "$@"; exit 0')


def collect(source) -> dict[str, bytes]:
    """The shards' files (path under the campaign's directory -> bytes), in one login round trip."""
    state = source.state
    res = source.login.run(sh(_COLLECT, state["dir"], *sorted(state["jobs"], key=int)), timeout=120, check=False)
    out: dict[str, bytes] = {}
    if res.exit_code != 0 or not res.stdout:
        return out
    try:
        with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    out[m.name] = tar.extractfile(m).read()
    except tarfile.TarError:
        return {}
    return out


def adopt(job: JobState, workspace: Workspace, source, ui, wait_s: float = 0.0) -> bool:
    """Bring the node drivers' sub-job states into the local sub-workspace (a launched sub-job's state, never
    over a local one that has a run dir already), and name each granted shard's node on its sub-jobs. With
    ``wait_s`` (resume): first wait for node drivers still launching (no ``drive.rc`` while the holder runs),
    so the laptop never carries a sub-job the node is launching. True when something changed."""
    state = source.state
    if not state.get("pending_plan"):
        return False
    files = collect(source)
    deadline, said = time.monotonic() + wait_s, set()
    while wait_s:
        busy = [i for i, s in state["jobs"].items() if s.get("subs") and f"{i}/node" in files
                and f"{i}/drive.rc" not in files]
        live = source.squeue() if busy else {}
        busy = [i for i in busy if state["jobs"][i].get("id") in live]
        if not busy or time.monotonic() > deadline:
            break
        for i in set(busy) - said:
            ui.event(f"slurm: the node driver of {state['jobs'][i]['name']} is still launching; waiting for it")
        said |= set(busy)
        time.sleep(2.0)
        files = collect(source)
    subws = sub_workspace(workspace, job)
    changed = False
    for i, shard in state["jobs"].items():
        node = (files.get(f"{i}/node") or b"").decode().strip()
        if node and not shard.get("node"):
            shard["node"] = node
            shard["gpus"] = [int(g) for g in (files.get(f"{i}/gpus") or b"").decode().replace(",", " ").split()
                             if g.isdigit()]
            changed = True
        rc = (files.get(f"{i}/drive.rc") or b"").decode().strip()
        if rc and rc != "0" and shard.get("drive_rc") != rc:
            log = (files.get(f"{i}/drive.log") or b"").decode("utf-8", "replace").strip().splitlines()
            ui.event(f"slurm: the node driver on {node or shard['name']} ended with {rc}"
                     + (f" ({log[-1]})" if log else "") + "; this machine carries what it left")
        shard["drive_rc"] = rc or None
        for sid in shard.get("subs") or []:
            changed |= _adopt_one(subws, sid, files.get(f"{i}/drive/{sid}/state.json"), node,
                                  source.spec.container_on(node) if node else None, shard.get("gpus"))
    if changed:
        source.save()
    return changed


def _adopt_one(subws: Workspace, sid: str, raw: bytes | None, node: str, container: str | None, gpus) -> bool:
    local = subws.load(sid)
    if local.state in TERMINAL or local.remote.get("run_dir"):
        return False
    theirs = JobState.from_dict(json.loads(raw)) if raw else None
    if theirs is not None and theirs.remote.get("run_dir"):
        def take(job: JobState) -> None:
            csv = job.request.shapes_csv
            for f in fields(JobState):
                if f.name != "rev":
                    setattr(job, f.name, getattr(theirs, f.name))
            job.request["shapes_csv"] = csv        # the laptop's copy of the shard
        subws.update(sid, take)
        return True
    if node and local.node != node:            # granted: the laptop carries it there if the node driver did not
        def place(job: JobState) -> None:
            job.node, job.container = node, container
            job.request["gpus"] = list(gpus or []) or None
        subws.update(sid, place)
        return True
    return False
