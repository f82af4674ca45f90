"""Issue 36, the merge at HEAD, end to end: a `head` node (AITER 0.1.30 whose config merge resolves duplicate
keys in the merged copy: upstream's test_config_merge_fallback.py form, probed, never read from the version)
beside a `newest` one (0.1.29: a duplicate key makes the merge raise, as before).

Both containers name the same two tables in AITER_CONFIG_GEMM_A8W8_BLOCKSCALE (the live one, then a user table
that already holds two of the shapes the job tunes: one with a us no kernel beats, one with a us every kernel
beats). On head the job promotes both and says which row AITER's merge keeps; on newest it skips both, as
before. `audit --node` on a planted duplicate: a shadowed note on head, a duplicate_key finding on newest."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.cli import main
from tests.fake_remote import ContainerSpec

pytestmark = pytest.mark.e2e

HEADER = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
KERNEL = "a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1"
# M=128: a us no tuned kernel beats (the user's row shadows the promoted one); M=1024: one every kernel beats
USER_TABLE = HEADER + (f"gfx950,256,128,4096,512,ck,8,0,0.001,{KERNEL},1.0,1.0,0.0\n"
                       f"gfx950,256,1024,4096,512,ck,8,0,99999.0,{KERNEL},1.0,1.0,0.0\n")


@pytest.fixture(scope="module")
def hnode(testbed):
    node = testbed.create_node((ContainerSpec(sim={"profile": "head"}, suffix="aiter-head"),
                                ContainerSpec(sim={"profile": "newest"}, suffix="aiter-newest")), proxy=False)
    yield node
    testbed.destroy_node(node)


def _setup(node, suffix, tmp_path):
    c = node.container(suffix)
    live = f"{c.aiter_root}/aiter/configs/a8w8_blockscale_tuned_gemm.csv"
    user = c.host_path(f"{c.aiter_root}/user_tables/mine_a8w8_blockscale_tuned_gemm.csv")
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(USER_TABLE)
    env = {"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": f"{live}:{c.aiter_root}/user_tables/mine_a8w8_blockscale_tuned_gemm.csv"}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {"env": env}}}}}))
    return c, inv, user


def _run(node, c, inv, ws, job):
    return main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a8w8_blockscale", "--nk", "4096,512", "--m-preset", "1,128,1024",
                 "--promote", "all", "--yes", "--job-id", job])


def _keys(rows):
    return sorted(int(k[2]) for k in rows)


def test_head_node_probes_a_resolving_merge_and_promotion_says_which_row_wins(hnode, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    c, inv, user = _setup(hnode, "aiter-head", tmp_path)
    ws = tmp_path / "ws"
    assert _run(hnode, c, inv, ws, "h1") == 0
    st = json.loads((ws / "h1" / "state.json").read_text())
    assert (st["facts"]["version"], st["facts"]["version_raw"]) == ("0.1.30", "0.1.30+rocm10.1")
    assert "duplicate-key merge rule (aiter/jit/core.py's merge run on two tables: the lowest-us row wins in the " \
           "merged copy, sources untouched)" in st["facts"]["probed"]
    assert not any("duplicate-key merge rule" in a for a in st["facts"]["assumed"])
    rec = st["remote"]["promotion"]
    assert rec["skipped_duplicates"] == [] and rec["merge_rule"] == "resolve"
    assert {128, 1024} <= set(_keys(rec["promoted"]))
    assert [(int(x["key"][2]), x["by"], x["by_us"]) for x in rec["shadowed"]] == \
        [(128, f"{c.aiter_root}/user_tables/mine_a8w8_blockscale_tuned_gemm.csv", "0.001")]
    assert [int(x["key"][2]) for x in rec["overrides"]] == [1024]
    notes = "\n".join(st["notes"])
    assert "promoted but shadowed: ['gfx950', '256', '128', '4096', '512']" in notes and "(us 0.001)" in notes
    assert "AITER's merge keeps the promoted row" in notes
    assert user.read_text() == USER_TABLE               # the user's table is never touched
    # a fresh process reads the same list as the server: the shadowed row is not engaged, and why is said
    eng = {s["key"]["m"]: s for s in st["steps"]["promote"]["info"]["engaged"]["shapes"]}
    assert eng[1024]["engaged"] and not eng[128]["engaged"]
    assert "another table AITER merges holds this key with a lower us" in eng[128]["reason"]
    report = (ws / "h1" / "report.md").read_text()
    assert "duplicate-key merge rule (aiter/jit/core.py's merge run on two tables" in report

    # the export names the node's AITER as 0.1.30 (the pip version 0.1.30+rocm10.1 in its provenance)
    capsys.readouterr()
    assert main(["--inventory", str(inv), "--workspace", str(ws), "--json", "export", "h1", "--model-config",
                 "mine"]) == 0
    md = (ws / "h1" / "export" / "mine_a8w8_blockscale_tuned_gemm.md").read_text()
    assert "AITER 0.1.30;" in md and "- AITER: version 0.1.30+rocm10.1, commit " in md, md

    # audit: a duplicate key is no fault on this node; which row wins is said, on stderr
    capsys.readouterr()
    rc = main(["--inventory", str(inv), "audit", "--node", hnode.alias, "--json"])
    out = capsys.readouterr()
    found = json.loads(out.out)
    assert not [f for f in found if f["kind"] == "duplicate_key"], found
    assert ("shadowed: aiter/configs/a8w8_blockscale_tuned_gemm.csv: gfx=gfx950 cu_num=256 M=128 N=4096 K=512 "
            "(us ") in out.err and "keeps the row of user_tables/mine_a8w8_blockscale_tuned_gemm.csv (us 0.001, " \
                                   "lowest us)" in out.err, out.err
    assert rc == (1 if found else 0)


def test_newest_node_keeps_the_raising_rule(hnode, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    c, inv, user = _setup(hnode, "aiter-newest", tmp_path)
    ws = tmp_path / "ws"
    assert _run(hnode, c, inv, ws, "n1") == 0
    st = json.loads((ws / "n1" / "state.json").read_text())
    assert st["facts"]["version_raw"] == "0.1.29.post1+rocm10.1"
    assert "duplicate-key merge rule (aiter/jit/core.py's merge run on two tables: a duplicate key rewrites the " \
           "sources and raises)" in st["facts"]["probed"]
    rec = st["remote"]["promotion"]
    assert _keys(rec["skipped_duplicates"]) == [128, 1024] and rec["shadowed"] == [] and rec["overrides"] == []
    assert not {128, 1024} & set(_keys(rec["promoted"]))
    assert "a duplicate key makes AITER 0.1.29's merge raise" in "\n".join(st["notes"])
    live = c.host_path(f"{c.aiter_root}/aiter/configs/a8w8_blockscale_tuned_gemm.csv").read_text()
    assert ",128,4096,512," not in live and ",1024,4096,512," not in live

    # a planted duplicate of a live row: today's finding, exit 1
    first = live.splitlines()[1]
    user.write_text(USER_TABLE + first + "\n")
    capsys.readouterr()
    rc = main(["--inventory", str(inv), "audit", "--node", hnode.alias, "--container", c.name, "--json"])
    out = capsys.readouterr()
    dups = [f for f in json.loads(out.out) if f["kind"] == "duplicate_key"]
    assert rc == 1 and [d["file"] for d in dups] == ["user_tables/mine_a8w8_blockscale_tuned_gemm.csv"]
    assert "rewrites the table and raises" in dups[0]["detail"] and "shadowed:" not in out.err
