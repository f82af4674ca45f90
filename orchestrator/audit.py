"""`tune-remote audit` below its command line: the tuned tables (CSV files here, or the live tables of a node's
container read over a node session) and their findings (the rules: parsing/audit.py). ``node_session`` is the
session a one-off op outside a job opens on an inventory node's container (audit, ``shapes --node``)."""
from __future__ import annotations

import base64
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field

from .errors import JobError, UsageError

TABLE_DIRS = ("aiter/configs", "aiter/configs/model_configs")


@dataclass
class Audit:
    findings: list            # {"kind", "file", "key", "detail"} each (+ "promoted_by" with the team's store)
    tables: list              # (label, DataFrame) audited
    notes: list = field(default_factory=list)   # what the reader should know (tables an env variable names, ...)
    facts: dict = field(default_factory=dict)   # --node: the node's gfx, cu_num, AITER version and commit


def audit(files=(), cu_nums=(), *, inventory_path=None, node: str | None = None,
          container: str | None = None, team: list | None = None, workspace=None) -> Audit:
    """The findings of ``files`` (``cu_nums``: the serving GPU's), or of the live tables of ``node``'s
    container (its GPUs give the cu_num, its level-0 guard the errRatio bound, its probed merge rule whether a
    duplicate key is a fault). ``team``: the rows the team's store says are live on ``node``
    (``store.query.promoted_on``; None: no store): each finding says which job and laptop promoted its row
    (``promoted_by``), and a row the store lists that the live tables lack is a ``missing_row`` finding."""
    from .parsing.audit import UPSTREAM_GUARD_ERR_BOUND, audit_tables, shadowed_rows
    merged_as, bound, whose, notes, facts = None, UPSTREAM_GUARD_ERR_BOUND, "upstream's level-0 guard", [], {}
    rule = "raise"          # offline: the rule of every AITER from v0.1.12 to v0.1.30
    objectives = None
    if node:
        tables, cu_nums, gfx, merged_as, node_bound, notes, facts = live_tables(inventory_path, node, container)
        rule = facts["merge_rule"]
        if node_bound is not None:
            bound, whose = node_bound, "the node's level-0 guard"
        if rule == "resolve":       # probed (issue 36): a duplicate key is no fault there, which row wins is said
            notes = notes + shadowed_rows(tables, merged_as)
        if workspace is not None:
            objectives = promoted_objectives(workspace, node, container)
    else:
        from .parsing.csvtools import LEGACY_CU_NUM_TO_GFX
        tables = [(p, tuned_table(p)) for p in files]
        gfxs = {LEGACY_CU_NUM_TO_GFX.get(c) for c in cu_nums}     # rows of another gfx: the wheel's, for other GPUs
        gfx = gfxs.pop() if len(gfxs) == 1 else None
    findings = audit_tables(tables, cu_nums, gfx, merged_as, err_bound=bound, bound_from=f"{whose} bound",
                            merge_rule=rule, objectives=objectives, skipped=notes)
    if node and team is not None:
        from .audit_team import missing_rows, provenance
        team = [t for t in team if t["node"] == node and t.get("container") in (None, facts["container"])]
        findings = provenance(findings, team) + missing_rows(tables, team)
    return Audit(findings, tables, notes, facts)


def audit_fleet(inventory_path, node: str, container: str | None, team_of, written, say) -> dict:
    """`audit --all-nodes`: every node of the GPU kind of ``node``, each audited (a node that fails is said
    and the others go on); ``team_of(nodes)``: the store's live rows (None: no store); ``written(res, node)``
    after each node; ``say(line)``: a note. {"findings" (each with "node"), "failed" (errors), "tables",
    "audited"}."""
    from .errors import TuneRemoteError
    from .fleet import lacks, probe_container, same_kind
    from .inventory import load_inventory
    inventory = load_inventory(inventory_path)
    fleet = same_kind(inventory, [node], container)
    team = team_of(fleet.nodes)
    say(f"--all-nodes: {len(fleet.nodes)} node(s) of {fleet.kind_text()}: " + ", ".join(fleet.nodes))
    for s in fleet.skipped:
        say(f"{s['node']}: skipped, {s['why']}")
    out: dict = {"findings": [], "failed": [], "tables": 0, "audited": 0}
    for n in fleet.nodes:
        why = lacks(inventory.node(n), container)
        if why:
            say(f"{n}: skipped, {why}")
            continue
        try:
            res = audit(inventory_path=inventory_path, node=n, container=probe_container(inventory.node(n), container),
                        team=team)
        except TuneRemoteError as exc:
            out["failed"].append(exc)
            say(f"{n}: failed, {exc.one_line()}")
            continue
        if team is not None:
            written(res, n)
        for note in res.notes:
            say(f"{n}: {note}")
        out["findings"] += [{**f, "node": n} for f in res.findings]
        out["tables"], out["audited"] = out["tables"] + len(res.tables), out["audited"] + 1
    return out


def promoted_objectives(ws, node: str, container: str | None) -> dict:
    """{table label: {row key: the fused-MoE objective of the job that promoted it}} from the workspace's
    promotion records (issue 36: copied_us never compares a MoE us across the tuner's objective change)."""
    from .recheck.rows import all_jobs, promoted_rows
    from .shapelib.text import key_text
    out: dict = {}
    for r in promoted_rows(all_jobs(ws), node, container):
        obj = (r.facts or {}).get("moe_objective") if "token" in r.key else None
        if obj is None:
            continue
        label = r.live.rsplit("/aiter/configs/", 1)[-1]
        label = r.live if label == r.live else "aiter/configs/" + label
        key = frozenset((k, key_text(v)) for k, v in r.node_key().items() if k != "gfx")
        out.setdefault(label, {})[key] = obj
    return out


@contextmanager
def node_session(inventory_path, node: str, container: str | None):
    """A connected NodeSession on an inventory node's container, for one-off ops outside a job (audit,
    ``shapes --node``), and the target's ref; its connection errors keep their exit codes."""
    from .campaign.targets import InventorySource
    from .inventory import load_inventory
    from .session import NodeSession, Settings
    from .ui import Ui
    source = InventorySource(load_inventory(inventory_path), [node], container)
    ref = source.targets()[0]
    runner = source.runner()
    target = runner.open(ref)
    try:
        target.connect()
        yield NodeSession(target, Settings(), Ui(quiet=True), node=ref.node), ref
    finally:
        target.close()
        runner.close()


def config_env_tables(env_vars: dict, root: str) -> tuple[dict, list[str]]:
    """The tables the container's ``AITER_CONFIG_*`` variables name, as AITER reads them: a ``:`` list that AITER
    merges (and then neither the default table nor model_configs/), a relative path resolved against the aiter
    root (the server's working directory in the usual launch). Returns {path: variable} and notes."""
    out, notes = {}, []
    for var, value in sorted(env_vars.items()):
        if not var.startswith("AITER_CONFIG_") or not value:
            continue
        for p in (p for p in str(value).split(":") if p):
            if not p.startswith("/"):
                notes.append(f"{var}: {p} is relative; AITER resolves it against the server's working directory, "
                             f"audited as {root}/{p}")
                p = f"{root}/{p}"
            out.setdefault(p, var)
    return out, notes


def live_tables(inventory_path, node: str, container: str | None):
    """The tuned tables of the container's AITER (``aiter/configs`` and its ``model_configs``) and those its
    ``AITER_CONFIG_*`` variables name, the cu_num and gfx of its GPUs, and which set AITER merges each env table
    with, the errRatio bound of the node's level-0 guard (None: it ships none, or none with that check), the
    notes and the node's probed duplicate-key merge rule: discover, then two manifest round trips (the listing, then the files and the guard inline)."""
    import pandas as pd

    from .parsing.audit import GUARD_FILE, guard_err_bound
    from .parsing.csvtools import read_tuned_csv
    with node_session(inventory_path, node, container) as (session, ref):
        # the merge's duplicate-key rule rides along (nodeside/mergeprobe.py: the node's own merge, run on two
        # scratch tables); None: not told, today's rule
        merge = {"aiter_core": "{root}/aiter/jit/core.py", "python": session.target.container.python}
        facts = session.call("discover", session.discover_request(riders={"probe": merge}))
        root = facts.get("aiter_root")
        if not root:
            raise JobError(f"no aiter installation found in {ref.label}",
                           hint="set aiter_path for this container in inventory.yaml")
        dirs = [f"{root}/{d}" for d in TABLE_DIRS]
        listing = session.call("manifest", {"paths": dirs, "recursive": False}).get("dirs") or {}
        paths = [f"{d}/{name}" for d in dirs for name in listing.get(d) or []
                 if name.endswith(".csv") and "tuned" in name and "untuned" not in name]
        named, notes = config_env_tables({**(facts.get("env") or {}), **session.target.container.env}, root)
        paths += [p for p in named if p not in paths]
        guard = f"{root}/{GUARD_FILE}"
        asked = paths + [guard]
        got = session.call("manifest", {"paths": asked, "have": {p: "" for p in asked}, "inline_max": 16 << 20,
                                        "compress": True}).get("files") or {}
    guard_text = inline_text(got.get(guard) or {})
    cu = {c for c in [facts.get("cu_num"), *(facts.get("cu_nums") or [])] if isinstance(c, int)}
    tables, merged_as = [], {}
    for p in paths:
        meta = got.get(p) or {}
        label = p.removeprefix(f"{root}/")
        if p in named:
            merged_as[label] = named[p]
            if not meta or meta.get("missing") or meta.get("exists") is False:
                notes.append(f"{named[p]} names {p}, which is not in the container")
                continue
        text = inline_text(meta)
        if text is None:
            raise JobError(f"{ref.label}: {p} did not come back (too big or gone)", hint="audit a copy of it offline")
        tables.append((label, read_tuned_csv(text) if text.strip() else pd.DataFrame()))
    rule = (((facts.get("riders") or {}).get("probe") or {}).get("answer") or {}).get("merge_rule") or "raise"
    kind = {"gfx": facts.get("gfx"), "cu_num": facts.get("cu_num"), "version": facts.get("version"),
            "git_commit": facts.get("git_commit"), "container": ref.container, "merge_rule": rule}
    return tables, sorted(cu), facts.get("gfx"), merged_as, guard_err_bound(guard_text), notes, kind


def inline_text(meta: dict) -> str | None:
    """A manifest answer's inline file content, or None (missing, too big)."""
    if "data_z64" in meta:
        data = zlib.decompress(base64.b64decode(meta["data_z64"]))
    elif "data_b64" in meta:
        data = base64.b64decode(meta["data_b64"])
    else:
        return None
    return data.decode("utf-8", "replace")


def tuned_table(path: str):
    """A tuned table, or one line (exit 2) saying what the file is not: an untuned CSV, a comparison.csv or
    a Markdown file were diffed/merged as if they were tables (NaN rows, '118 duplicates', an internal error)."""
    import pandas as pd

    from .parsing.csvtools import read_tuned_csv
    try:
        df = read_tuned_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not a CSV: {str(exc).strip().splitlines()[-1][:120]}",
                         hint="csv diff/merge take AITER tuned tables, e.g. aiter/configs/a8w8_tuned_gemm.csv") from None
    cols = set(df.columns)
    result = cols & {"us", "kernelName", "kernelName1"}
    if not result or not cols & {"M", "token"}:
        raise UsageError(f"{path} is not an AITER tuned table (its header has no " +
                         ("M or token key" if result else "us or kernelName column") + ")",
                         hint="csv diff/merge take tuned tables (…_tuned_gemm.csv, tuned_fmoe.csv), not untuned "
                              "CSVs or a job's comparison.csv")
    return df
