"""The capability probe: what an AITER install ships (tuned-CSV header, the tuner's --help, the op_test's
flags, tuning_tests), read without importing aiter. ``discover`` runs it, and other read-only
ops, as riders: templates resolved here from the facts (run_riders); the laptop uses a rider's answer only
when the resolved request is the one it would have sent (steps/riders.py), else it asks the op itself."""

import os
import re
import subprocess
import sys

from . import cache
from .common import read_file_text
from .kernellist import kernel_list_digest

# the tuner's --help costs a torch + aiter import on a real node (10-30 s): its text is kept in the pushed
# helper's own directory (<base>/helper-<version>/cache, never beside a checkout's sources), keyed by what
# it depends on (_help_key), and read again while none of that changed (issue 9)
_HERE = os.path.dirname(os.path.abspath(__file__))
_PUSHED = os.path.dirname(os.path.dirname(_HERE))   # <base>/helper-<digest>/orchestrator/nodeside/probe.py
HELP_CACHE = os.path.join(_PUSHED, "cache") if os.path.basename(_PUSHED).startswith("helper-") else None

_PLACEHOLDER = re.compile(r"\{(root|meta|gfx)\}")
_EXACT = ("{cu_num}", "{gfx}")      # a whole value: the fact itself (a number, or null when unknown)


def needs_gpu_facts(template):
    return "{gfx}" in repr(template) or "{cu_num}" in repr(template)


def _fill(value, facts, gfx):
    if isinstance(value, list):
        return [_fill(v, facts, gfx) for v in value]
    if not isinstance(value, str):
        return value
    if value in _EXACT:
        return facts.get(value[1:-1])
    values = {"root": facts["aiter_root"], "meta": facts.get("meta_root") or facts["aiter_root"],
              "gfx": gfx or "gfx942"}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], value)


def run_riders(riders, facts, env, ops):
    """{op: {"request": resolved, "answer": ...}} for the ops that ride along with discover (one round trip
    fewer each). Placeholders: ``{root}``, ``{meta}``, ``{gfx}`` inside paths (gfx942 when unknown), and
    ``{cu_num}``/``{gfx}`` as a whole value. ``config_env`` (probe): when the job's environment names a
    table there (first entry; relative to the root), that one is read, as AITER does. A rider named
    ``op@tag`` runs ``op`` too, under its own name: a campaign's plan sends one ``probe@<variant>`` per variant
    it considers, all in one discover (campaign/capable.py)."""
    out = {}
    for name, template in sorted(riders.items()):
        op = name.split("@", 1)[0]
        if op not in ops:
            continue
        req = dict((k, _fill(v, facts, facts.get("gfx"))) for k, v in template.items() if k != "config_env")
        configured = (env.get(template.get("config_env") or "") or "").split(":")[0]
        if configured:
            req["tuned_csv"] = configured if configured.startswith("/") else "%s/%s" % (facts["aiter_root"],
                                                                                        configured)
        out[name] = {"request": req, "answer": ops[op](req)}
    return out


OPTION_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _header(path):
    try:
        with open(path, "r", errors="replace") as fh:
            line = fh.readline()
    except OSError:
        return None
    line = line.strip()
    return [c.strip() for c in line.split(",")] if line else None


def _help_key(python, script, cwd):
    """The --help text's inputs: the interpreter, the script, and every aiter/utility/*.py (base_tuner.py
    defines the common flags since v0.1.6; post_verify.py & co. may add more), by path, size, mtime, inode."""
    exe = cache.interpreter(python)
    utility = os.path.join(cwd, "aiter", "utility")
    try:
        names = sorted(n for n in os.listdir(utility) if n.endswith(".py"))
    except OSError:
        names = []
    return cache.key_of([1, cache.stat_key(exe), cache.stat_key(script), cwd]
                        + [cache.stat_key(os.path.join(utility, n)) for n in names])


def _cached_help(key):
    text = cache.read(HELP_CACHE, "help-%s.txt" % key)
    return text if text and "usage:" in text else None


def _tuner_help(out, req, script):
    """``tuner_help`` (``--help``'s text), from HELP_CACHE while its inputs are unchanged, else by running it."""
    python = req.get("python") or sys.executable
    try:
        timeout = float(req.get("help_timeout") or 180)
    except (TypeError, ValueError):
        timeout = 180.0
    cwd = req.get("aiter_root") or os.path.dirname(script)
    key = _help_key(python, script, cwd)
    cached = _cached_help(key)
    if cached is not None:
        out["tuner_help"], out["tuner_help_cached"] = cached, True
        return
    try:
        proc = subprocess.run([python, script, "--help"], cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        text = proc.stdout.decode("utf-8", "replace")
        if proc.returncode == 0 and "usage:" in text:
            out["tuner_help"] = text
            cache.keep(HELP_CACHE, "help-%s.txt" % key, text)
        else:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            out["tuner_help_problem"] = "%s --help exited %d%s" % (
                os.path.basename(script), proc.returncode, (": " + err[-1][:300]) if err else "")
    except (OSError, subprocess.SubprocessError) as exc:
        out["tuner_help_problem"] = "%s --help failed: %s" % (os.path.basename(script), exc)


def op_probe(req):
    """Capabilities of this AITER install, read from what it ships (never imports aiter here).

    request: {"aiter_root", "meta_root", "python", "tuned_csv", "tune_script", "op_test",
              "fmoe_csv", "help_timeout", "aiter_core"}; every path absolute, each optional.
    answer:  {"tuned_header": [..] or null, "tuner_help": text or null, "tuner_help_cached": true when
              read from HELP_CACHE, "tuner_help_problem",
              "op_test_src_flags": [..] or null, "op_test_markdown": bool or null,
              "tuning_tests": bool or null, "moe_gelutanh": bool or null, "moe_quant_count": l_quant
              entries of a MoE op_test (absent elsewhere),
              "tune_script_exists": bool or null,
              "merge_rule": "raise" | "resolve" | "keep" or null (with ``aiter_core``: nodeside/mergeprobe.py),
              "merge_rule_problem": why it could not be told (absent when it could), "moe_objective" (with
              "moe_tuner_src": the fused-MoE tuner's objective), "moe_padded_tiers" (with "moe_runtime":
              aiter/fused_moe.py's token tiers), "kernel_list": sha256 of the tuner's kernel-list sources
              (nodeside/kernellist.py) or null}"""
    out = {"tuned_header": None, "tuner_help": None, "tuner_help_problem": None,
           "op_test_src_flags": None, "op_test_markdown": None, "tuning_tests": None,
           "moe_gelutanh": None, "tune_script_exists": None}
    if req.get("tuned_csv"):
        out["tuned_header"] = _header(req["tuned_csv"])
    script = req.get("tune_script")
    if script:
        out["tune_script_exists"] = os.path.isfile(script)
    if script and os.path.isfile(script):
        _tuner_help(out, req, script)
        out["kernel_list"] = kernel_list_digest(script)
    test = req.get("op_test")
    if test:
        src = read_file_text(test)
        if src is not None:
            flags = set()
            for m in re.finditer(r"add_argument\(([^)]*)", src):
                for s in re.findall(r"[\"'](--?[A-Za-z][\w-]*)[\"']", m.group(1)):
                    flags.add(s)
            out["op_test_src_flags"] = sorted(flags)
            out["op_test_markdown"] = "to_markdown" in src or "summary (markdown)" in src
            lq = re.search(r"^l_quant = \[\n(.*?)^\]", src, re.M | re.S)     # test_moe_2stage's -q choices
            if lq:
                out["moe_quant_count"] = len(re.findall(r"^\s*\(QuantType\.", lq.group(1), re.M))
    root = req.get("aiter_root")
    if root:
        if os.path.isfile(os.path.join(root, "op_tests", "tuning_tests", "test_csv_validation.py")):
            out["tuning_tests"] = True
        elif os.path.isdir(os.path.join(root, "op_tests")):
            out["tuning_tests"] = False  # a checkout with op_tests but no tuning_tests
        # an install without op_tests/ says nothing: the version decides
    if root:
        out.update(miss_log_facts(root))
    core = req.get("aiter_core")
    if core:        # the duplicate-key merge rule: the node's own merge run on two scratch tables (issue 36)
        from . import mergeprobe  # noqa: PLC0415
        out["merge_rule"], problem = mergeprobe.merge_rule(core, req.get("python"), cache_dir=HELP_CACHE)
        if problem:
            out["merge_rule_problem"] = problem
    fmoe = req.get("fmoe_csv")
    if fmoe:
        text = read_file_text(fmoe)
        if text is not None and "ActivationType.GeluTanh" in text:
            out["moe_gelutanh"] = True
    # ---- fused-MoE facts (issue 36, helper moe): the tuner's objective and the runtime's token lookup
    src = req.get("moe_tuner_src")      # true: the tune script's own source; a path: that file (no --help run)
    src = script if src is True else src
    if src:
        objective = moe_objective(read_file_text(src))
        if objective:
            out["moe_objective"] = objective
    if req.get("moe_runtime"):
        tiers = moe_padded_tiers(read_file_text(req["moe_runtime"]))
        if tiers:
            out["moe_padded_tiers"] = tiers
    return out


# --- issue 36: AITER's own shape capture (#5268), probed in the runtime's source ---------------------------
MISS_ONCE_MARKS = ("_log_CKGEMM_miss_once", "_log_quant_type_miss_once", "_log_GEMM_miss_once")
# the runtime files that print a family's miss line (the registry's ``miss_source``; tests/unit/test_miss_once.py
# checks every one is here), and the text of such a line: "not found tuned config" (GEMM, batched, bf16 and
# the mxscale BMM's "not found tuned/padded config"), A6W6's "has no tuned config", and the fused MoE's
# "[fused_moe] using 2stage default for (...)" (upstream v0.1.20, fc2e5d57: gemm_op_a8w8.py get_CKGEMM_config,
# gemm_op_a4w4.py get_GEMM_config, batched_gemm_op_*.py get_CKBatchedGEMM_config, tuned_gemm.py
# get_GEMM_A16W16_config, fused_moe.py get_2stage_cfgs: each line inside an lru_cached lookup)
MISS_SOURCES = ("aiter/ops/gemm_op_a8w8.py", "aiter/ops/gemm_op_a4w4.py", "aiter/ops/gemm_op_a6w6.py",
                "aiter/ops/batched_gemm_op_a8w8.py", "aiter/ops/batched_gemm_op_bf16.py", "aiter/tuned_gemm.py",
                "aiter/fused_moe.py", "aiter/ops/gemm_op_a6w4.py", "aiter/ops/gemm_op_a4w6.py",
                "aiter/ops/gemm_op_a16w8_mxfp8.py", "aiter/ops/opus/policy.py")
_MISS_TEXT = ("not found tuned", "has no tuned config", "[fused_moe] using", "has no MXFP8 BMM tuned row")
_DEF = re.compile(r"^(?:async\s+)?def\s+\w+")
_CACHED = re.compile(r"^@(?:functools\.)?(?:lru_cache|cache)\b")


def miss_once_of(src):
    """Does this runtime source print each miss line once per shape per process? True where every line that
    prints one sits in a module-level function decorated ``@functools.lru_cache`` (or ``cache``): the lookup
    itself (every release up to v0.1.20) or the ``_log_*_miss_once`` logger of #5268 (f906b111); a repeat
    lookup of the shape never reaches it (bounded by the cache's maxsize: a process with more distinct keys
    than that logs an evicted shape again). False where one is printed outside such a function; None: no
    source, or no miss line in it."""
    if not src:
        return None
    lines = src.splitlines()
    verdicts = []
    for i, line in enumerate(lines):
        if not any(t in line for t in _MISS_TEXT):
            continue
        if not line[:1].isspace() or line.lstrip().startswith("#"):
            continue        # module level (its docstring, a comment): no lookup prints it
        j = i
        while j >= 0 and not _DEF.match(lines[j]):
            j -= 1
        k, cached = j - 1, False
        while j > 0 and k >= 0 and lines[k].startswith("@"):
            cached = cached or bool(_CACHED.match(lines[k]))
            k -= 1
        verdicts.append(j >= 0 and cached)
    return all(verdicts) if verdicts else None


def miss_log_facts(root):
    """``miss_once``: {runtime file (MISS_SOURCES, relative to the root): miss_once_of its source} for the files
    that print a miss line; the weighting reads a variant's own (its ``miss_source``). ``miss_log_once`` (kept
    as it was: older job and watch states hold it): the GEMM lookups log through upstream's
    ``_log_CKGEMM_miss_once`` (op_tests/tuning_tests/test_untuned_shapes.py): True / False (the runtime's
    gemm_op_a8w8.py has no such logger) / absent (no source to read). ``capture_csv``: the runtime has
    aiter/utility/untuned_shapes.py (AITER_TUNE_GEMM=1 records every family's misses)."""
    out = {}
    pkg = os.path.join(root, "aiter")
    src = read_file_text(os.path.join(pkg, "ops", "gemm_op_a8w8.py"))
    if src is not None:
        out["miss_log_once"] = any(m in src for m in MISS_ONCE_MARKS)
    once = {}
    for rel in MISS_SOURCES:
        got = miss_once_of(src if rel == "aiter/ops/gemm_op_a8w8.py" else read_file_text(os.path.join(root, rel)))
        if got is not None:
            once[rel] = got
    if once:
        out["miss_once"] = once
    if os.path.isdir(os.path.join(pkg, "utility")):
        rec = read_file_text(os.path.join(pkg, "utility", "untuned_shapes.py"))
        out["capture_csv"] = rec is not None and "def record(" in rec
    return out


# What a fused-MoE tuner's `us` means, read from its source (never imported): "stage_sum" = us1 + us2 as the
# kernels ran (v0.1.11 and older); "stage_sum+quant" = us1 + us2 with every non-fused stage-1 kernel charged
# the extra quant(+sort) launch stage 2 needs (inline `us_quant_sort` since v0.1.12, the named
# `add_intermediate_quant_cost` of test_fmoe_tune_objective.py, 1c87c39f). A file without FmoeTuner: None.
MOE_OBJECTIVE_MARKS = ("add_intermediate_quant_cost", "us_quant_sort")


def moe_objective(src):
    if not src or "class FmoeTuner" not in src:
        return None
    return "stage_sum+quant" if any(m in src for m in MOE_OBJECTIVE_MARKS) else "stage_sum"


_TIERS_RE = re.compile(r"^_PADDED_M_TIERS\s*=\s*\[([\d,\s]+)\]", re.M)
_PADDED_FN = re.compile(r"^def get_padded_M\(\w+\):\n((?:[ \t]+.*\n|[ \t]*\n)+)", re.M)


def moe_padded_tiers(src):
    """fused_moe.get_padded_M as tiers: nextPow2(M) below the first, above it the largest tier <= M. Read from
    the source: ``_PADDED_M_TIERS = [32768, 131072]`` (v0.1.14+), else the constants the function assigns
    (v0.1.12: ``padded_m = 32768``; v0.1.11: 1024/2048/16384). None when the file or the function is not there."""
    if not src:
        return None
    m = _TIERS_RE.search(src)
    if m:
        tiers = sorted(int(t) for t in m.group(1).replace(" ", "").split(",") if t)
        return tiers or None
    fn = _PADDED_FN.search(src)
    if not fn:
        return None
    tiers = sorted({int(v) for v in re.findall(r"padded_m\s*=\s*(\d+)\b", fn.group(1))})
    return tiers or None


def op_paths_exist(req):
    """request: {"paths": [absolute paths]}; answer: {"exists": [bool per path]} (capability probing at plan
    time: is each variant's tuner and op_test on this node? issue 36)."""
    return {"exists": [bool(p) and os.path.isfile(p) for p in req.get("paths") or []]}
