"""`tune-remote audit`: the defects of tuned tables, offline on CSV files or live in a node's container
(the work: orchestrator/audit.py)."""
from __future__ import annotations

import json

import click

from ..audit import tuned_table   # noqa: F401  re-exported: csv diff/merge (cli/offline.py) read tables with it
from ..errors import ExitCode, UsageError
from .base import cli


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
    from ..audit import audit as run_audit
    if bool(files) == bool(node):
        raise UsageError("give tuned CSV files or --node, not both" if files else "nothing to audit",
                         hint="tune-remote audit aiter/configs/*_tuned_*.csv, or tune-remote audit --node NODE")
    if container and not node:
        raise UsageError("--container applies to --node", hint="tune-remote audit --node NODE --container NAME")
    if node and cu_nums:
        raise UsageError("--cu-num is for files: with --node the node's GPUs give it", hint="drop --cu-num")
    res = run_audit(files, cu_nums, inventory_path=env.inventory_path if node else None, node=node,
                    container=container, workspace=env.workspace if node else None)
    for n in res.notes:
        click.echo(f"note: {n}", err=True)
    if as_json:
        click.echo(json.dumps(res.findings))
    elif res.findings:
        click.echo(_table(res.findings))
    else:
        click.echo(f"clean: {len(res.tables)} table(s), {sum(len(t) for _, t in res.tables)} row(s)", err=True)
    if res.findings:
        raise SystemExit(ExitCode.JOB_FAILED)


def _table(findings: list[dict]) -> str:
    rows = [(f["kind"], f["file"], " ".join(f"{k}={v}" for k, v in f["key"].items()), f["detail"]) for f in findings]
    head = ("kind", "file", "key", "detail")
    width = [max(len(r[i]) for r in rows + [head]) for i in range(3)]
    fmt = "  ".join(f"{{:{w}}}" for w in width) + "  {}"
    return "\n".join(fmt.format(*r).rstrip() for r in [head] + rows)


def node_ctx(env, node: str, container: str | None):
    """A connected node session on an inventory node's container and its ref (``shapes --node``: cli/offline.py)."""
    from ..audit import node_session
    return node_session(env.inventory_path, node, container)
