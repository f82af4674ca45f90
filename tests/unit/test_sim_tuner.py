"""The simulated tuners: CLI per version, CSV schema, skip logic, failures, faults, launch counter."""

import json
import os
from pathlib import Path
import signal
import subprocess

import pytest

from orchestrator.sim import PROFILES as SIM_VERSIONS
from orchestrator.sim import SimSpec, install, read_launches, write_control
from orchestrator.sim import perf_model as pm
from orchestrator.sim.localnode import popen
from orchestrator.variants import VARIANTS, profile_for

from .test_sim_common import ANSI, py, read_csv, write_csv

MOE_BASE = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8, "act_type": "ActivationType.Silu",
            "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
            "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0}

RESULT = "kernelId,splitK,us,kernelName,tflops,bw,errRatio"
HEADERS = {
    "a8w8": "M,N,K,q_dtype_w," + RESULT,
    "a8w8_blockscale": "M,N,K,libtype," + RESULT,
    "a8w8_blockscale_bpreshuffle": "M,N,K,libtype," + RESULT,
    "a8w8_bpreshuffle": "M,N,K,q_dtype_w,libtype," + RESULT,
    "a4w4_blockscale": "M,N,K," + RESULT,
    "a6w6": "M,N,K," + RESULT,
    "a8w8_mxfp8_bpreshuffle": "M,N,K,libtype," + RESULT,
    "a4w4_blockscale_bpreshuffle": "M,N,K,libtype," + RESULT,     # the MX tuners (variants_mx.py)
    "a6w4": "M,N,K," + RESULT,
    "a4w6": "M,N,K," + RESULT,
    "a16w8_mxfp8": "M,N,K," + RESULT,
    "a16w16": "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw",
    "batched_a8w8": "B,M,N,K,kernelId,splitK,us,kernelName,errRatio,tflops,bw",
    "batched_bf16": "B,M,N,K,kernelId,splitK,us,kernelName,errRatio,tflops,bw",
    "moe_2stages": ",".join(pm.MOE_KEY) + ",block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage",
}
BMM = "bmm_a8w8_mxscale_bpreshuffle"
# whole headers: the MXFP8 BMM table's key is lower case with no cu_num (README of ROCm/aiter fb06b88c)
FULL_HEADERS = {BMM: "gfx,b,m,n,k,w_scale_block,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("tunenodes")
    return {"current": install(base / "cur", SimSpec()),
            "legacy": install(base / "leg", SimSpec(profile="legacy")),
            "newest": install(base / "new", SimSpec(profile="newest"))}


@pytest.fixture(scope="module")
def node942(tmp_path_factory):
    """A gfx942 (MI300X, 304 CUs) newest node: a16w8_mxfp8's tuner runs on gfx942 only."""
    return install(tmp_path_factory.mktemp("tune942") / "n942", SimSpec(profile="newest", gfx="gfx942", cu_num=304))


def shapes_for(variant, want="improved", count=2, gfx="gfx950", cu_num=256):
    fam = pm.family(variant)
    if fam == "moe":
        return pm.shapes_with_outcome(variant, want, MOE_BASE, "token", 1, count)
    if fam == "batched":
        base = {"b": 16, "n": 1280, "k": 8192, **({"w_scale_block": "128x128"} if variant == BMM else {})}
        return pm.shapes_with_outcome(variant, want, base, "m", 1, count)
    base = {"n": 1536, "k": 7168}
    if variant in ("a8w8", "a8w8_bpreshuffle"):
        base["q_dtype_w"] = "torch.int8"
    if variant == "a16w16":
        base.update(bias=False, dtype="torch.bfloat16", outdtype="torch.bfloat16", scaleab=False, bpreshuffle=False)
    return pm.shapes_with_outcome(variant, want, base, "m", 1, count, gfx, cu_num)


def untuned_csv(path, variant, shapes):
    cols = VARIANTS[variant].untuned_columns
    return write_csv(path, cols, [[s[c.lower()] for c in cols] for s in shapes])


def tune_argv(inst, variant, untuned, tuned, *extra):
    v = VARIANTS[variant].resolve(profile_for(tuple(int(x) for x in inst.version.split("."))))
    return [v.tune_script, *v.tune_flags, "-i", untuned, "-o", tuned, *extra]


# every variant on every simulated release that ships its tuner (a6w6: newest only)
MATRIX = [(p, v) for p in ("current", "legacy", "newest") for v in VARIANTS
          if VARIANTS[v].since is None or profile_for(tuple(map(int, SIM_VERSIONS[p].split(".")))).version
          >= VARIANTS[v].since]


@pytest.mark.parametrize("profile,variant", MATRIX)
def test_header_and_skip(nodes, node942, tmp_path, profile, variant):
    gfx = VARIANTS[variant].requires_gfx
    inst = nodes[profile] if not gfx or "gfx950" in gfx else node942   # a16w8_mxfp8: gfx942 only
    shapes = shapes_for(variant, gfx=inst.spec.gfx, cu_num=inst.spec.cu_num)
    unt = untuned_csv(tmp_path / "untuned.csv", variant, shapes)
    out = tmp_path / "tuned.csv"
    r = py(inst, *tune_argv(inst, variant, unt, out, "--mp", "2"))
    assert r.returncode == 0, r.stdout + r.stderr
    header, rows = read_csv(out)
    want = HEADERS.get(variant, "")
    if variant == "moe_2stages" and profile != "legacy":
        want += ",xbf16,flat"
    want += ",tflops,bw" if variant == "moe_2stages" else ""
    want = FULL_HEADERS.get(variant) or ("gfx,cu_num," if profile != "legacy" else "cu_num,") + want
    assert ",".join(header) == want
    assert len(rows) == 2 and all(r.get("cu_num", str(inst.spec.cu_num)) == str(inst.spec.cu_num) for r in rows)
    assert {float(r["us"]) for r in rows} == {pm.tune_result(variant, s, inst.spec.gfx, inst.spec.cu_num)["us"]
                                              for s in shapes}
    assert "Distributing" in r.stdout and "across 2 GPUs" in r.stdout
    # rerun: everything already tuned for this (gfx, cu_num) -> nothing to do; with the entry's --all
    # (a4w4 bpreshuffle: its table's CK rows would else hide every shape) the same shapes again, rows replaced
    r2 = py(inst, *tune_argv(inst, variant, unt, out))
    assert r2.returncode == 0
    assert ("no shapes to be tuned, skip tuning" in r2.stderr) == ("--all" not in VARIANTS[variant].tune_flags)
    assert len(read_csv(out)[1]) == 2


def test_progress_result_lines_and_partial_failure(nodes, tmp_path):
    for profile, inst in nodes.items():
        ok = shapes_for("a8w8_blockscale", "improved", 2)
        bad = shapes_for("a8w8_blockscale", "failed", 1)
        unt = untuned_csv(tmp_path / f"u_{profile}.csv", "a8w8_blockscale", ok + bad)
        out = tmp_path / f"t_{profile}.csv"
        r = py(inst, *tune_argv(inst, "a8w8_blockscale", unt, out, "--batch", "1"))
        err = ANSI.sub("", r.stderr)
        assert r.returncode == 1
        assert "[Tuning not Finished] some shapes are not tuned or all failed" in err
        assert "processed 1 batches of 3, Processing Status ====> 33.0% tuned in GemmA8W8BlockScaleTuner" in err
        key = ("'gfx950', 256, " if profile != "legacy" else "256, ") + f"{bad[0]['m']}, 1536, 7168"
        assert f"No kernel can be used for ({key})" in err
        assert r.stdout.count("Tuning result for ") == 2
        assert "Tuning Finished. tune 3 shapes" in err
        assert len(read_csv(out)[1]) == 2
        # failed shapes are retried on the next run, the others are skipped
        r2 = py(inst, *tune_argv(inst, "a8w8_blockscale", unt, out))
        assert r2.returncode == 1 and "Tuning Finished. tune 1 shapes" in r2.stderr


def test_batch_of_many_prints_no_per_shape_lines(nodes, tmp_path):
    inst = nodes["current"]
    unt = untuned_csv(tmp_path / "u.csv", "a8w8", shapes_for("a8w8", count=3))
    r = py(inst, *tune_argv(inst, "a8w8", unt, tmp_path / "t.csv"))
    assert r.returncode == 0 and "Tuning result for" not in r.stdout
    assert "processed 1 batches of 1, Processing Status ====> 100.0% tuned in GemmA8W8Tuner" in r.stderr


def test_version_flags(nodes, tmp_path):
    unt = untuned_csv(tmp_path / "u.csv", "a8w8_blockscale", shapes_for("a8w8_blockscale", count=1))
    cur, leg = nodes["current"], nodes["legacy"]
    jit = {"AITER_JIT_DIR": str(tmp_path / "jit")}  # fresh JIT dir: the tune module is built here
    r = py(cur, *tune_argv(cur, "a8w8_blockscale", unt, tmp_path / "c.csv", "--shape_grouped", "-v"), env=jit)
    assert r.returncode == 0 and "timeout=1800s each" in r.stdout and "[Task Grouping]" in r.stdout
    assert "[pid=" in r.stderr and "start build [module_gemm_a8w8_blockscale_tune]" in r.stderr
    r = py(leg, *tune_argv(leg, "a8w8_blockscale", unt, tmp_path / "l.csv", "--shape_grouped"))
    assert r.returncode == 2 and "unrecognized arguments: --shape_grouped" in r.stderr
    r = py(leg, *tune_argv(leg, "a8w8_blockscale", unt, tmp_path / "l.csv"), env={"AITER_JIT_DIR": str(tmp_path / "j2")})
    assert r.returncode == 0 and "no timeout limit" in r.stdout
    assert "[pid=" not in r.stderr and "finish build [module_gemm_a8w8_blockscale_tune], cost" in r.stderr
    r = py(leg, "csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py", "--preshuffle")
    assert r.returncode == 2
    r = py(cur, *tune_argv(cur, "a8w8_blockscale", unt, tmp_path / "x.csv", "--update_improved"))
    assert r.returncode == 2 and "--update_improved requires --compare" in r.stderr


def test_jit_build_once_with_ninja_log(tmp_path):
    inst = install(tmp_path / "n", SimSpec())
    unt = untuned_csv(tmp_path / "u.csv", "a4w4_blockscale", shapes_for("a4w4_blockscale", count=1))
    r1 = py(inst, *tune_argv(inst, "a4w4_blockscale", unt, tmp_path / "t.csv"))
    assert "start build [module_gemm_a4w4_blockscale_tune]" in r1.stderr
    log = tmp_path / "n/aiter/aiter/jit/build/module_gemm_a4w4_blockscale_tune/build/.ninja_log"
    lines = log.read_text().splitlines()
    assert lines[0] == "# ninja log v5" and all(len(x.split("\t")) == 5 for x in lines[1:])
    r2 = py(inst, *tune_argv(inst, "a4w4_blockscale", unt, tmp_path / "t2.csv"))
    assert "start build" not in r2.stderr and "import [module_gemm_a4w4_blockscale_tune] under" in r2.stderr


def test_preshuffle_gotcha_writes_non_preshuffle_table(tmp_path):
    inst = install(tmp_path / "n", SimSpec())
    shapes = shapes_for("a8w8_blockscale_bpreshuffle", count=1)
    unt = untuned_csv(tmp_path / "u.csv", "a8w8_blockscale_bpreshuffle", shapes)
    r = py(inst, "csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py", "--preshuffle", "-i", unt)
    assert r.returncode == 0, r.stderr
    _, rows = read_csv(tmp_path / "n/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv")
    assert any(r["M"] == str(shapes[0]["m"]) and r["N"] == "1536" for r in rows)
    _, pre = read_csv(tmp_path / "n/aiter/aiter/configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv")
    assert not any(r["M"] == str(shapes[0]["m"]) and r["N"] == "1536" for r in pre)


def test_crash_resume_launches_and_mp(tmp_path):
    inst = install(tmp_path / "n", SimSpec())
    shapes = shapes_for("a8w8_blockscale", count=4)
    unt = untuned_csv(tmp_path / "u.csv", "a8w8_blockscale", shapes)
    out = tmp_path / "t.csv"
    write_control(inst, crash_after_shapes=2, fault_once=True)
    env = {"HIP_VISIBLE_DEVICES": "0,1,2,3,4,5"}
    r = py(inst, *tune_argv(inst, "a8w8_blockscale", unt, out, "--batch", "1"), env=env)
    assert r.returncode == 139 and "Memory access fault" in r.stderr
    assert "Tuning results Summary" not in r.stderr
    assert len(read_csv(out)[1]) == 2                      # the two finished batches are on disk
    assert "across 6 GPUs" in r.stdout                     # --mp defaults to the visible GPUs
    r = py(inst, *tune_argv(inst, "a8w8_blockscale", unt, out, "--batch", "1", "--mp", "3"), env=env)
    assert r.returncode == 0 and "across 3 GPUs" in r.stdout
    assert len(read_csv(out)[1]) == 4 and "tune 2 shapes" in r.stderr
    launches = read_launches(inst)
    assert len(launches) == 2
    assert launches[0]["script"].endswith("csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py")
    assert launches[1]["argv"][-2:] == ["--mp", "3"] and launches[1]["hip_visible_devices"] == "0,1,2,3,4,5"
    assert {"script", "argv", "pid", "time"} <= set(launches[0])


def test_hang_blocks_until_killed(tmp_path):
    inst = install(tmp_path / "n", SimSpec())
    unt = untuned_csv(tmp_path / "u.csv", "batched_a8w8", shapes_for("batched_a8w8", count=3))
    out = tmp_path / "t.csv"
    write_control(inst, hang_after_shapes=1)
    p = popen(inst, ["python3", *tune_argv(inst, "batched_a8w8", unt, out, "--batch", "1")])
    try:
        waiting = 0
        for line in p.stdout:  # synchronise on output, not on time
            if line.startswith("Waiting for"):
                waiting += 1
                if waiting == 2:
                    break
        assert waiting == 2
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=0.5)
        assert len(read_csv(out)[1]) == 1
        stalls = Path(inst.host_path(inst.launches_path)).with_name("stalls.jsonl").read_text().splitlines()
        assert [json.loads(x)["done_in_run"] for x in stalls] == [1]      # the test bed's proof it hangs
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert json.loads(open(inst.host_path(inst.control_path)).read())["hang_after_shapes"] == 1


def test_split_k_rows_only_with_k_and_never_from_the_blockscale_bpreshuffle_tuner(nodes, tmp_path):
    """aiter-formats §1.1: CK/CK-Tile split-K candidates are tried only with -k; after-v0.1.20 §2.2: the
    blockscale bpreshuffle tuner hard-codes maxsplitK = 0 (#4448). ASM rows carry their own splitK."""
    inst = nodes["current"]
    seen = {}
    for variant in ("a8w8", "a8w8_blockscale_bpreshuffle"):
        base = {"n": 1536, "k": 7168, **({"q_dtype_w": "torch.int8"} if variant == "a8w8" else {})}
        shapes = [{"m": m, **base} for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)]
        unt = untuned_csv(tmp_path / f"{variant}.csv", variant, shapes)
        for k in ((), ("-k",)):
            out = tmp_path / f"{variant}{len(k)}_tuned.csv"
            r = py(inst, *tune_argv(inst, variant, unt, out, *k))
            assert r.returncode == 0 or "Tuning not Finished" in r.stderr, r.stdout + r.stderr   # the model's failing M
            seen[variant, bool(k)] = {row["splitK"] for row in read_csv(out)[1] if row.get("libtype", "ck") != "asm"}
    assert seen["a8w8", False] == {"0"} and seen["a8w8", True] > {"0"}
    assert seen["a8w8_blockscale_bpreshuffle", False] == seen["a8w8_blockscale_bpreshuffle", True] == {"0"}


def test_the_final_sort_rewrites_the_table_in_place_as_aiter_does(nodes, tmp_path):
    """aiter-formats §1.4: the tuner rewrites its -o file in place (df.to_csv: truncate, write), never
    through a temporary file + rename: same inode afterwards (an audit found the sim's final sort atomic)."""
    inst = nodes["current"]
    shapes = shapes_for("a8w8_blockscale")
    unt = untuned_csv(tmp_path / "untuned.csv", "a8w8_blockscale", shapes)
    out = tmp_path / "tuned.csv"
    out.write_text("")
    inode = out.stat().st_ino
    r = py(inst, *tune_argv(inst, "a8w8_blockscale", unt, out, "--sort", "True"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.stat().st_ino == inode and len(read_csv(out)[1]) == 2


def test_mxfp8_tuner_without_o_writes_the_shipped_model_table(nodes, tmp_path):
    """The trap tune-remote avoids by always passing -o (aiter-december-2026.md): upstream's default -o for
    gemm_a8w8_mxfp8_bpreshuffle_tune.py is the shipped DSv4 model table, not the AITER_CONFIG_* table."""
    inst = nodes["newest"]
    v = VARIANTS["a8w8_mxfp8_bpreshuffle"]
    model = Path(inst.host_path(f"{inst.package_dir}/configs/model_configs/"
                                "dsv4_a8w8_mxfp8_bpreshuffle_tuned_gemm.csv"))
    live = Path(inst.host_path(f"{inst.aiter_root}/{v.tuned_csv}"))
    model0, live0 = model.read_text(), live.read_text()
    shapes = shapes_for(v.name, count=1)
    unt = untuned_csv(tmp_path / "untuned.csv", v.name, shapes)
    try:
        r = py(inst, v.tune_script, "-i", unt, "--mp", "1")
        assert r.returncode == 0, r.stdout + r.stderr
        header, rows = read_csv(model)
        assert header[:6] == ["gfx", "cu_num", "M", "N", "K", "libtype"]
        assert {(x["gfx"], x["M"]) for x in rows} >= {("gfx950", str(shapes[0]["m"]))}
        assert any(x["gfx"] == "gfx1250" for x in rows)      # the shipped rows stay, ours are added
        assert live.read_text() == live0
    finally:
        model.write_text(model0)


def test_a16w8_mxfp8_bf16_guard_and_shape_limits(node942, nodes, tmp_path):
    """As upstream (59663079): a shape BF16 wins gets no row and is no failure (exit 0); M > 64 makes the whole
    run raise; another GPU raises too."""
    v = "a16w8_mxfp8"
    kept = shapes_for(v, "improved", 1, "gfx942", 304)
    bf16 = shapes_for(v, "regressed", 1, "gfx942", 304)
    unt, out = untuned_csv(tmp_path / "u.csv", v, kept + bf16), tmp_path / "t.csv"
    r = py(node942, *tune_argv(node942, v, unt, out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[bf16-guard] M={bf16[0]['m']} N=1536 K=7168" in r.stdout and "action=DROP (BF16 faster)" in r.stdout
    assert "BF16 is faster for these shapes; they have no tuned row:" in r.stderr
    assert [int(x["M"]) for x in read_csv(out)[1]] == [kept[0]["m"]]
    big = untuned_csv(tmp_path / "big.csv", v, [dict(kept[0], m=65)])
    r = py(node942, *tune_argv(node942, v, big, tmp_path / "t2.csv"))
    assert r.returncode == 1 and "unsupported shape (65, 1536, 7168): needs 1 <= M <= 64" in r.stderr
    r = py(nodes["newest"], *tune_argv(nodes["newest"], v, unt, tmp_path / "t3.csv"))
    assert r.returncode == 1 and "A16W8 MXFP8 tuning requires gfx942, got gfx950" in r.stderr


@pytest.mark.parametrize("v,display,default", [("a6w4", "A6W4", "f6f4gemm_bf16_per1x32Fp6Fp4_256x256_s0"),
                                                ("a4w6", "A4W6", "f4f6gemm_bf16_per1x32Fp4Fp6_256x256_s0")])
def test_mixed_mxfp_gain_guard_falls_back_and_split_k_raises(nodes, tmp_path, v, display, default):
    """As upstream (610d1e8e, both entry points run the shared gemm_mixed_mxfp tuner): a candidate that does not
    beat the safe default keeps the default kernel's row; -k makes tune() raise (the whole run exits 1); the
    tuner's own defaults are its family's table and config variable."""
    inst = nodes["newest"]
    kept, guard = shapes_for(v, "improved", 1), shapes_for(v, "regressed", 1)
    unt, out = untuned_csv(tmp_path / "u.csv", v, kept + guard), tmp_path / "t.csv"
    r = py(inst, *tune_argv(inst, v, unt, out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[gain-guard] family={display} M={guard[0]['m']} N=1536 K=7168" in r.stdout and "action=FALLBACK" in r.stdout
    rows = {int(x["M"]): x for x in read_csv(out)[1]}
    assert rows[guard[0]["m"]]["kernelName"] == default
    assert float(rows[guard[0]["m"]]["us"]) == round(pm.default_us(v, guard[0]), 4)
    assert float(rows[kept[0]["m"]]["us"]) == pm.tune_result(v, kept[0])["us"]
    r = py(inst, *tune_argv(inst, v, unt, tmp_path / "t2.csv", "-k"))
    assert r.returncode == 1 and f"{display} does not support split-K" in r.stderr
    # without -o it writes the table its family's config variable names (the other family's is never read)
    own, other = tmp_path / "own.csv", tmp_path / "other.csv"
    env = {VARIANTS[v].config_env: str(own), VARIANTS["a4w6" if v == "a6w4" else "a6w4"].config_env: str(other)}
    r = py(inst, VARIANTS[v].tune_script, "-i", unt, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {int(x["M"]) for x in read_csv(own)[1]} == {kept[0]["m"], guard[0]["m"]} and not other.exists()
