"""`tune-remote audit`: the defects of tuned tables, offline on CSV files or live in a node's container."""
from __future__ import annotations

import base64
import json
import zlib
from contextlib import contextmanager

import click

from ..errors import ExitCode, JobError, UsageError
from .base import cli

TABLE_DIRS = ("aiter/configs", "aiter/configs/model_configs")


@cli.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, exists=True))
@click.option("--node", default=None, metavar="NODE", help="audit the live tables of this inventory node")
@click.option("--container", default=None, metavar="NAME", help="with --node: the container (if it has several)")
@click.option("--cu-num", "cu_nums", type=click.IntRange(1), multiple=True, metavar="N",
              help="offline: the serving GPU's cu_num (repeatable); its gfx's rows for another cu_num are findings")
@click.option("--json", "as_json", is_flag=True, help='print a JSON list of {"kind", "file", "key", "detail"}')
@click.pass_obj
def audit(env, files, node, container, cu_nums, as_json):
    """Tuned tables checked for copied us, unparsable FlyDSL names, duplicate keys across merged files,
    foreign cu_num rows and errRatio over upstream's level-0 guard (errRatio > 0.2; with --node, the bound of the
    node's own op_tests/tuning_tests/test_csv_validation.py). Exit 0 clean, 1 findings, 2 bad input."""
    from ..parsing.audit import audit_tables
    if bool(files) == bool(node):
        raise UsageError("give tuned CSV files or --node, not both" if files else "nothing to audit",
                         hint="tune-remote audit aiter/configs/*_tuned_*.csv, or tune-remote audit --node NODE")
    if container and not node:
        raise UsageError("--container applies to --node", hint="tune-remote audit --node NODE --container NAME")
    if node and cu_nums:
        raise UsageError("--cu-num is for files: with --node the node's GPUs give it", hint="drop --cu-num")
    from ..parsing.audit import UPSTREAM_GUARD_ERR_BOUND
    merged_as, bound, whose = None, UPSTREAM_GUARD_ERR_BOUND, "upstream's level-0 guard"
    if node:
        tables, cu_nums, gfx, merged_as, node_bound = _live_tables(env, node, container)
        if node_bound is not None:
            bound, whose = node_bound, "the node's level-0 guard"
    else:
        from ..parsing.csvtools import LEGACY_CU_NUM_TO_GFX
        tables = [(p, tuned_table(p)) for p in files]
        gfxs = {LEGACY_CU_NUM_TO_GFX.get(c) for c in cu_nums}     # rows of another gfx: the wheel's, for other GPUs
        gfx = gfxs.pop() if len(gfxs) == 1 else None
    findings = audit_tables(tables, cu_nums, gfx, merged_as, err_bound=bound,
                            bound_from=f"{whose} bound")
    if as_json:
        click.echo(json.dumps(findings))
    elif findings:
        click.echo(_table(findings))
    else:
        click.echo(f"clean: {len(tables)} table(s), {sum(len(t) for _, t in tables)} row(s)", err=True)
    if findings:
        raise SystemExit(ExitCode.JOB_FAILED)


def _table(findings: list[dict]) -> str:
    rows = [(f["kind"], f["file"], " ".join(f"{k}={v}" for k, v in f["key"].items()), f["detail"]) for f in findings]
    head = ("kind", "file", "key", "detail")
    width = [max(len(r[i]) for r in rows + [head]) for i in range(3)]
    fmt = "  ".join(f"{{:{w}}}" for w in width) + "  {}"
    return "\n".join(fmt.format(*r).rstrip() for r in [head] + rows)


@contextmanager
def node_ctx(env, node: str, container: str | None):
    """A connected Ctx on an inventory node's container, for one-off ops outside a job (audit, shapes --node);
    its connection errors keep their exit codes."""
    from ..campaign.targets import InventorySource
    from ..context import Ctx, Settings
    from ..inventory import load_inventory
    from ..state import JobState
    from ..ui import Ui
    source = InventorySource(load_inventory(env.inventory_path), [node], container)
    ref = source.targets()[0]
    runner = source.runner()
    target = runner.open(ref)
    try:
        target.connect()
        job = JobState(job_id="node", node=ref.node, container=ref.container, variant="a8w8", created=0, request={})
        yield Ctx(job=job, workspace=None, target=target, settings=Settings(), ui=Ui(quiet=True)), ref
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


def _live_tables(env, node: str, container: str | None):
    """The tuned tables of the container's AITER (``aiter/configs`` and its ``model_configs``) and those its
    ``AITER_CONFIG_*`` variables name, the cu_num and gfx of its GPUs, and which set AITER merges each env table
    with, and the errRatio bound of the node's level-0 guard (None: it ships none, or none with that check):
    discover, then two manifest round trips (the listing, then the files and the guard inline)."""
    import pandas as pd

    from ..parsing.audit import GUARD_FILE, guard_err_bound
    from ..parsing.csvtools import read_tuned_csv
    with node_ctx(env, node, container) as (ctx, ref):
        facts = ctx.call("discover", {"aiter_path": ctx.target.container.aiter_path})
        root = facts.get("aiter_root")
        if not root:
            raise JobError(f"no aiter installation found in {ref.label}",
                           hint="set aiter_path for this container in inventory.yaml")
        dirs = [f"{root}/{d}" for d in TABLE_DIRS]
        listing = ctx.call("manifest", {"paths": dirs, "recursive": False}).get("dirs") or {}
        paths = [f"{d}/{name}" for d in dirs for name in listing.get(d) or []
                 if name.endswith(".csv") and "tuned" in name and "untuned" not in name]
        named, notes = config_env_tables({**(facts.get("env") or {}), **ctx.target.container.env}, root)
        paths += [p for p in named if p not in paths]
        guard = f"{root}/{GUARD_FILE}"
        asked = paths + [guard]
        got = ctx.call("manifest", {"paths": asked, "have": {p: "" for p in asked}, "inline_max": 16 << 20,
                                    "compress": True}).get("files") or {}
    guard_text = _inline_text(got.get(guard) or {})
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
        text = _inline_text(meta)
        if text is None:
            raise JobError(f"{ref.label}: {p} did not come back (too big or gone)", hint="audit a copy of it offline")
        tables.append((label, read_tuned_csv(text) if text.strip() else pd.DataFrame()))
    for n in notes:
        click.echo(f"note: {n}", err=True)
    return tables, sorted(cu), facts.get("gfx"), merged_as, guard_err_bound(guard_text)


def _inline_text(meta: dict) -> str | None:
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

    from ..parsing.csvtools import read_tuned_csv
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
