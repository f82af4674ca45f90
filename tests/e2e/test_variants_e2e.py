"""Every kernel variant, end to end through real sshd + docker exec on the test bed, on both AITER
profiles (current = 0.1.20 develop, legacy = 0.1.11 install, newest = 0.1.29 develop), checked against the sim's perf model.

One module-scoped node with a current and a legacy container carries the 8 x 2 matrix (each run uses
its own workspace; a run backs the tuned CSV up first, so the "before" side of a later run on the same
container is whatever an earlier run left: the model check reads the job's own backup, so it holds).
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from orchestrator.outcome.compare import JUDGED_CSV_COLUMNS
import yaml

from orchestrator.cli import main
from orchestrator.sim import logs as simlogs
from orchestrator.aiter_profiles import help_flags
from orchestrator.variants import VARIANTS, get_variant, parse_version, profile_for
from orchestrator.variants_mx import MX_VARIANTS
from orchestrator.sim import perf_model
from orchestrator.outcome.compare import norm_key_value as _n
from tests.expect import assert_comparison_matches_model, tuned_keys
from tests.fake_remote import ContainerSpec

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS = {"current": "0.1.20", "legacy": "0.1.11", "newest": "0.1.29"}

VLLM = "vllm_tp8_dsv3.log"
SGLANG = "sglang_tp8_glm5.log"
LOG_MORE = "aiter_log_more.log"
METACHAR = "run 1 $(touch pwned);x.log"

# Shape source per variant: the simulated server logs where they carry the variant (few (N,K) groups),
# --nk where a log would give many groups. M / token preset: 2 values (+ the logged ones).
SOURCES = {
    "a8w8": ["--log", VLLM],                               # (1280, 8192, torch.int8), M 64,128 logged
    "a8w8_blockscale": ["--nk", "7168,2048"],
    "a8w8_blockscale_bpreshuffle": ["--log", VLLM],         # (1536, 7168), M 16,48 logged
    "a8w8_bpreshuffle": ["--log", VLLM],                    # (6144, 1536, fp8), M 32 logged
    "a4w4_blockscale": ["--nk", "7168,2048"],
    "batched_a8w8": ["--log", METACHAR],                    # B16 (1280, 8192), M 1,32,64 logged
    "batched_bf16": ["--log", METACHAR],                    # B8 and B4 (1024, 4096)
    "moe_2stages": ["--log", SGLANG],                       # 2 MoE configs, tokens logged
    "a16w16": ["--nk", "6144,2048"],                        # bf16 -> bf16, no bias (the variant's nk_defaults)
    "a8w8_mxfp8_bpreshuffle": ["--nk", "7168,2048"],        # newest only; its default -o is a model table
    # newest only; FlyDSL rows into the CK a4w4 table: (N,K) no a4w4_blockscale case has given CK rows
    "a4w4_blockscale_bpreshuffle": ["--nk", "2112,7168"],
    # newest, gfx950 only (section 6b): its runtime's own lines (AITER_LOG_TUNED_CONFIG=1), misses M 1,300 of
    # (7168, 2048) and two hits of (2048, 7168), as aiter/ops/gemm_op_a4w6.py prints them
    "a4w6": ["--log", f"local:{REPO_ROOT}/tests/fixtures/logs/mx_a4w6_serve.log"],
    # newest only, batched (no --nk): the MXFP8 BMM runtime's miss lines, both forms, four (b,n,k,block) groups
    "bmm_a8w8_mxscale_bpreshuffle": ["--log", f"local:{REPO_ROOT}/tests/fixtures/logs/bmm_mxscale_misses.log"],
}
# the tuned header of a table keyed otherwise than gfx,cu_num,M,N,K (the MXFP8 BMM one: lower case, no cu_num)
TUNED_HEADERS = {"bmm_a8w8_mxscale_bpreshuffle": ["gfx", "b", "m", "n", "k", "w_scale_block", "libtype", "kernelId",
                                                  "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]}
M_PRESET = "1,64"


# ------------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vnode(testbed):
    """One node for the module: <node>-aiter-dev (current, develop) and <node>-aiter-legacy (legacy,
    develop: op_tests present) carry the variant matrix; <node>-aiter-moe (legacy, develop) is the
    untouched container of the MoE bypass test; <node>-aiter-inst (legacy, install: no op_tests)."""
    node = testbed.create_node(
        ("current",
         ContainerSpec(sim={"profile": "legacy"}, suffix="aiter-legacy"),
         ContainerSpec(sim={"profile": "newest"}, suffix="aiter-newest"),
         ContainerSpec(sim={"profile": "legacy"}, suffix="aiter-moe"),
         ContainerSpec(sim={"profile": "legacy", "install_mode": "install"}, suffix="aiter-inst")),
        proxy=False)
    yield node
    testbed.destroy_node(node)


def _container(node, profile: str):
    return node.container({"current": "aiter-dev", "newest": "aiter-newest"}.get(profile, "aiter-legacy"))


def expected_no_kernel(job: Path, st: dict, variant) -> list[dict]:
    """Shapes the sim's tuner finds no kernel for (perf model outcome 'failed') and that had no row before."""
    backups = sorted((job / "backup").glob("*")) if (job / "backup").is_dir() else []
    gfx, cu = st["facts"]["gfx"], int(st["facts"]["cu_num"])
    before = tuned_keys(backups[0] if backups else None, variant, gfx, cu)
    return [s for s in st["shapes"]
            if perf_model.outcome(variant.name, s, gfx, cu) == "failed"
            and tuple(_n(s[c]) for c in variant.key_columns) not in before]


def write_inventory(path: Path, node) -> Path:
    inv = {"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                   "containers": {name: {} for name in node.containers}}}}
    path.write_text(yaml.safe_dump(inv))
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    return tmp_path


def run_cli(tmp: Path, node, ctr, variant: str, *source: str, m_preset: str | None = M_PRESET,
            extra=()) -> tuple[int, Path | None]:
    inv = write_inventory(tmp / "inventory.yaml", node)
    ws = tmp / "ws"
    argv = ["--inventory", str(inv), "--workspace", str(ws), "run", "--node", node.alias,
            "--container", ctr.name, "--variant", variant, *source, "--yes", *extra]
    if m_preset:
        argv += ["--m-preset", m_preset]
    rc = main(argv)
    jobs = [d for d in ws.iterdir() if (d / "state.json").is_file()] if ws.is_dir() else []
    assert len(jobs) <= 1
    return rc, (jobs[0] if jobs else None)


def log_args(ctr, source: list[str]) -> list[str]:
    out = []
    for flag, value in zip(source[::2], source[1::2]):
        if flag == "--log" and not value.startswith(("/", "local:", "node:")):
            value = f"{ctr.inst.logs_dir}/{value}"
        out += [flag, value]
    return out


def state_of(job: Path) -> dict:
    return json.loads((job / "state.json").read_text())


def header_of(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


# ------------------------------------------------------------------------------------------------
# 1. every variant x both profiles
# ------------------------------------------------------------------------------------------------

# every variant with a benchmark x every profile that ships its tuner (a6w6 has none and is newest-only:
# section 6; a16w16's tuner came with v0.1.16)
@pytest.mark.parametrize("variant,profile", [
    (v, p) for v in VARIANTS for p in ("current", "legacy", "newest")
    if VARIANTS[v].bench is not None and VARIANTS[v].bench.style != "run_config"     # 6b, test_runconfig_e2e
    and (VARIANTS[v].since or (0, 0, 0)) <= parse_version(VERSIONS[p])])
def test_variant_end_to_end_matches_model(vnode, env, profile, variant):
    ctr = _container(vnode, profile)
    version = VERSIONS[profile]
    prof = profile_for(parse_version(version))
    v = get_variant(variant).resolve(prof)
    launches0 = len(ctr.launches())
    models0 = _model_tables(ctr)

    rc, job = run_cli(env, vnode, ctr, variant, *log_args(ctr, SOURCES[variant]))
    assert job is not None
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert st["state"] == "succeeded"
    assert st["facts"]["version"] == version and st["facts"]["profile"] == profile
    assert st["shapes"], "no shapes were tuned"
    # capabilities: the header and the tuner's --help were read on the node, the rest assumed (C-20)
    probed = st["facts"]["probed"]
    assert any(p.startswith("gfx column") for p in probed) and any(p.startswith("tuner flags") for p in probed)
    assert any(a.startswith("partial-result exit code") for a in st["facts"]["assumed"])

    # comparison.csv: header, rows and values exactly as the perf model says
    got = assert_comparison_matches_model(job, variant, version)
    assert list(got.columns) == [*v.key_columns, "metric", "before", "after", "speedup_pct", *JUDGED_CSV_COLUMNS]
    assert all(c == c.lower() for c in v.key_columns)
    assert len(got) == len(st["shapes"])

    # the report names the metric and its direction
    md = (job / "report.md").read_text()
    assert v.bench.metric in md
    assert ("higher is better" if v.bench.higher_is_better else "lower is better") in md
    assert "probed on node" in md and "tuner flags (tune script --help)" in md

    # the tuned CSV fetched home has this AITER version's header
    tuned = job / Path(v.tuned_csv).name
    assert tuned.is_file()
    head = header_of(tuned)
    if prof.name != "legacy":   # v0.1.13+ keys its tables by gfx
        assert head[:2] == ["gfx", "cu_num"], head
    else:
        assert head[0] == "cu_num" and "gfx" not in head, head
    # every requested shape has a row for this GPU now, except those the tuner finds no kernel for
    outcome = st["steps"]["compare"]["info"]["tuned"]
    no_kernel = expected_no_kernel(job, st, v)
    assert outcome["no_kernel"] == no_kernel
    assert len(outcome["tuned"]) == len(st["shapes"]) - len(no_kernel)
    assert bool(st["steps"]["remote"]["info"].get("partial")) == bool(no_kernel)

    # the tuner started exactly once, with the script this version has
    launches = ctr.launches()[launches0:]
    assert len(launches) == 1, launches
    argv = st["remote"]["tune_argv"]
    assert argv[1] == f"{st['remote']['meta_root']}/{v.tune_script}"
    if variant == "a8w8_blockscale_bpreshuffle":
        if profile == "legacy":
            assert argv[1].endswith("csrc/ck_gemm_a8w8_blockscale_bpreshuffle/"
                                    "gemm_a8w8_blockscale_bpreshuffle_tune.py")
            assert "--preshuffle" not in argv
        else:
            assert argv[1].endswith("csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py")
            assert "--preshuffle" in argv
    else:
        assert "--preshuffle" not in argv
    assert argv[argv.index("-i") + 1] == st["remote"]["untuned_csv"]
    assert argv[argv.index("-o") + 1] == st["remote"]["tuned_csv"]
    assert ("--timeout" in argv) == prof.has_flag("--timeout")
    # registry flags that exist only on some tuners are passed where the node's tuner --help lists them
    helped = help_flags(st["facts"]["probes"].get("tuner_help") or "")
    for frag in v.probed_flags:
        assert (frag[0] in argv) == (frag[0] in helped), (frag, argv)
        if frag[0] in argv:
            assert argv[argv.index(frag[0]):argv.index(frag[0]) + len(frag)] == list(frag)
    # the shipped model tables are never written (a8w8_mxfp8_bpreshuffle's default -o is one of them)
    assert _model_tables(ctr) == models0
    _assert_outcome(ctr, st, got, v)


def _model_tables(ctr) -> str:
    """Every shipped aiter/configs/model_configs/ table of the container, names and contents."""
    d = f"{ctr.inst.package_dir}/configs/model_configs"
    script = f'cd {d} && for f in *.csv; do [ -f "$f" ] || continue; echo "== $f"; cat "$f"; done'
    return ctr.exec("sh", "-c", script).stdout


def _csv_rows(ctr, path: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(ctr.exec("cat", path).stdout)))
    return [h.strip().lower() for h in rows[0]], [r for r in rows[1:] if r]


def _assert_outcome(ctr, st: dict, got, v) -> None:
    """Issue 7's contract on every variant and profile: the tuner wrote the job's staging table, never the
    live one; only rows judged 'improved' were promoted (an improved row left out is one another config file
    already covers); the live table = its backup with exactly the promoted staging rows merged in."""
    r = st["remote"]
    assert r["tuned_csv"].startswith(r["job_dir"] + "/") and r["tuned_csv"] != r["live_csv"], r
    cols, n = list(v.key_columns), len(v.key_columns)
    keyed = {tuple(_n(x[c]) for c in cols): x for _, x in got.iterrows()}
    prom = {k for k, x in keyed.items() if x["promoted"] == "true"}
    improved = {k for k, x in keyed.items() if x["verdict"] == "improved"}
    assert prom <= improved, prom - improved
    rec = r.get("promotion") or {}
    full = {tuple(_n(x) for x in k) for k in rec.get("promoted") or []}
    assert {k[-n:] for k in full} == prom
    skipped = {tuple(_n(x) for x in k)[-n:] for k in rec.get("skipped_duplicates") or []}
    assert not rec or improved - prom <= skipped, (improved - prom, skipped)
    if not prom:
        return
    l_head, live = _csv_rows(ctr, r["live_csv"])
    _, backup = _csv_rows(ctr, rec["backup"]) if rec.get("backup") else (l_head, [])
    s_head, staging = _csv_rows(ctr, r["tuned_csv"])

    def key_of(head):
        names = [c for c in ("gfx", "cu_num") if c in head] + cols
        return names, (lambda row: tuple(_n(row[head.index(c)]) for c in names))

    (l_names, lk), (s_names, sk) = key_of(l_head), key_of(s_head)

    def on_live(k):     # a staging key on the live table's key columns (a table may lack the gfx column)
        d = dict(zip(s_names, k))
        return tuple(d[c] for c in l_names)

    full_live = {on_live(k) for k in full}
    assert [x for x in live if lk(x) not in full_live] == [x for x in backup if lk(x) not in full_live]
    newest = {on_live(sk(x)): dict(zip(s_head, x)) for x in staging}
    merged = {lk(x): dict(zip(l_head, x)) for x in live if lk(x) in full_live}
    assert set(merged) == full_live and len(merged) == sum(lk(x) in full_live for x in live)
    for k, row in merged.items():
        assert row == {h: newest[k].get(h, "") for h in l_head}, (k, row, newest[k])


# ------------------------------------------------------------------------------------------------
# 2. MoE on legacy: the fp8 block-scale bypass
# ------------------------------------------------------------------------------------------------

def test_moe_legacy_bypass_is_noted_and_shows_no_gain(vnode, env):
    from orchestrator.moe_quant import moe_bypassed
    ctr = vnode.container("aiter-moe")
    rc, job = run_cli(env, vnode, ctr, "moe_2stages", *log_args(ctr, ["--log", SGLANG]), m_preset="1,4")
    st = state_of(job)
    assert rc == 0, st.get("error")
    notes = st["notes"]
    bypass = [n for n in notes if "token*topk <= 128" in n]
    assert len(bypass) == 1, notes
    assert "0.1.11" in bypass[0]
    md = (job / "report.md").read_text()
    assert "token*topk <= 128" in md
    got = assert_comparison_matches_model(job, "moe_2stages", "0.1.11")
    prof = profile_for((0, 1, 11))
    bypassed = [s for s in st["shapes"] if moe_bypassed(s, prof)]
    assert bypassed, "the log should give block-scale shapes with token*topk <= 128"
    for s in bypassed:
        row = got[(got["token"] == str(s["token"])) & (got["q_type"] == s["q_type"])]
        assert len(row) == 1
        assert float(row["speedup_pct"].iloc[0]) == 0.0
        assert row["before"].iloc[0] == row["after"].iloc[0]
    # ... while a tuned, non-bypassed shape does gain
    others = got[~got.index.isin([i for i, r in got.iterrows() if any(
        str(s["token"]) == r["token"] and s["q_type"] == r["q_type"] for s in bypassed)])]
    assert (others["speedup_pct"].astype(float) > 0).any()


# ------------------------------------------------------------------------------------------------
# 3. a4w4 on gfx942 refuses before anything runs
# ------------------------------------------------------------------------------------------------

def test_a4w4_on_gfx942_refuses_clearly(make_node, env, capsys):
    node = make_node({"gfx": "gfx942", "cu_num": 304}, proxy=False)
    [ctr] = node.containers.values()
    capsys.readouterr()
    rc, job = run_cli(env, node, ctr, "a4w4_blockscale", "--nk", "7168,2048")
    assert rc == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("tune-remote: error:")]
    assert len(lines) == 1, err
    assert "gfx950" in lines[0] and "gfx942" in lines[0]
    assert ctr.launches() == []
    st = state_of(job)
    assert st["state"] == "failed" and st["steps"]["discover"]["status"] == "failed"
    assert not st["remote"].get("run_dir")


# ------------------------------------------------------------------------------------------------
# 4. install mode (no op_tests): tune only
# ------------------------------------------------------------------------------------------------

def test_install_mode_tunes_without_benchmark(vnode, env):
    ctr = vnode.container("aiter-inst")         # install mode: no op_tests/ in site-packages
    assert ctr.install_mode == "install"
    assert not ctr.host_path(f"{ctr.aiter_root}/op_tests").exists()
    rc, job = run_cli(env, vnode, ctr, "a8w8_blockscale", "--nk", "4096,1024", m_preset="1,64,1024")
    st = state_of(job)
    assert rc == 0, st.get("error")
    assert st["state"] == "succeeded"
    assert len(ctr.launches()) == 1
    assert any("no benchmark" in n for n in st["notes"]), st["notes"]
    assert [s["name"] for s in st["remote"]["pipeline"]] == ["tune"]
    v = get_variant("a8w8_blockscale")
    tuned = job / "a8w8_blockscale_tuned_gemm.csv"
    keys = tuned_keys(tuned, v, st["facts"]["gfx"], int(st["facts"]["cu_num"]))
    no_kernel = expected_no_kernel(job, st, v)
    assert len(no_kernel) < len(st["shapes"])
    for s in st["shapes"]:
        assert ((_n(s["m"]), _n(s["n"]), _n(s["k"])) in keys) == (s not in no_kernel), s
    md = (job / "report.md").read_text()
    assert not (job / "comparison.csv").exists() or "no comparison" in md.lower()
    assert "no benchmark" in md


# ------------------------------------------------------------------------------------------------
# 6. A6W6 (MXFP6): newest AITER only, tune only, its lookups need AITER_LOG_TUNED_CONFIG=1
# ------------------------------------------------------------------------------------------------

A6W6_LOG = REPO_ROOT / "tests" / "fixtures" / "logs" / "after_v0120_a6w6_gelutanh.log"


def test_a6w6_tunes_on_the_newest_aiter(vnode, env):
    ctr = _container(vnode, "newest")
    launches0 = len(ctr.launches())
    rc, job = run_cli(env, vnode, ctr, "a6w6", "--log", f"local:{A6W6_LOG}", m_preset="logged")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert st["state"] == "succeeded" and st["facts"]["profile"] == "newest"
    # the log's two A6W6 misses (hits are not tuned); logged M kept, no sweep over other M
    assert sorted((s["m"], s["n"], s["k"]) for s in st["shapes"]) == [(16, 2048, 7168), (300, 7168, 2048)]
    argv = st["remote"]["tune_argv"]
    assert argv[1] == f"{st['remote']['meta_root']}/csrc/gemm_a6w6/gemm_a6w6_tune.py"
    assert st["remote"]["live_csv"].endswith("aiter/configs/a6w6_blockscale_tuned_gemm.csv")
    assert len(ctr.launches()) == launches0 + 1
    assert [p["name"] for p in st["remote"]["pipeline"]] == ["tune"]
    assert any("no benchmark" in n for n in st["notes"]), st["notes"]
    v = get_variant("a6w6")
    tuned = job / "a6w6_blockscale_tuned_gemm.csv"
    assert header_of(tuned)[:5] == ["gfx", "cu_num", "M", "N", "K"]
    keys = tuned_keys(tuned, v, "gfx950", 256)
    no_kernel = expected_no_kernel(job, st, v)
    for s in st["shapes"]:
        assert ((_n(s["m"]), _n(s["n"]), _n(s["k"])) in keys) == (s not in no_kernel), s
    rows = [ln.split(",") for ln in tuned.read_text().splitlines()[1:]]
    assert all(r[8].startswith("f6gemm_") for r in rows)


def test_a6w6_log_without_its_lines_says_to_set_the_env(vnode, env):
    ctr = _container(vnode, "newest")
    rc, job = run_cli(env, vnode, ctr, "a6w6", *log_args(ctr, ["--log", VLLM]), "--nk", "2048,7168",
                      m_preset="16")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    gate = [n for n in st["notes"] if "AITER_LOG_TUNED_CONFIG=1" in n]
    assert len(gate) == 1 and "a6w6" in gate[0], st["notes"]
    assert "AITER_LOG_TUNED_CONFIG=1" in (job / "report.md").read_text()


def test_a6w6_refused_on_an_aiter_without_its_tuner(vnode, env, capsys):
    ctr = _container(vnode, "current")
    launches0 = len(ctr.launches())
    capsys.readouterr()
    rc, job = run_cli(env, vnode, ctr, "a6w6", "--nk", "2048,7168", m_preset="16")
    err = capsys.readouterr().err
    assert rc != 0
    assert "a6w6 needs AITER >= 0.1.21" in err and "0.1.20" in err and "hint:" in err
    assert len(ctr.launches()) == launches0


# ------------------------------------------------------------------------------------------------
# 6b. the MX tuners without an op_test tune-remote reads (variants_mx.py): newest only, each on a node of its
#     GPU (a6w4 and a4w6 gfx950, a16w8_mxfp8 gfx942 only); measured by their tuner's own --run_config where the
#     entry says so (bmm_a8w8_mxscale_bpreshuffle: one no-CSV call per arm), else tune only
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [v.name for v in MX_VARIANTS if v.bench is None or v.bench.style == "run_config"])
def test_an_mx_tuner_without_a_benchmark_tunes_its_own_table(vnode, make_node, env, variant):
    v = get_variant(variant)
    if "gfx950" in v.requires_gfx:
        node, ctr = vnode, _container(vnode, "newest")
    else:
        [gfx] = v.requires_gfx
        node = make_node(ContainerSpec(sim={"profile": "newest", "gfx": gfx, "cu_num": 304}), proxy=False)
        [ctr] = node.containers.values()
    launches0 = len(ctr.launches())
    rc, job = run_cli(env, node, ctr, variant, *log_args(ctr, SOURCES.get(variant, ["--nk", "7168,2048"])),
                      m_preset="1,16")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert st["state"] == "succeeded" and st["facts"]["profile"] == "newest"
    argv = st["remote"]["tune_argv"]
    assert argv[1] == f"{st['remote']['meta_root']}/{v.tune_script}"
    assert "-k" not in argv and "--splitK" not in argv
    assert st["remote"]["live_csv"].endswith(v.tuned_csv)
    assert len(ctr.launches()) == launches0 + 1
    if v.bench is None:
        assert [p["name"] for p in st["remote"]["pipeline"]] == ["tune"]
        assert any("no benchmark" in n for n in st["notes"]), st["notes"]
    else:
        assert [p["name"] for p in st["remote"]["pipeline"]] == ["baseline", "tune", "after"]
        assert any("measured by the tuner itself (--run_config" in n for n in st["notes"]), st["notes"]
    tuned = job / Path(v.tuned_csv).name
    assert header_of(tuned) == TUNED_HEADERS.get(variant, ["gfx", "cu_num", "M", "N", "K", "kernelId", "splitK", "us",
                                                           "kernelName", "tflops", "bw", "errRatio"])
    gfx, cu = st["facts"]["gfx"], int(st["facts"]["cu_num"])
    keys = tuned_keys(tuned, v, gfx, cu)
    no_kernel = expected_no_kernel(job, st, v)
    # a16w8_mxfp8 writes no row where BF16 is faster ("[bf16-guard] ... DROP"; the sim: outcome "regressed")
    # and exits 0: the job lists those shapes as tuned to no row, with the no-kernel ones
    dropped = [s for s in st["shapes"] if variant == "a16w8_mxfp8"
               and perf_model.outcome(variant, s, gfx, cu) == "regressed"]
    assert bool(dropped) == (variant == "a16w8_mxfp8")        # M 16 of 7168x2048 on gfx942/304
    assert st["shapes"] and len(no_kernel) + len(dropped) < len(st["shapes"])
    assert st["steps"]["compare"]["info"]["tuned"]["no_kernel"] == [s for s in st["shapes"]
                                                                    if s in no_kernel or s in dropped]
    for s in st["shapes"]:
        assert (tuple(_n(s[c]) for c in v.key_columns) in keys) == (s not in no_kernel + dropped), s
    if variant == "bmm_a8w8_mxscale_bpreshuffle":   # every logged block tuned (1x32 too: --w_scale_block probed)
        assert {s["w_scale_block"] for s in st["shapes"]} == {"32x32", "128x128", "1x32"}
        assert argv[argv.index("--w_scale_block") + 1] == "1x32,32x32,128x128"
        # measured by ONE no-CSV --run_config per arm (run_config_table=False), each with its arm's AITER_CONFIG_*:
        # before the default kernel (the logged shapes miss the live table), after the staged row's kernel
        assert any("once with its own AITER_CONFIG_*" in n for n in st["notes"]), st["notes"]
        rows = list(csv.DictReader(io.StringIO((job / "comparison.csv").read_text())))
        assert len(rows) == len(st["shapes"]) - len(no_kernel)
        gains = 0
        for r in rows:
            s = {"b": int(r["b"]), "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
                 "w_scale_block": r["w_scale_block"]}
            assert float(r["before"]) == round(perf_model.bench_us(variant, s, gfx, cu), 2), r
            assert float(r["after"]) == round(perf_model.bench_us(variant, s, gfx, cu, tuned_from=s), 2), r
            gains += r["verdict"] == "improved" and float(r["speedup_pct"]) > 0
        assert gains, rows


# ------------------------------------------------------------------------------------------------
# 7. a16w16 (bf16, issue 30): hipBLASLt rows stay on the node; refused where AITER predates its tuner
# ------------------------------------------------------------------------------------------------

def test_a16w16_hipblaslt_rows_are_tuned_but_never_exported(vnode, env, capsys):
    """aiter#3285: hipBLASLt solutions are not portable across containers; export leaves them out and says so."""
    ctr = _container(vnode, "newest")
    rc, job = run_cli(env, vnode, ctr, "bf16", "--nk", "4096,1024", m_preset="1,8,64",
                      extra=("--libtype", "hipblaslt", "--tune-arg=--with-hipblaslt"))
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert st["variant"] == "a16w16" and "--with-hipblaslt" in st["remote"]["tune_argv"]
    rows = list(csv.DictReader(io.StringIO((job / "bf16_tuned_gemm.csv").read_text())))
    mine = [r for r in rows if r["gfx"] == "gfx950" and r["M"] in ("1", "8", "64") and r["N"] == "4096"]
    assert mine and {r["libtype"] for r in mine} == {"hipblaslt"}
    assert all(r["bias"] == "False" and r["dtype"] == "torch.bfloat16" for r in mine)
    got = assert_comparison_matches_model(job, "a16w16", VERSIONS["newest"])
    improved = int((got["verdict"] == "improved").sum())
    assert improved, got   # the model has hipBLASLt rows that win here: the export must leave them out
    capsys.readouterr()
    inv = env / "inventory.yaml"
    assert main(["--inventory", str(inv), "--workspace", str(env / "ws"), "export", job.name,
                 "--model-config", "llama"]) == 0
    out = (job / "export" / "llama_bf16_tuned_gemm.csv").read_text().splitlines()
    assert len(out) == 1 and out[0].startswith("gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype")
    md = (job / "export" / "llama_bf16_tuned_gemm.md").read_text()
    assert f"Left out: {improved} hipBLASLt row(s)" in md, md


@pytest.mark.parametrize("variant", [v for v in VARIANTS if (VARIANTS[v].since or (0, 0, 0)) > (0, 1, 20)
                                     and "gfx950" in (VARIANTS[v].requires_gfx or {"gfx950"})])  # the node's GPU
def test_a_newer_tuner_is_refused_on_an_aiter_without_it(vnode, env, capsys, variant):
    """Capability gating (tune_script_exists): the current container (0.1.20) has no such tuner."""
    ctr = _container(vnode, "current")
    launches0 = len(ctr.launches())
    capsys.readouterr()
    if get_variant(variant).family == "gemm":
        rc, job = run_cli(env, vnode, ctr, variant, "--nk", "7168,2048", m_preset="16")
    elif variant in SOURCES:    # the MXFP8 BMM (batched): its runtime's miss lines
        rc, job = run_cli(env, vnode, ctr, variant, *log_args(ctr, SOURCES[variant]), m_preset=None)
    else:   # fhmoe takes no --nk: its shape from the runtime's raise (shapelib/shapefhmoe.py)
        log = env / "fhmoe_server.log"
        log.write_text("NotImplementedError: The active FHMoE config does not cover this HY4 MXFP8 token shape: "
                       "M=3000\n")
        rc, job = run_cli(env, vnode, ctr, variant, "--log", f"local:{log}", m_preset=None)
    err = capsys.readouterr().err
    assert rc != 0
    assert f"{variant} needs AITER >= " in err and "is not on this node" in err and "0.1.20" in err, err
    assert "hint:" in err
    assert len(ctr.launches()) == launches0


def test_mxfp8_shapes_from_its_runtime_miss_lines(vnode, env, tmp_path):
    """gemm_a8w8_mxfp8_bpreshuffle looks up through get_CKGEMM_config: its miss lines name its merged table."""
    log = tmp_path / "server.log"
    miss = ("[aiter] shape is M:{m}, N:7168, K:2048, not found tuned config in "
            "/tmp/aiter_configs/a8w8_mxfp8_bpreshuffle_tuned_gemm.csv, will use default config!\n")
    log.write_text(miss.format(m=16) + miss.format(m=300) + miss.format(m=16))
    ctr = _container(vnode, "newest")
    rc, job = run_cli(env, vnode, ctr, "a8w8_mxfp8_bpreshuffle", "--log", f"local:{log}", m_preset="logged")
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert sorted((s["m"], s["n"], s["k"]) for s in st["shapes"]) == [(16, 7168, 2048), (300, 7168, 2048)]
    assert st["remote"]["tune_argv"][1].endswith("csrc/gemm_a8w8_mxfp8_bpreshuffle/gemm_a8w8_mxfp8_bpreshuffle_tune.py")


def test_a8w8_backend_opus_is_refused_before_anything_runs(vnode, env, capsys):
    """gemm_a8w8_tune.py --backend opus (newest): its rows would land in the CK table tune-remote promotes."""
    ctr = _container(vnode, "newest")
    launches0 = len(ctr.launches())
    capsys.readouterr()
    rc, job = run_cli(env, vnode, ctr, "a8w8", "--nk", "7168,2048", m_preset="16",
                      extra=("--tune-arg=--backend opus",))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--backend opus is not tuned by tune-remote" in err and "hint:" in err
    assert len(ctr.launches()) == launches0


def test_a16w16_refused_on_an_aiter_without_its_tuner(vnode, env, capsys):
    ctr = _container(vnode, "legacy")
    launches0 = len(ctr.launches())
    capsys.readouterr()
    rc, job = run_cli(env, vnode, ctr, "a16w16", "--nk", "4096,1024", m_preset="16")
    err = capsys.readouterr().err
    assert rc != 0 and "a16w16 needs AITER >= 0.1.16" in err and "0.1.11" in err and "hint:" in err
    assert len(ctr.launches()) == launches0


# ------------------------------------------------------------------------------------------------
# 5. shapes from every log form, locally and on the node
# ------------------------------------------------------------------------------------------------

LOG_NAMES = [log.name for log in simlogs.log_specs()]


@pytest.mark.parametrize("name", LOG_NAMES)
def test_shapes_from_every_log_form(vnode, name, capsys):
    from orchestrator.context import Target
    from orchestrator.inventory import load_inventory
    ctr = _container(vnode, "current")
    host_copy = Path(ctr.inst.host_path(f"{ctr.inst.logs_dir}/{name}"))
    assert host_copy.is_file()
    capsys.readouterr()
    assert main(["shapes", str(host_copy), "--json"]) == 0
    out = capsys.readouterr().out
    local = json.loads(out)
    expected = simlogs.expected_shapes(name)
    assert local == expected
    for shapes in local.values():
        for s in shapes:
            assert all(k == k.lower() for k in s)

    # the same parse, done on the node by the helper (streamed inside the container)
    inv_path = write_inventory(Path(vnode.dir) / f"inv-{os.getpid()}.yaml", vnode)
    inv = load_inventory(str(inv_path))
    spec = inv.node(vnode.alias)
    target = Target(spec, spec.container(ctr.name))
    try:
        target.connect()
        res = target.helper.call("shapes", {"logs": [f"{ctr.inst.logs_dir}/{name}"], "variant": None})
    finally:
        target.close()
    assert res["ok"] and res["missing"] == []
    assert res["shapes"] == local


@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_a_dense_log_is_mined_in_several_processes_inside_the_container(vnode, profile):
    """The helper (threads running, an op deadline armed) forks workers in the container; the answer is the
    one-process answer, on the newest and the oldest Python the profiles run."""
    from orchestrator.context import Target
    from orchestrator.inventory import load_inventory
    from orchestrator.shapelib import shapelog
    ctr = _container(vnode, profile)
    node_path = f"{ctr.inst.logs_dir}/dense-{os.getpid()}.log"
    host_copy = Path(ctr.inst.host_path(node_path))
    simlogs.write_large_log(host_copy, 6 << 20)
    local = shapelog.parse_files([host_copy], procs=1)
    inv = load_inventory(str(write_inventory(Path(vnode.dir) / f"inv-{os.getpid()}.yaml", vnode)))
    spec = inv.node(vnode.alias)
    target = Target(spec, spec.container(ctr.name))
    try:
        target.connect()
        res = target.helper.call("shapes", {"logs": [node_path], "variant": None, "procs": 3, "min_range": 1 << 20})
        one = target.helper.call("shapes", {"logs": [node_path], "variant": None, "procs": 1})
        assert target.helper.call("version")["ok"]          # the helper itself lives on
    finally:
        target.close()
        host_copy.unlink()
    assert res["ok"] and res["ranges"] == {"counted": 3, "scanned": 0, "processes": 3}
    assert one["ranges"] == {"counted": 0, "scanned": 0, "processes": 1}             # 6 MB < 2 x 32 MB
    for key in ("shapes", "counts", "misses", "hits", "warnings", "lines", "bytes"):
        assert res[key] == one[key] == json.loads(json.dumps(getattr(local, key))), key


def test_bmm_mxscale_padded_m_tunes_one_row_per_padded_bucket(vnode, env):
    """run --padded-m on the batched MXFP8 BMM (padded_m_lookup: its opus policy walks M, getPaddedM gl 0, 1):
    M 1 and 16 are one tuning at 16, and the plan says so."""
    ctr = _container(vnode, "newest")
    v = get_variant("bmm_a8w8_mxscale_bpreshuffle")
    rc, job = run_cli(env, vnode, ctr, v.name, *log_args(ctr, SOURCES[v.name]), m_preset="1,16",
                      extra=("--padded-m",))
    st = state_of(job)
    assert rc == 0, (st.get("error"), st.get("notes"))
    assert {s["m"] for s in st["shapes"]} == {16, 64}          # logged 1, 16, 64 and the preset's 1, 16
    assert any("padded-M grid" in n and "1->16" in n for n in st["notes"]), st["notes"]


def test_bmm_mxscale_on_the_old_opus_base_is_refused_before_anything_runs(vnode, env, capsys):
    """A node whose opus base has neither --w_scale_block nor --groupSize (ROCm/aiter 0a990d64) would write the
    shipped model table whatever -o says: refused from its --help (help_requires), exit 2, nothing launched."""
    from tests.unit.test_bmm_old_tuner_and_padded_m import BMM_MODEL_TABLE_PATH, old_base
    ctr = _container(vnode, "newest")
    v = get_variant("bmm_a8w8_mxscale_bpreshuffle")
    script = Path(ctr.inst.host_path(ctr.inst.script(v.tune_script)))
    model = Path(ctr.inst.host_path(BMM_MODEL_TABLE_PATH(ctr.inst)))
    original, shipped = script.read_text(), model.read_text()
    launches0 = len(ctr.launches())
    capsys.readouterr()
    try:
        old_base(script)
        rc, job = run_cli(env, vnode, ctr, v.name, *log_args(ctr, SOURCES[v.name]), m_preset="16")
        # a campaign's plan (a dry run is one) reads the same --help in its probe and refuses the named variant
        err = capsys.readouterr().err
        (env / "plan").mkdir()
        plan_rc, _ = run_cli(env / "plan", vnode, ctr, v.name, *log_args(ctr, SOURCES[v.name]), m_preset="16",
                             extra=("--dry-run",))
        plan_err = capsys.readouterr().err
    finally:
        script.write_text(original)
        written = model.read_text()
        model.write_text(shipped)           # the next test sees the shipped table whatever happened here
    assert rc == 2 and written == shipped, err
    assert plan_rc == 2, plan_err
    said = [x for x in plan_err.splitlines() if "cannot be tuned there" in x]
    assert len(said) == 1 and f"{v.name} cannot be tuned there: its AITER 0.1.29 has no --w_scale_block or " \
        "--groupSize in its tuner's --help" in said[0] and "shipped table" in said[0], plan_err
    line = next(x for x in err.splitlines() if "is refused on AITER" in x)
    assert f"{vnode.alias}: {v.name} is refused on AITER 0.1.29" in line and "shipped table" in line, err
    assert "--w_scale_block, --groupSize" in line and "hint:" in err
    assert len(ctr.launches()) == launches0
