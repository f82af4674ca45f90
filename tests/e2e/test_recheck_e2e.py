"""`tune-remote recheck` (issue 29) end to end through sshd + docker exec against the simulated AITER: a job
promotes its proven rows, the container is upgraded in place (sim/upgrade.py: a new AITER version under which
a deterministic subset of tuned rows is slower than the default kernel), `recheck` finds exactly the promoted
rows the perf model makes slower than what AITER serves without them, `--demote` removes them (backup, the
rest of the live table byte-identical, module set aside) and `--undo` puts them back byte for byte.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from orchestrator.outcome.keys import norm_key_value
from orchestrator.sim import perf_model, upgrade
from tests.e2e.test_reliability_e2e import VARIANT, Bed, desc

pytestmark = pytest.mark.e2e

LIVE = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"
MODULE = "aiter/jit/module_gemm_a8w8_blockscale.so"
NEW = "0.1.20.post1"
GFX, CU = "gfx950", 256


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def _mnk(row: dict) -> tuple:
    return tuple(norm_key_value(row[c]) for c in ("M", "N", "K"))


def _served_us(shape: dict, keys: set) -> float:
    """What the op_test measures for ``shape`` under the upgrade with a table holding ``keys`` (M, N, K)."""
    for m in perf_model.padded_m_candidates(shape["m"], shape["n"], shape["k"]):
        if (m, shape["n"], shape["k"]) in keys:
            row = dict(shape, m=m)
            before = perf_model.bench_us(VARIANT, shape, GFX, CU, tuned_from=row)
            return upgrade.upgraded_us(VARIANT, shape, GFX, CU, row, NEW, before)
    return perf_model.bench_us(VARIANT, shape, GFX, CU)


def test_recheck_after_an_upgrade_finds_the_slower_rows_and_demote_removes_them(node, tmp_path):
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    cp = bed.cli(*bed.run_args("--repeats", "2"), timeout=400)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    promoted = {tuple(norm_key_value(v) for v in k[-3:]) for k in st["remote"]["promotion"]["promoted"]}
    assert len(promoted) >= 3, promoted

    # nothing changed yet: every promoted row still wins
    cp = bed.cli("recheck", "--node", node.alias, "--json", timeout=300)
    assert cp.returncode == 0, desc(cp)
    first = json.loads(cp.stdout)
    assert first["counts"]["still_faster"] == len(promoted) and first["counts"]["slower_now"] == 0, first

    # the upgrade: new dist-info, new version string, some rows now slower than the default kernel
    upgrade.apply(bed.c.inst, NEW)
    live_rows = _rows(bed.node_bytes(f"{root}/{LIVE}"))
    keys = {_mnk(r) for r in live_rows if r["cu_num"] == str(CU) and r.get("gfx", GFX) == GFX}
    rest = keys - promoted
    expected = set()
    for k in promoted:
        shape = dict(zip(("m", "n", "k"), k))
        with_row, without_row = _served_us(shape, keys), _served_us(shape, rest)
        if without_row / with_row - 1 <= -0.01:
            expected.add(k)
    slowed = {k for k in promoted if upgrade.slowed(VARIANT, dict(zip(("m", "n", "k"), k)), GFX, CU, NEW)}
    assert expected and expected <= slowed, (expected, slowed)

    live_before = bed.node_bytes(f"{root}/{LIVE}")
    cp = bed.cli("recheck", "--node", node.alias, "--container", bed.c.name, "--repeats", "3", "--json",
                 timeout=300)
    assert cp.returncode == 0, desc(cp)
    out = json.loads(cp.stdout)
    d = tmp_path / "ws" / out["recheck"]
    assert d.name.startswith("recheck-") and d.is_dir()
    got = list(csv.DictReader((d / "recheck.csv").open()))
    assert list(got[0]) == ["m", "n", "k", "kernelName", "with_row", "without_row", "speedup_pct", "verdict"]
    verdicts = {tuple(norm_key_value(r[c]) for c in ("m", "n", "k")): r["verdict"] for r in got}
    assert set(verdicts) == promoted
    assert {k for k, v in verdicts.items() if v == "slower_now"} == expected
    assert all(v in ("still_faster", "no_longer_faster", "slower_now") for v in verdicts.values())
    assert all(r["kernelName"] for r in got)
    report = (d / "report.md").read_text()
    assert f"AITER 0.1.20 ({NEW})" in report and "at promotion by job job1: AITER 0.1.20," in report
    assert "ROCm 7.0.2" in report and GFX in report
    assert bed.node_bytes(f"{root}/{LIVE}") == live_before          # a recheck alone changes nothing
    # each arm ran pinned to one GPU with its own private JIT dir and table, interleaved
    doc = json.loads((d / "recheck.json").read_text())
    assert doc["counts"]["slower_now"] == len(expected)
    env = doc["bench_env"][VARIANT]
    assert env["with"]["HIP_VISIBLE_DEVICES"] == env["without"]["HIP_VISIBLE_DEVICES"] == str(doc["gpu"])
    assert env["with"]["AITER_JIT_DIR"] != env["without"]["AITER_JIT_DIR"]
    assert all(env[a]["AITER_JIT_DIR"].startswith(doc["node_dir"]) for a in ("with", "without"))
    assert env["with"]["AITER_CONFIG_GEMM_A8W8_BLOCKSCALE"] == f"{root}/{LIVE}"
    without = _rows(bed.node_bytes(env["without"]["AITER_CONFIG_GEMM_A8W8_BLOCKSCALE"]))
    assert {_mnk(r) for r in without if r["cu_num"] == str(CU)} == rest
    marks = [ln for ln in (d / f"bench-{VARIANT}.log").read_text().splitlines()
             if ln.startswith("== tune-remote sample")]
    assert marks == [f"== tune-remote sample {a} {n}" for n in (1, 2, 3) for a in ("with", "without")]
    assert not bed.node_exists(env["with"]["AITER_JIT_DIR"])      # the arms' builds are not left behind

    # --demote: the slower rows leave the live table, the rest stays byte-identical
    module_before = bed.node_bytes(f"{root}/{MODULE}") if bed.node_exists(f"{root}/{MODULE}") else None
    cp = bed.cli("recheck", "--node", node.alias, "--demote", "--json", timeout=300)
    assert cp.returncode == 0, desc(cp)
    dem = json.loads(cp.stdout)
    assert dem["demoted"] == len(expected) and "--undo" in dem["undo"]
    live_after = bed.node_bytes(f"{root}/{LIVE}")
    lines = live_before.decode().splitlines(True)
    kept = lines[:1] + [ln for ln in lines[1:] if _line_key(ln) not in expected]
    assert len(kept) == len(lines) - len(expected)
    assert live_after.decode() == "".join(kept)
    doc = json.loads((tmp_path / "ws" / dem["recheck"] / "recheck.json").read_text())
    table = doc["demotion"]["tables"][0]
    assert bed.node_bytes(table["backup"]) == live_before
    if module_before is not None:
        saved = table["modules"][f"{root}/{MODULE}"]
        assert bed.node_bytes(saved) == module_before
    assert table["engaged"]["engaged"] == table["engaged"]["total"] == len(expected)
    # the fresh process of the engaged check built the live module from the new table
    assert json.loads(bed.node_bytes(f"{root}/{MODULE}"))["tune_file_sha256"] == _sha(live_after)
    # a recheck now: those rows are no longer promoted live rows, the rest still wins
    cp = bed.cli("recheck", "--node", node.alias, "--json", timeout=300)
    assert cp.returncode == 0, desc(cp)
    again = json.loads(cp.stdout)["counts"]
    assert again["slower_now"] == 0 and again.get("not_measured") == len(expected)

    # --undo: the live table as it was before the demotion, byte for byte
    cp = bed.cli("recheck", "--node", node.alias, "--undo", dem["recheck"], "--json", timeout=120)
    assert cp.returncode == 0, desc(cp)
    assert bed.node_bytes(f"{root}/{LIVE}") == live_before


def _line_key(line: str) -> tuple | None:
    """(M, N, K) of a live-table line of this GPU (gfx,cu_num,M,N,K,...), else None."""
    cells = next(csv.reader([line]))
    if cells[:2] != [GFX, str(CU)]:
        return None
    return tuple(norm_key_value(c) for c in cells[2:5])


def _sha(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


def test_recheck_bad_input_is_one_line_and_exit_2(node, tmp_path):
    bed = Bed(node, tmp_path)
    cp = bed.cli("recheck", "--node", node.alias)
    assert cp.returncode == 2, desc(cp)
    lines = cp.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "promoted" in lines[0] and "hint" in lines[0], lines
    cp = bed.cli("recheck", "--node", "nosuchnode")
    assert cp.returncode == 2, desc(cp)
    cp = bed.cli("recheck", "--node", node.alias, "--repeats", "0")
    assert cp.returncode == 2 and len(cp.stderr.decode().strip().splitlines()) == 1, desc(cp)
    assert not (tmp_path / "ws").exists() or not list((tmp_path / "ws").glob("recheck-*"))
