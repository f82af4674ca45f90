"""aiter/jit/core.py (simulated): root/meta dirs, tuned-config resolution, JIT "build" of modules.

A built module is ``{jit_dir}/{md_name}.so``: a JSON file recording the tuned CSV it was generated from
(path, sha256) and a snapshot of its rows -- CK GEMM modules compile exactly the kernel instances named
in the tuned CSV, so new rows take effect only after a rebuild (``AITER_REBUILD=1`` or deleting the .so).
"""

import functools
import glob
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import time

from .. import logger
from .._sim import LEGACY, perf_model, read_control
from .._sim.frame import columns_of, norm, read_csv, write_csv

this_dir = os.path.dirname(os.path.abspath(__file__))
AITER_ROOT_DIR = os.path.abspath(f"{this_dir}/../../")


def _install_mode():
    try:
        with open(f"{this_dir}/../install_mode") as fh:
            return fh.read().strip()
    except OSError:
        return "develop"  # pip install -e


INSTALL_MODE = _install_mode()
if INSTALL_MODE == "develop" or "editable" in INSTALL_MODE:
    AITER_META_DIR = AITER_ROOT_DIR
else:
    AITER_META_DIR = os.path.join(AITER_ROOT_DIR, "aiter_meta")
AITER_META_DIR = os.environ.get("AITER_META_DIR", AITER_META_DIR)
AITER_CSRC_DIR = f"{AITER_META_DIR}/csrc"
AITER_CONFIG_DIR = f"{AITER_ROOT_DIR}/aiter/configs"

AITER_REBUILD = int(os.environ.get("AITER_REBUILD", "0"))
AITER_LOG_TUNED_CONFIG = int(os.getenv("AITER_LOG_TUNED_CONFIG", "0"))

# env name -> tuned base name (= merge_name)
CONFIG_FILES = {
    "AITER_CONFIG_GEMM_A4W4": "a4w4_blockscale_tuned_gemm",
    "AITER_CONFIG_GEMM_A8W8": "a8w8_tuned_gemm",
    "AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE": "a8w8_bpreshuffle_tuned_gemm",
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": "a8w8_blockscale_tuned_gemm",
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE": "a8w8_blockscale_bpreshuffle_tuned_gemm",
    "AITER_CONFIG_FMOE": "tuned_fmoe",
    "AITER_CONFIG_A8W8_BATCHED_GEMM": "a8w8_tuned_batched_gemm",
    "AITER_CONFIG_BF16_BATCHED_GEMM": "bf16_tuned_batched_gemm",
    "AITER_CONFIG_GEMM_BF16": "bf16_tuned_gemm",
#@ if newest
    "AITER_CONFIG_GEMM_A6W6": "a6w6_blockscale_tuned_gemm",
    "AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE": "a8w8_mxfp8_bpreshuffle_tuned_gemm",
#@ endif
}
# a variant the tree has no file for (orchestrator/sim/fromfacts.serve_variant): its table under its own variable
for _f in perf_model.EXTRA.values():
    CONFIG_FILES.setdefault(_f["config_env"], os.path.basename(_f["tuned_csv"])[:-len(".csv")])

# module-level values read at import time, as the tuners use them for their -o default
AITER_CONFIG_GEMM_A4W4 = os.getenv("AITER_CONFIG_GEMM_A4W4", f"{AITER_CONFIG_DIR}/a4w4_blockscale_tuned_gemm.csv")
AITER_CONFIG_GEMM_A8W8 = os.getenv("AITER_CONFIG_GEMM_A8W8", f"{AITER_CONFIG_DIR}/a8w8_tuned_gemm.csv")
AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE = os.getenv(
    "AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE", f"{AITER_CONFIG_DIR}/a8w8_bpreshuffle_tuned_gemm.csv")
AITER_CONFIG_GEMM_A8W8_BLOCKSCALE = os.getenv(
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", f"{AITER_CONFIG_DIR}/a8w8_blockscale_tuned_gemm.csv")
AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE = os.getenv(
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE",
    f"{AITER_CONFIG_DIR}/a8w8_blockscale_bpreshuffle_tuned_gemm.csv")
AITER_CONFIG_FMOE = os.getenv("AITER_CONFIG_FMOE", f"{AITER_CONFIG_DIR}/tuned_fmoe.csv")
#@ if newest
AITER_CONFIG_GEMM_A6W6 = os.getenv("AITER_CONFIG_GEMM_A6W6", f"{AITER_CONFIG_DIR}/a6w6_blockscale_tuned_gemm.csv")
#@ endif
AITER_CONFIG_A8W8_BATCHED_GEMM = os.getenv(
    "AITER_CONFIG_A8W8_BATCHED_GEMM", f"{AITER_CONFIG_DIR}/a8w8_tuned_batched_gemm.csv")
AITER_CONFIG_BF16_BATCHED_GEMM = os.getenv(
    "AITER_CONFIG_BF16_BATCHED_GEMM", f"{AITER_CONFIG_DIR}/bf16_tuned_batched_gemm.csv")
AITER_CONFIG_GEMM_BF16 = os.getenv("AITER_CONFIG_GEMM_BF16", f"{AITER_CONFIG_DIR}/bf16_tuned_gemm.csv")


def _merge(paths, merge_name):
    """Merge several tuned CSVs into /tmp/aiter_configs/<merge_name>.csv (lowest us per key wins)."""
    cols, rows = [], []
    for p in paths:
        c, r = read_csv(p)
        cols = columns_of([], cols + [x for x in c if x not in cols])
        rows.extend(r)
    keycols = [c for c in cols if c not in ("kernelId", "splitK", "us", "kernelName", "tflops", "bw",
                                               "errRatio", "err_ratio", "libtype", "solidx", "block_m",
                                               "ksplit", "us1", "kernelName1", "err1", "us2",
                                               "kernelName2", "err2", "run_1stage", "xbf16", "flat")]
    best = {}
    order = []
    dup_count = 0
    for r in rows:
        k = tuple(norm(r.get(c, "")) for c in keycols)
        if k not in best:
            order.append(k)
            best[k] = r
        else:
            dup_count += 1
            try:
                if float(r.get("us", "inf")) < float(best[k].get("us", "inf")):
                    best[k] = r
            except ValueError:
                pass
    out = f"/tmp/aiter_configs/{merge_name}.csv"
    write_csv(out, cols, [best[k] for k in order])
#@ if current
    if dup_count:  # v0.1.12+: duplicate keys across merged files make the first process raise
        raise RuntimeError(
            f"Found {dup_count} duplicate shape entries during merge of '{merge_name}'. Auto-resolved by keeping "
            "best performing (lowest 'us') for each shape and saved back to source config files. Please re-run.")
#@ endif
    return out


@functools.lru_cache(maxsize=None)
def get_config_file(env_name):
    merge_name = CONFIG_FILES[env_name]
    default_file = f"{AITER_CONFIG_DIR}/{merge_name}.csv"
    val = os.environ.get(env_name)
    if not val:
        found = sorted(
            f for f in glob.glob(f"{AITER_CONFIG_DIR}/model_configs/*{merge_name}*.csv") if "untuned" not in f
        )
        if not found:
            return default_file
        tuned_files = ":".join([default_file] + found)
        logger.info(f"merge tuned file under model_configs/ and configs/ {tuned_files}")
        return _merge([default_file] + found, merge_name)
    if os.pathsep not in val:
        return val
    paths = [p for p in val.split(os.pathsep) if p]
    existing = []
    for i, p in enumerate(paths):
        if os.path.exists(p):
            existing.append(p)
        else:
            logger.info(f"path {i + 1}: {p} (not exist)")
    if not existing:
        raise FileNotFoundError(f"none of the tuned config files exist: {val}")
    return _merge(existing, merge_name)


class _AiterConfigs(object):
    def __getattr__(self, name):
        if name.endswith("_FILE") and name[:-5] in CONFIG_FILES:
            return get_config_file(name[:-5])
        raise AttributeError(name)


AITER_CONFIGS = _AiterConfigs()


# ------------------------------------------------------------------------------------------- JIT

def get_user_jit_dir():
    env = os.environ.get("AITER_JIT_DIR")
    if env:
        os.makedirs(env, exist_ok=True)
        return env
    if os.access(this_dir, os.W_OK):
        return this_dir
    home = os.path.expanduser("~/.aiter/jit")
    os.makedirs(home, exist_ok=True)
    return home


def _prefix():
#@ if current
    return f"[pid={os.getpid()} pname={multiprocessing.current_process().name}] "
#@ endif
#@ if legacy
    return ""
#@ endif


def _sha256(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 16), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


# Fixed instance lists of modules generated without a tuned CSV (the MoE 2-stage codegen, seed 004; the
# *_tune modules compile every candidate)
_MOE_TILES = ("gemm1_256x128x128x128_1x4", "gemm1_256x32x128x128_1x4", "gemm1_256x64x128x128_1x4",
              "gemm1_64x32x32x128_1x1", "gemm2_256x128x128x128_1x4", "gemm2_256x32x128x128_1x4",
              "gemm2_256x64x128x128_1x4", "gemm2_64x128x128x128_1x1", "gemm2_64x32x32x128_1x1",
              "gemm2_64x64x128x128_1x1")
_TUNE_TILES = ("256x16x64x256", "256x32x64x256", "256x64x128x128", "256x128x128x128", "256x128x256x64",
               "256x256x128x64", "128x16x32x512", "256x64x64x256")


def _units(md_name, rows):
    """The translation units ninja compiles for a module: one CK instance per distinct kernel of the tuned
    CSV (gen_instances.py --tune_file), the dispatch TU and the pybind TU. torch's ninja writer names an
    object after its source file (``x.cu`` -> ``x.cuda.o``) in the build dir."""
    base = md_name.replace("module_", "", 1)
    # one CSV feeds several modules: a _cktile module compiles its cktile rows, module_deepgemm_opus the
    # opus rows, the main module the rest (optCompilerConfig.json blob_gen_cmd)
    own = "cktile" if md_name.endswith("_cktile") else "opus" if md_name == "module_deepgemm_opus" else None
    kernels = []
    for r in rows or []:
        lib = str(r.get("libtype") or "ck").strip()
        if lib in ("hipblaslt", "asm", "triton", "flydsl") or (lib if lib in ("cktile", "opus") else None) != own:
            continue
        for c in ("kernelName", "kernelName1", "kernelName2"):
            k = str(r.get(c) or "").strip()
            if k and k not in kernels and not k.startswith("_Z"):
                kernels.append(k)
    if not kernels and "moe_ck2stages" in md_name:
        return ["%s.cuda.o" % n for n in _moe_instances(md_name)] + ["gemm_moe_ck2stages.cuda.o",
                                                                    "moe_ck_2stages_pybind.cuda.o"]
    if not kernels and md_name.endswith("_tune"):
        kernels = ["%s_%s_intrawave_v%d" % (base[:-5], t, 1 + i % 3) for i, t in enumerate(_TUNE_TILES)]
    return ["%s.cuda.o" % k for k in kernels] + ["%s.cuda.o" % base, "%s_pybind.cuda.o" % base]


def _moe_instances(md_name):
    """gen_instances.py's instance names for module_moe_ck2stages_<a>_<b>_preshuffle_<on|off>_<c>_<act>_<q>_
    mulWeightStage<n> (seed 004: moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_Nswizzle0_
    Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16)."""
    m = re.match(r"module_moe_ck2stages_(\w+?)_(\w+?)_preshuffle_(on|off)_(\w+?)_(\w+?)_(per_\w+?|no)_mulWeightStage(\d)",
                 md_name)
    if not m:
        return ["moe_ck2stages_%s_v3" % t for t in _MOE_TILES]
    a, b, shuf, c, act, q, stage = m.groups()
    quant = {"no": 0, "per_tensor": 1, "per_token": 2, "per_1x32": 3, "per_1x128": 4}.get(q.lower(), 3)
    sh = "Shuffled" if shuf == "on" else ""
    dt = "_".join(x.upper() for x in (a, b, c))
    out = []
    for t in _MOE_TILES:
        if t.startswith("gemm1"):
            out.append("moe_ck2stages_%s_MulABScale%s_v3_Nswizzle0_Quant%d_MulRoutedWeight%d_%s_%s"
                       % (t, sh, quant, int(stage == "1"), act, dt))
        else:
            out.append("moe_ck2stages_%s_MulABScaleExpertWeight%s_v3_Nswizzle0_Quant%d_MulRoutedWeight%d_%s"
                       % (t, sh, quant, int(stage == "2"), dt))
    return out


def _compile_ms(unit):
    """Deterministic compile time: a CK instance grows with its tile (seed 004: 256x128 ~50 s), plus jitter."""
    jitter = int(hashlib.sha256(unit.encode()).hexdigest()[:6], 16) % 6000
    m = re.search(r"(\d+)x(\d+)x(\d+)x(\d+)", unit)
    if m:
        return 12000 + int(m.group(2)) * int(m.group(3)) * 24 // 16 + jitter
    return 15000 + jitter // 2 if "pybind" in unit else 14000 + jitter


def _ninja_jobs():
    """check_and_set_ninja_worker: MAX_JOBS when valid, else 0.8 x the CPUs (the simulated node has 64)."""
    cpus = int(read_control().get("build_cpus") or 64)
    try:
        jobs = int(os.environ.get("MAX_JOBS", "0"))
    except ValueError:
        jobs = 0
    cap = max(1, int(cpus * 0.8))
    return cap if jobs <= 0 or jobs > cap else jobs


def _ninja_log(opbd_dir, md_name, rows):
    """Append one build to ``.ninja_log`` like ninja: v5 lines ``start end mtime output cmdhash`` (ms since
    this ninja run started), written in completion order, objects on MAX_JOBS slots, then the link. An
    existing log (the build dir was kept) means an incremental build: only new objects, the dispatch TU
    (its lookup table changed) and the link. Returns the simulated ninja wall time in seconds."""
    os.makedirs(opbd_dir, exist_ok=True)
    path = os.path.join(opbd_dir, ".ninja_log")
    old = []
    try:
        with open(path) as fh:
            old = fh.read().splitlines()
    except OSError:
        pass
    built = {ln.split("\t")[3] for ln in old if ln and not ln.startswith("#") and len(ln.split("\t")) > 3}
    units = _units(md_name, rows)
    base = md_name.replace("module_", "", 1)
    todo = [u for u in units if u not in built or u == "%s.cuda.o" % base
            or u == "gemm_moe_ck2stages.cuda.o"] if built else units
    slots = [0] * _ninja_jobs()
    done = []
    for u in todo:
        i = min(range(len(slots)), key=lambda j: slots[j])
        start = slots[i] + (3 if slots[i] else 0)
        end = start + _compile_ms(u)
        slots[i] = end
        done.append((start, end, u))
    link_start = max([e for _, e, _ in done] or [0]) + 3
    done.sort(key=lambda x: (x[1], x[0]))
    done.append((link_start, link_start + 400 + len(units) * 20, "%s.so" % md_name))
    mtime = time.time_ns()
    lines = old if old and old[0].startswith("# ninja log") else ["# ninja log v5"]
    for start, end, out in done:
        h = int(hashlib.sha256(("%s|%s" % (md_name, out)).encode()).hexdigest()[:16], 16)
        lines.append("%d\t%d\t%d\t%s\t%x" % (start, end, mtime, out, h))
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return done[-1][1] / 1000.0


def instances(md_name, tune_file, rows):
    """CK instances a build compiles (the cost model's unit): the tuned table's distinct kernels, or the
    fixed list of a module generated without one; 0 = a small module like module_aiter_enum."""
    if not tune_file and "moe_ck2stages" not in md_name and not md_name.endswith("_tune"):
        return 0
    return max(0, len(_units(md_name, rows)) - 2)


def _charge_build(md_name, tune_file, rows):
    """Sleep what the build costs on a real node, scaled (sim/costs.py)."""
    try:
        import _simcosts
    except ImportError:  # pragma: no cover - outside a simulated node
        return
    _simcosts.charge(_simcosts.build_s(instances(md_name, tune_file, rows)), "build " + md_name)


def build_module(md_name, tune_file=None):
    """'Compile' a module: logs like aiter's build_module, writes build/<md>/build/.ninja_log and <md>.so."""
    startTS = time.perf_counter()
    simulated = 0.0
    jit_dir = get_user_jit_dir()
    bd_dir = f"{jit_dir}/build"
    op_dir = f"{bd_dir}/{md_name}"
    opbd_dir = f"{op_dir}/build"
    logger.info(f"{_prefix()}start build [{md_name}] under {op_dir}")
    try:
        os.makedirs(f"{opbd_dir}/srcs", exist_ok=True)
        with open(f"{opbd_dir}/build.ninja", "w") as fh:
            fh.write(f"# simulated build of {md_name}\nbuild {md_name}.so: link srcs\n")
        print("Successfully preprocessed all matching files.", flush=True)
        secs = float(read_control().get("build_seconds") or 0.0)
        if secs > 0:
            time.sleep(secs)
        snap = {"module": md_name, "built_at": time.time(), "tune_file": tune_file,
                "tune_file_sha256": None, "columns": [], "rows": []}
        if tune_file:
            snap["tune_file_sha256"] = _sha256(tune_file)
            snap["columns"], snap["rows"] = read_csv(tune_file)
        _charge_build(md_name, tune_file, snap["rows"])
        # the time a real build takes (codegen + ninja), added to the cost line below: nothing sleeps it
        simulated = 1.5 + _ninja_log(opbd_dir, md_name, snap["rows"])
        tmp = f"{jit_dir}/{md_name}.so.tmp.{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(snap, fh)
        os.replace(tmp, f"{jit_dir}/{md_name}.so")
    finally:
        logger.info(
            f"{_prefix()}\033[32mfinish build [{md_name}], cost {time.perf_counter() - startTS + simulated:.1f}s \033[0m"
        )


_loaded = {}
rebuilded_list = []


def get_module(md_name, tune_file=None):
    """Import a module, building it first when its .so is missing or AITER_REBUILD asks for it."""
    if md_name in _loaded:
        return _loaded[md_name]
    jit_dir = get_user_jit_dir()
    so = f"{jit_dir}/{md_name}.so"
    if AITER_REBUILD >= 1 and md_name not in rebuilded_list:
        rebuilded_list.append(md_name)
        if os.path.exists(so):
            os.remove(so)
        if AITER_REBUILD == 1:
            shutil.rmtree(f"{jit_dir}/build/{md_name}", ignore_errors=True)
    if not os.path.exists(so):
        build_module(md_name, tune_file)
    with open(so) as fh:
        mod = json.load(fh)
    logger.info(f"import [{md_name}] under {so}")
    _loaded[md_name] = mod
    return mod
