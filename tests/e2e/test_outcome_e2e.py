"""An outcome you can trust (issue 7), end to end through sshd + docker exec against the simulated AITER:
staging (the tuner never writes the live table, the live JIT modules stay untouched), repeated and
interleaved benchmarks on one pinned GPU, noise-aware verdicts, promotion of proven rows only.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pandas as pd
import pytest

from orchestrator.sim import perf_model
from orchestrator.outcome.compare import JUDGED_CSV_COLUMNS, norm_key_value
from tests.e2e.test_reliability_e2e import VARIANT, Bed, desc, err_lines
from tests.expect import expected_rows

pytestmark = pytest.mark.e2e

LIVE = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"
MODULE = "aiter/jit/module_gemm_a8w8_blockscale.so"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def _mnk(row: dict) -> tuple:
    return tuple(norm_key_value(row[c]) for c in ("M", "N", "K"))


def _build_live_module(bed: Bed) -> None:
    """A server-like process imports the live module once (built from the live table, as AITER does)."""
    root = bed.c.aiter_root
    bed.c.sh(f"cd {root} && python3 op_tests/test_gemm_a8w8_blockscale.py -m 1 -nk 1536,7168 "
             f"> /dev/null 2>&1")
    assert bed.node_exists(f"{root}/{MODULE}")


def _live_state(bed: Bed) -> dict:
    root = bed.c.aiter_root
    jit = bed.c.host_path(f"{root}/aiter/jit")
    # the tuner's own *_tune module (all instances, never loaded by a server) may be built and reused there
    mods = {p.name: _sha(p.read_bytes()) for p in sorted(jit.glob("*.so")) if not p.name.endswith("_tune.so")}
    return {"table": _sha(bed.node_bytes(f"{root}/{LIVE}")), "modules": mods}


def test_staging_noise_verdicts_and_promote_proven(node, tmp_path):
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    _build_live_module(bed)
    before_live = bed.node_bytes(f"{root}/{LIVE}")
    module_before = bed.node_bytes(f"{root}/{MODULE}")
    bed.c.set_control(bench_noise_pct=1.5)
    cp = bed.cli(*bed.run_args("--repeats", "3"), timeout=400)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    r = st["remote"]
    # staging: the tuner wrote a table in the job dir, never the live one
    assert r["live_csv"] == f"{root}/{LIVE}"
    assert r["tuned_csv"] == f"{r['job_dir']}/staging/a8w8_blockscale_tuned_gemm.csv"
    argv = r["tune_argv"]
    assert argv[argv.index("-o") + 1] == r["tuned_csv"]
    # every benchmark ran pinned to one free GPU, in private JIT dirs, 3 runs per arm, interleaved
    gpu = r["bench_gpu"]
    assert int(gpu) in st["facts"]["tune_gpus"]
    for arm in ("before", "after"):
        assert r["bench_env"][arm]["HIP_VISIBLE_DEVICES"] == gpu
        assert r["bench_env"][arm]["AITER_JIT_DIR"].startswith(r["job_dir"])
    after_log = bed.node_bytes(r["logs"]["after"]).decode()
    marks = [ln for ln in after_log.splitlines() if ln.startswith("== tune-remote sample")]
    assert marks == ["== tune-remote sample after 1", "== tune-remote sample after 2",
                     "== tune-remote sample after 3"], marks
    base_log = bed.node_bytes(r["logs"]["baseline"]).decode()
    assert [ln for ln in base_log.splitlines() if ln.startswith("== tune-remote sample")] == [
        "== tune-remote sample before 1", "== tune-remote sample before 2", "== tune-remote sample before 3"]
    # the after benchmark built its module from the staging table in its private dir
    priv = json.loads(bed.node_bytes(f"{r['job_dir']}/jit/after/module_gemm_a8w8_blockscale.so"))
    assert priv["tune_file"] == r["tuned_csv"]

    # comparison.csv: the old columns, then verdict and promoted (+ evidence); medians of 3 samples
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    cols = list(got.columns)
    assert cols[cols.index("metric"):] == ["metric", "before", "after", "speedup_pct", *JUDGED_CSV_COLUMNS]
    assert set(got["verdict"]) <= {"improved", "regressed", "within_noise", "missing"}
    assert (got["before_n"] == "3").all() and (got["after_n"] == "3").all()
    assert ((got["promoted"] == "true") == (got["verdict"] == "improved")).all()
    # truth from the perf model (noise off): no slower row promoted, every clearly faster row promoted
    truth = {tuple(norm_key_value(w[c]) for c in ("m", "n", "k")): w["speedup_pct"]
             for w in expected_rows(bed.job_dir, VARIANT, st["facts"]["version"])}
    promoted = {tuple(norm_key_value(x[c]) for c in ("m", "n", "k")) for _, x in got.iterrows()
                if x["promoted"] == "true"}
    assert promoted, "nothing was promoted"
    assert all(truth[k] > 0 for k in promoted), {k: truth[k] for k in promoted if truth[k] <= 0}
    clear = {k for k, sp in truth.items() if sp >= 8.0}
    assert clear and clear <= promoted, clear - promoted

    # the live table = its rows before + the promoted rows (from staging), after a backup
    live_after = _rows(bed.node_bytes(f"{root}/{LIVE}"))
    staging = {_mnk(x): x for x in _rows(bed.node_bytes(r["tuned_csv"])) if x["cu_num"] == "256"}
    old = _rows(before_live)
    assert live_after[:len(old)] == old
    assert {(_mnk(x)) for x in live_after[len(old):]} == promoted
    assert all(staging[_mnk(x)] == x for x in live_after[len(old):])
    rec = r["promotion"]
    assert rec["backup"] and bed.node_bytes(rec["backup"]) == before_live
    # the stale live module was moved aside (renamed, not rewritten) ...
    saved = rec["modules"][f"{root}/{MODULE}"]
    assert bed.node_bytes(saved) == module_before
    # ... and the closed-loop fresh process (live config, no tune-remote env) built it from the new table
    live_bytes = bed.node_bytes(f"{root}/{LIVE}")
    assert json.loads(bed.node_bytes(f"{root}/{MODULE}"))["tune_file_sha256"] == _sha(live_bytes)
    eng = st["steps"]["promote"]["info"]["engaged"]
    assert eng["total"] == len(promoted) and eng["engaged"] == eng["total"], eng
    assert all(x["hit"] for x in eng["shapes"]), eng
    text = (bed.job_dir / "engaged_at_runtime.log").read_text()
    assert "AITER_CONFIG" not in text and "is tuned on cu_num = 256" in text
    # the report says it: verdict method with sample counts and noise, promotion, engagement X/Y
    md = (bed.job_dir / "report.md").read_text()
    assert "Verdicts rest on 3 before and 3 after runs per shape" in md
    assert f"Engaged at runtime: {len(promoted)}/{len(promoted)} promoted shapes" in md
    assert "## Promotion" in md and rec["backup"].replace(root, "<aiter root>") in md   # no node paths in a PR
    html = (bed.job_dir / "report.html").read_text()
    assert 'id="engaged"' in html and "http://" not in html.replace("http://www.w3.org", "")
    # JIT cold-build profile (seed 004), read from the node through op jit_logs: the after arm built in its
    # private dir; the after promotion appended an incremental build to the live module's .ninja_log (its
    # build dir was kept), and only that last build is profiled
    prof = json.loads((bed.job_dir / "jit_profile.json").read_text())
    mods = {(m["phase"], m["module"]): m for m in prof["modules"]}
    after = mods[("after benchmark", "module_gemm_a8w8_blockscale")]
    assert after["node_log"].startswith(bed.state()["remote"]["job_dir"]) and after["edges"] > 3
    promo = mods[("after promotion", "module_gemm_a8w8_blockscale")]
    live_log = bed.node_bytes(f"{root}/aiter/jit/build/module_gemm_a8w8_blockscale/build/.ninja_log").decode()
    assert promo["local_log"] and open(promo["local_log"]).read() == live_log
    assert 3 <= promo["edges"] < live_log.count("\n") - 1     # not the first build's lines
    assert promo["critical_path"][-1]["output"] == "module_gemm_a8w8_blockscale.so"
    assert "## JIT cold builds" in md and "after promotion" in md and 'id="jit"' in html


def test_promote_none_leaves_live_table_and_modules_untouched(node, tmp_path):
    bed = Bed(node, tmp_path)
    _build_live_module(bed)
    live0 = _live_state(bed)
    cp = bed.cli(*bed.run_args("--repeats", "2", "--promote", "none"), timeout=400)
    assert cp.returncode == 0, desc(cp)
    assert _live_state(bed) == live0
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    assert (got["promoted"] == "false").all()
    assert (got["verdict"] == "improved").any()
    assert "promotion" not in bed.state()["remote"]


def test_promote_later_then_rollback_byte_for_byte_and_idempotent(node, tmp_path):
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    _build_live_module(bed)
    live0 = bed.node_bytes(f"{root}/{LIVE}")
    module0 = bed.node_bytes(f"{root}/{MODULE}")
    cp = bed.cli(*bed.run_args("--repeats", "2", "--promote", "none"), timeout=400)
    assert cp.returncode == 0, desc(cp)

    # nothing to undo yet: one line, exit 2, nothing changed
    cp = bed.cli("rollback", bed.job_id)
    assert cp.returncode == 2 and "never promoted" in cp.stderr.decode(), desc(cp)
    assert len(err_lines(cp)) == 1
    assert bed.node_bytes(f"{root}/{LIVE}") == live0

    cp = bed.cli("promote", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    out = json.loads(cp.stdout)
    assert out["promoted"] > 0 and out["already"] is False
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    assert ((got["promoted"] == "true") == (got["verdict"] == "improved")).all()
    promoted_live = bed.node_bytes(f"{root}/{LIVE}")
    assert promoted_live != live0 and promoted_live.startswith(live0.rstrip(b"\n").split(b"\n")[0])
    assert len(_rows(promoted_live)) == len(_rows(live0)) + out["promoted"]
    # promote again: idempotent
    cp = bed.cli("promote", bed.job_id)
    assert cp.returncode == 0 and json.loads(cp.stdout)["already"] is True, desc(cp)
    assert bed.node_bytes(f"{root}/{LIVE}") == promoted_live

    # a fresh process builds the live module from the promoted table
    _build_live_module(bed)
    rebuilt = json.loads(bed.node_bytes(f"{root}/{MODULE}"))
    assert rebuilt["tune_file_sha256"] == _sha(promoted_live)

    cp = bed.cli("rollback", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    assert bed.node_bytes(f"{root}/{LIVE}") == live0
    assert bed.node_bytes(f"{root}/{MODULE}") == module0
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    assert (got["promoted"] == "false").all()
    cp = bed.cli("rollback", bed.job_id)
    assert cp.returncode == 0 and json.loads(cp.stdout)["already"] is True, desc(cp)
    assert bed.node_bytes(f"{root}/{LIVE}") == live0 and bed.node_bytes(f"{root}/{MODULE}") == module0

    # unknown job, bad flags: one line, exit 2
    for args in (("rollback", "no-such-job"), ("promote", "no-such-job"),
                 bed.run_args("--repeats", "0"), bed.run_args("--promote", "maybe")):
        cp = bed.cli(*args)
        assert cp.returncode == 2, desc(cp)
        assert len(err_lines(cp)) == 1, desc(cp)
    assert bed.node_bytes(f"{root}/{LIVE}") == live0


SERVE = "python3 -m aiter._sim.serve --nk 7168,2048 --m 1,64,1024"


def test_serve_cmd_before_and_after_promotion_lands_in_serving_csv(node, tmp_path):
    from tests.e2e.test_reliability_e2e import Bed, desc
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--serve-cmd", SERVE), timeout=300)
    assert cp.returncode == 0, desc(cp)
    import csv as _csv
    rows = list(_csv.DictReader((bed.job_dir / "serving.csv").open()))
    by = {r["metric"]: r for r in rows}
    assert list(rows[0]) == ["metric", "before", "after", "change_pct"]
    tput = by["Output token throughput (tok/s)"]
    assert float(tput["after"]) > float(tput["before"])        # the promoted rows serve faster
    assert float(by["Mean TPOT (ms)"]["change_pct"]) < 0
    assert "serving Output token throughput (tok/s)" in (bed.job_dir / "report.md").read_text()


def test_a_failing_serve_cmd_does_not_fail_the_job_and_the_report_says_why(node, tmp_path):
    from tests.e2e.test_reliability_e2e import Bed, desc
    bed = Bed(node, tmp_path)
    cp = bed.cli(*bed.run_args("--serve-cmd", SERVE + " --fail"), timeout=300)
    assert cp.returncode == 0, desc(cp)
    assert not (bed.job_dir / "serving.csv").exists()
    report = (bed.job_dir / "report.md").read_text()
    assert "serving comparison missing" in report and "exit status 1" in report


def test_export_model_config_loads_the_way_aiter_merges_tables(node, tmp_path):
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    cp = bed.cli(*bed.run_args("--repeats", "2", "--promote", "none"), timeout=400)
    assert cp.returncode == 0, desc(cp)
    cp = bed.cli("export", bed.job_id, "--model-config", "dsv3")
    assert cp.returncode == 0, desc(cp)
    out = json.loads(cp.stdout)
    path = bed.job_dir / "export" / "dsv3_a8w8_blockscale_tuned_gemm.csv"
    assert out["csv"] == str(path) and out["rows"] > 0
    rows = _rows(path.read_bytes())
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    proven = {tuple(norm_key_value(x[c]) for c in ("m", "n", "k")) for _, x in got.iterrows()
              if x["verdict"] == "improved"}
    assert {_mnk(x) for x in rows} <= proven and len(rows) == out["rows"]
    assert all(x["gfx"] == "gfx950" and x["cu_num"] == "256" for x in rows)
    md = (bed.job_dir / "export" / "dsv3_a8w8_blockscale_tuned_gemm.md").read_text()
    assert "dsv3_a8w8_blockscale_tuned_gemm.csv" in md
    # provenance reviewers ask for (aiter#5155, #5500): the node's own facts, the exact tuner command
    assert "### Provenance" in md and "- ROCm: 7.0.2" in md and "PCI device id 0x75a3" in md
    assert "gemm_a8w8_blockscale_tune.py -i " in md and "AMD Instinct MI355X" in md
    # loaded as AITER loads model_configs/ (merged with the shared table; duplicates raise on >= 0.1.12)
    mc = f"{root}/aiter/configs/model_configs"
    bed.c.sh(f"mkdir -p {mc}")
    bed.c.host_path(f"{mc}/dsv3_a8w8_blockscale_tuned_gemm.csv").write_bytes(path.read_bytes())
    m, n, k = sorted(_mnk(x) for x in rows)[0]
    run = bed.c.sh(f"cd {root} && AITER_LOG_TUNED_CONFIG=1 python3 op_tests/test_gemm_a8w8_blockscale.py "
                   f"-m {m} -nk {n},{k} 2>&1", check=False)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "merge tuned file under model_configs/" in run.stdout and "is tuned on cu_num = 256" in run.stdout
    # the same check fails for a table that repeats keys of the shared one (the check can fail)
    bed.c.host_path(f"{mc}/dup_a8w8_blockscale_tuned_gemm.csv").write_bytes(
        bed.node_bytes(bed.state()["remote"]["tuned_csv"]))
    run = bed.c.sh(f"cd {root} && python3 op_tests/test_gemm_a8w8_blockscale.py -m {m} -nk {n},{k} 2>&1",
                   check=False)
    assert run.returncode != 0 and "duplicate shape entries" in run.stdout


_HOLDER = """
import hashlib, mmap, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
print("ready", hashlib.sha256(m[:]).hexdigest(), flush=True)
sys.stdin.readline()
print("after", hashlib.sha256(m[:]).hexdigest(), flush=True)
"""


def test_promote_all_under_a_server_holding_the_old_module(node, tmp_path):
    """A server-style process has the live module mapped while the job promotes every tuned row: its
    mapping still reads the old bytes afterwards (the module was renamed away, never rewritten)."""
    import subprocess

    from tests.fake_remote.provision import find_docker
    bed = Bed(node, tmp_path)
    root = bed.c.aiter_root
    _build_live_module(bed)
    old = _sha(bed.node_bytes(f"{root}/{MODULE}"))
    holder = subprocess.Popen([find_docker(), "exec", "-i", bed.c.name, "python3", "-c", _HOLDER, f"{root}/{MODULE}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().split() == ["ready", old]
        cp = bed.cli(*bed.run_args("--repeats", "2", "--promote", "all"), timeout=400)
        assert cp.returncode == 0, desc(cp)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().split() == ["after", old]
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    st = bed.state()
    # all: every requested shape with a tuned row is promoted, whatever its verdict
    tuned = {tuple(norm_key_value(s[c]) for c in ("m", "n", "k")) for s in st["steps"]["compare"]["info"]["tuned"]["tuned"]}
    got = pd.read_csv(bed.job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    promoted = {tuple(norm_key_value(x[c]) for c in ("m", "n", "k")) for _, x in got.iterrows() if x["promoted"] == "true"}
    assert promoted == {k for k in tuned if k in {tuple(norm_key_value(x[c]) for c in ("m", "n", "k"))
                                                  for _, x in got.iterrows()}}
    assert set(got.loc[got["promoted"] == "true", "verdict"]) - {"improved"}, "all should include unproven rows"
    # the live module now comes from the promoted table
    live = bed.node_bytes(f"{root}/{LIVE}")
    # (issue 26: the after arm's module, built from the staging table holding exactly these rows, is reused)
    mod = json.loads(bed.node_bytes(f"{root}/{MODULE}"))
    def rowset(rows):
        return sorted(tuple(sorted((k.strip(), str(v).strip()) for k, v in r.items())) for r in rows)
    assert mod["tune_file_sha256"] == _sha(live) or rowset(mod["rows"]) == rowset(_rows(live))
