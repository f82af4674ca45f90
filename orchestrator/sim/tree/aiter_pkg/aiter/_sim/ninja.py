"""The simulated JIT build's cost and ninja log (not part of real AITER): which translation units a module
compiles, how long each takes, the ``.ninja_log`` ninja writes (used by aiter/jit/core.py's build_module)."""

import hashlib
import os
import re
import time

from . import read_control


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


def ninja_log(opbd_dir, md_name, rows):
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


def charge_build(md_name, tune_file, rows):
    """Sleep what the build costs on a real node, scaled (sim/costs.py)."""
    try:
        import _simcosts
    except ImportError:  # pragma: no cover - outside a simulated node
        return
    _simcosts.charge(_simcosts.build_s(instances(md_name, tune_file, rows)), "build " + md_name)
