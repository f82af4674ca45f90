"""`recheck` and `audit` see every row promoted by anyone (issue 39), on the test bed with a real PostgreSQL:
laptop A promotes on node 1; laptop B (another workspace, nothing of its own) runs `recheck --all-nodes` and
`audit --all-nodes` from node 2: the nodes of node 2's GPU kind are probed (node 3, another cu_num, is left
out), A's rows on node 1 are rechecked with their job and laptop, a row removed from node 1's live table is
reported missing, a suspicious row says it was A's, and audit's findings land in the store."""

from __future__ import annotations

import csv
import io
import json
import socket

import pytest
import sqlalchemy as sa
import yaml

from orchestrator.outcome.keys import norm_key_value
from orchestrator.sim import SimSpec, upgrade
from tests.e2e.test_reliability_e2e import LOG, TR, VARIANT, desc

pytestmark = pytest.mark.e2e

LIVE = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"


def _cli(tmp_path, inv, ws, *args, timeout=400):
    import os
    import subprocess
    env = dict(os.environ, TUNE_REMOTE_POLL_S="0.2")
    env.pop("TUNE_REMOTE_STORE", None)
    return subprocess.run([*TR, "--inventory", str(inv), "--workspace", str(ws), *map(str, args)],
                          capture_output=True, timeout=timeout, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)


def _mnk(d: dict) -> tuple:
    low = {k.lower(): v for k, v in d.items()}
    return tuple(norm_key_value(low[c]) for c in ("m", "n", "k"))


def test_a_second_laptop_rechecks_and_audits_the_rows_the_first_promoted(make_node, postgres, tmp_path):
    n1, n2 = make_node("current"), make_node("current")
    n3 = make_node(SimSpec(cu_num=80))                     # another GPU kind (an MI308X's cu_num)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                                       "containers": {next(iter(n.containers)): {}}}
                                             for n in (n1, n2, n3)}}, sort_keys=False))   # in this order
    c1 = next(iter(n1.containers.values()))
    url = postgres.url
    cp = _cli(tmp_path, inv, tmp_path / "a", "--store", url, "run", "--node", n1.alias, "--container", c1.name,
              "--variant", VARIANT, "--log", LOG, "--m-preset", "1,64,1024", "--yes", "--job-id", "jobA",
              "--repeats", "2")
    assert cp.returncode == 0, desc(cp)
    promoted = json.loads((tmp_path / "a" / "jobA" / "state.json").read_text())["remote"]["promotion"]["promoted"]
    keys = sorted({tuple(norm_key_value(v) for v in k[-3:]) for k in promoted})
    assert len(keys) >= 3, keys
    origin_a = f"{socket.gethostname()}:{(tmp_path / 'a').resolve()}"

    # on node 1 since: one of A's rows removed, another made suspicious (errRatio over the guard's 0.2)
    live = c1.host_path(f"{c1.aiter_root}/{LIVE}")
    rows = list(csv.DictReader(io.StringIO(live.read_text())))
    header = list(rows[0])
    removed, suspicious = keys[0], keys[1]
    kept = [r for r in rows if not (_mnk(r) == removed and r["cu_num"] == "256")]
    for r in kept:
        if _mnk(r) == suspicious and r["cu_num"] == "256":
            r["errRatio"] = "0.5"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    w.writeheader()
    w.writerows(kept)
    live.write_text(buf.getvalue())

    # laptop B: a workspace of its own, without the store nothing to recheck there
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", "none", "recheck", "--node", n2.alias, "--all-nodes")
    assert cp.returncode == 2 and "nothing promoted on the 2 node(s)" in cp.stderr.decode(), desc(cp)
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", url, "--json", "recheck", "--node", n2.alias,
              "--all-nodes")
    assert cp.returncode == 0, desc(cp)
    out = json.loads(cp.stdout)
    assert out["nodes"] == [n1.alias, n2.alias] and out["kinds"] == "gfx950/cu_num=256", out
    assert [s["node"] for s in out["skipped"]] == [n2.alias] and not out["failed"]
    (r1,) = out["rechecks"]
    assert r1["node"] == n1.alias and [_mnk(m["key"]) for m in r1["missing"]] == [removed]
    assert r1["missing"][0]["origin"] == origin_a and r1["missing"][0]["job_id"] == "jobA"
    doc = json.loads((tmp_path / "b" / r1["recheck"] / "recheck.json").read_text())
    assert sorted(_mnk(r["key"]) for r in doc["rows"]) == keys
    assert {(r["job_id"], r["origin"], r["source"]) for r in doc["rows"]} == {("jobA", origin_a, "store")}
    measured = [r for r in doc["rows"] if r.get("verdict")]
    assert len(measured) == len(keys) - 1 and all(r["verdict"] == "still_faster" for r in measured), doc["rows"]

    # laptop B's audit of the GPU kind: the suspicious row is A's, the removed one is missing
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", url, "audit", "--node", n2.alias, "--all-nodes", "--json")
    assert cp.returncode == 1, desc(cp)
    found = json.loads(cp.stdout)
    assert {f["node"] for f in found} == {n1.alias}, found          # node 2's tables are the shipped, clean ones
    by = {(f["kind"], _mnk(f["key"])): f for f in found}
    assert by[("err_ratio", suspicious)]["promoted_by"]["job_id"] == "jobA"
    assert by[("err_ratio", suspicious)]["promoted_by"]["origin"] == origin_a
    assert by[("missing_row", removed)]["promoted_by"]["origin"] == origin_a
    assert set(by) == {("err_ratio", suspicious), ("missing_row", removed)}
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", url, "audit", "--node", n1.alias)
    assert cp.returncode == 1 and f"job jobA ({origin_a})" in cp.stdout.decode(), desc(cp)

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        ev = conn.execute(sa.text("SELECT kind, node, table_name, row_key, detail FROM events "
                                  "WHERE kind IN ('audit', 'recheck')")).mappings().all()
    engine.dispose()
    audits = [e for e in ev if e["kind"] == "audit"]
    assert {(e["node"], e["row_key"]) for e in audits} == {
        (n1.alias, "m={},n={},k={}".format(*k)) for k in (suspicious, removed)}     # each once, audited twice
    assert all(json.loads(e["detail"])["aiter"]["version"] for e in audits)
    assert len([e for e in ev if e["kind"] == "recheck" and e["node"] == n1.alias]) == len(keys)

    # an upgrade on node 1; B's recheck --demote removes A's rows that are slower now: the store records the
    # demotion (the team's rows released), so a later audit does not call them missing
    upgrade.apply(c1.inst, "0.1.20.post1")
    team_before = len(json.loads(_cli(tmp_path, inv, tmp_path / "b", "--store", url, "rows", "--json").stdout))
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", url, "--json", "recheck", "--node", n1.alias, "--demote")
    assert cp.returncode == 0, desc(cp)
    rc = json.loads(cp.stdout)
    doc = json.loads((tmp_path / "b" / rc["recheck"] / "recheck.json").read_text())
    demoted = {_mnk(r["key"]) for r in doc["rows"] if r.get("verdict") == "slower_now"}
    assert demoted and rc["demoted"] == len(demoted), doc["counts"]
    team_after = len(json.loads(_cli(tmp_path, inv, tmp_path / "b", "--store", url, "rows", "--json").stdout))
    assert team_after == team_before - len(demoted)
    cp = _cli(tmp_path, inv, tmp_path / "b", "--store", url, "audit", "--node", n1.alias, "--json")
    found = json.loads(cp.stdout)
    assert {_mnk(f["key"]) for f in found if f["kind"] == "missing_row"} == {removed}, found
