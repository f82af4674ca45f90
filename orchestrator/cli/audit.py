"""`tune-remote audit`: the defects of tuned tables, offline on CSV files or live in a node's container
(the work: orchestrator/audit.py)."""
from __future__ import annotations

import json

import click

from ..audit import tuned_table   # noqa: F401  re-exported: csv diff/merge (cli/offline.py) read tables with it
from ..errors import ExitCode, UsageError
from .base import cli
from .readers import ask, gone, promoted_on, store_of


@cli.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, exists=True))
@click.option("--node", default=None, metavar="NODE", help="audit the live tables of this inventory node")
@click.option("--container", default=None, metavar="NAME", help="with --node: the container (if it has several)")
@click.option("--cu-num", "cu_nums", type=click.IntRange(1), multiple=True, metavar="N",
              help="offline: the serving GPU's cu_num (repeatable); its gfx's rows for another cu_num are findings")
@click.option("--all-nodes", is_flag=True,
              help="with --node: every inventory node of its GPU kind (gfx, cu_num), each probed and audited")
@click.option("--json", "as_json", is_flag=True, help='print a JSON list of {"kind", "file", "key", "detail"}')
@click.pass_obj
def audit(env, files, node, container, cu_nums, all_nodes, as_json):
    """Tuned tables checked for copied us, unparsable FlyDSL names, duplicate keys across merged files,
    foreign cu_num rows and errRatio over upstream's level-0 guard (errRatio > 0.2; with --node, the bound of the
    node's own op_tests/tuning_tests/test_csv_validation.py). With --node and the team's store (docs/store.md):
    each finding says which job and laptop promoted its row ("promoted_by"), a row the store lists as promoted
    there that the live tables lack is a missing_row finding, and the findings are written to the store.
    Exit 0 clean, 1 findings, 2 bad input."""
    from ..audit import audit as run_audit
    if bool(files) == bool(node):
        raise UsageError("give tuned CSV files or --node, not both" if files else "nothing to audit",
                         hint="tune-remote audit aiter/configs/*_tuned_*.csv, or tune-remote audit --node NODE")
    if container and not node:
        raise UsageError("--container applies to --node", hint="tune-remote audit --node NODE --container NAME")
    if node and cu_nums:
        raise UsageError("--cu-num is for files: with --node the node's GPUs give it", hint="drop --cu-num")
    if all_nodes and not node:
        raise UsageError("--all-nodes applies to --node", hint="tune-remote audit --node NODE --all-nodes")
    store = store_of(env) if node else None
    if all_nodes:
        return _all_nodes(env, store, node, container, as_json)
    team = ask(env, store, promoted_on, [node]) if store is not None else None
    res = run_audit(files, cu_nums, inventory_path=env.inventory_path if node else None, node=node,
                    container=container, team=team,
                    workspace=env.workspace if node else None)
    if team is not None:
        from ..audit_team import record_findings
        record_findings(store, res, node, gone)
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


def _all_nodes(env, store, node: str, container: str | None, as_json: bool) -> None:
    """Exit: a failed node's code, else 1 with findings, else 0."""
    from ..audit import audit_fleet
    from ..audit_team import record_findings
    out = audit_fleet(env.inventory_path, node, container,
                      lambda nodes: ask(env, store, promoted_on, nodes) if store is not None else None,
                      lambda res, n: record_findings(store, res, n, gone), lambda line: click.echo(f"note: {line}", err=True))
    findings = out["findings"]
    if as_json:
        click.echo(json.dumps(findings))
    elif findings:
        click.echo(_table(findings))
    else:
        click.echo(f"clean: {out['audited']} node(s), {out['tables']} table(s)", err=True)
    if out["failed"]:
        raise SystemExit(int(out["failed"][0].exit_code))
    if findings:
        raise SystemExit(ExitCode.JOB_FAILED)


def _table(findings: list[dict]) -> str:
    """kind, file, key, detail (node first with --all-nodes; "promoted by" where the team's store knew it)."""
    nodes = any("node" in f for f in findings)
    whose = any(f.get("promoted_by") for f in findings)
    rows = [(*([f["node"]] if nodes else []), f["kind"], f["file"], " ".join(f"{k}={v}" for k, v in f["key"].items()),
             *([_whose(f.get("promoted_by"))] if whose else []), f["detail"]) for f in findings]
    head = (*(["node"] if nodes else []), "kind", "file", "key", *(["promoted by"] if whose else []), "detail")
    width = [max(len(r[i]) for r in rows + [head]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:{w}}}" for w in width) + "  {}"
    return "\n".join(fmt.format(*r).rstrip() for r in [head] + rows)


def _whose(p: dict | None) -> str:
    return f"job {p['job_id']} ({p['origin']})" if p else "-"


def node_ctx(env, node: str, container: str | None):
    """A connected node session on an inventory node's container and its ref (``shapes --node``: cli/offline.py)."""
    from ..audit import node_session
    return node_session(env.inventory_path, node, container)
