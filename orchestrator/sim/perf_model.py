"""Deterministic performance model of the simulated AITER node (no I/O, stdlib only, Python 3.8+).

This file (with kernel_names.py and lookups.py beside it) is the ground truth for every number the
simulated node reports. It is imported by tests on the laptop *and* copied verbatim into the node
(``aiter/_sim/perf_model.py``), where the simulated tuners and op_tests use it, so expectations computed
here match the node's output exactly.

Shapes are dicts with lower-case keys, as in docs/internals.md ("Shapes"):

* GEMM variants (a8w8, a8w8_bpreshuffle, a8w8_blockscale, a8w8_blockscale_bpreshuffle, a4w4_blockscale):
  ``m, n, k`` (+ ``q_dtype_w`` for a8w8 / a8w8_bpreshuffle, default ``torch.int8``);
* batched variants (batched_a8w8, batched_bf16): ``b, m, n, k``;
* moe_2stages: ``token, model_dim, inter_dim, expert, topk, act_type, dtype, q_dtype_a, q_dtype_w,
  q_type, use_g1u1, doweight_stage1``.

Model
-----
1. ``default_us(variant, shape, gfx, cu_num)``: time of the *default* (untuned) kernel, a roofline
   ``max(flops / peak, bytes / bandwidth) + launch overhead`` (peak scales with ``cu_num``; gfx942 is
   slower than gfx950) multiplied by a per-shape factor in [0.92, 1.22) derived from a hash.
2. Every (variant, gfx, cu_num, shape) key hashes (sha256, never ``random``) to ``u`` in [0, 1) and gets
   an ``outcome``:

   * ``u < FAIL_FRACTION`` (12 %): ``"failed"`` -- the tuner finds no valid kernel (no row written,
     ``No kernel can be used for ...``, ``[Tuning not Finished]``, exit 1);
   * ``u < FAIL_FRACTION + REGRESS_FRACTION`` (another 12 %): ``"regressed"`` -- the tuner measures a
     gain (tuned ``us`` = 0.80..0.97 x default) but the op_test, once the module is rebuilt with the
     row, is *slower* than default (1.04..1.24 x);
   * otherwise ``"improved"``: tuner ``us`` = bench ``us`` = 0.60..0.95 x default.

   ``tune_result(...)`` returns the row the tuner writes (kernelId, kernelName, splitK, libtype, us,
   errRatio, tflops, bw; MoE: block_m, kernelName1/2, us1/us2, ...) or ``None`` for ``"failed"``.
3. Benchmarks: ``bench_us(variant, shape, gfx, cu_num, tuned_from=None)`` is the time the op_test
   reports for the production kernel. ``tuned_from`` is the key shape of the tuned row the (rebuilt)
   module dispatched to -- e.g. a padded M -- or None when the default kernel runs. The tuned factor
   comes from the *row's* key, the magnitude from the benchmarked shape. A tuned row whose key the
   model would call "failed" (e.g. a shipped row) behaves as "improved".
   ``bench_value(variant, shape, metric, ...)`` gives the exact value printed in one metric column of
   the variant's op_test (``ck us``, ``ck TFLOPS``, ``us``, ``ck avg``, ...), already rounded as printed
   (6 significant digits for markdown tables, 2 decimals for ``[perf]`` lines) so a parser's float
   equals it exactly. Other backends (asm, triton, torch, hipmm) never change with tuning.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

from .kernel_names import A16W16_LIBTYPES, candidates, kernel_name  # re-exported: the tuners use them
from .variant_table import VARIANTS as _TABLE

FAIL_FRACTION = 0.12
REGRESS_FRACTION = 0.12

# every variant's facts (family, key, libtypes, ...: gen_variant_facts.sim_facts), generated from the registry;
# on the node also those of EXTRA_FILE beside this module (sim/fromfacts.serve_variant writes a variant the tree
# has no file of its own for there), on the laptop those given to register()
EXTRA_FILE = "variants_extra.json"


def _extra() -> dict:
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), EXTRA_FILE)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


EXTRA = _extra()
FACTS = dict(_TABLE, **EXTRA)


def register(name: str, facts: dict) -> None:
    """Model one more variant (its sim_facts) in this process, as a node with it in EXTRA_FILE does."""
    FACTS[name] = facts


GEMM_VARIANTS = tuple(n for n, f in _TABLE.items() if f["family"] == "gemm")
BATCHED_VARIANTS = tuple(n for n, f in _TABLE.items() if f["family"] == "batched")
MOE_VARIANTS = tuple(n for n, f in _TABLE.items() if f["family"] == "moe")
ALL_VARIANTS = GEMM_VARIANTS + BATCHED_VARIANTS + MOE_VARIANTS

MOE_KEY = ("token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a",
           "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1")

# peak dense TFLOPS at 256 CUs (gfx950) per operand family, and HBM bandwidth (bytes/s)
_PEAK_TFLOPS = {"fp8": 1800.0, "int8": 1800.0, "fp4": 3600.0, "fp6": 3600.0, "bf16": 900.0}
_BANDWIDTH = {"gfx950": 6.0e12, "gfx942": 4.2e12}
_GFX_SPEED = {"gfx950": 1.0, "gfx942": 0.55}
_OVERHEAD_US = {"gemm": 3.5, "batched": 5.0, "moe": 9.0}


# ------------------------------------------------------------------------------------------ helpers

def facts(variant: str) -> dict:
    try:
        return FACTS[variant]
    except KeyError:
        raise ValueError("unknown variant %r" % (variant,)) from None


def family(variant: str) -> str:
    return facts(variant)["family"]


def table_owner(variant: str) -> str:
    """The first variant whose tuned table this one writes (a4w4 bpreshuffle -> a4w4_blockscale): an untuned
    shape of that table runs its owner's default kernel, whichever tuner wrote the table's rows."""
    csv = facts(variant)["tuned_csv"]
    return next((n for n, f in FACTS.items() if f.get("tuned_csv") == csv), variant)


def _norm_value(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        s = v.strip()
        if s in ("True", "False"):
            return int(s == "True")
        try:
            f = float(s)
        except ValueError:
            return s
        if f.is_integer() and "." not in s and "e" not in s.lower():
            return int(f)
        return int(f) if f.is_integer() else f
    return v


def key_columns(variant: str) -> tuple:
    """The shape key in lower case (the registry's untuned columns)."""
    return tuple(c.lower() for c in facts(variant)["untuned_columns"])


def normalize_shape(variant: str, shape: dict) -> dict:
    """Lower-case keys, ints for numbers, defaults for optional columns; only key columns kept."""
    low = {str(k).lower(): _norm_value(v) for k, v in shape.items()}
    if "e" in low and "expert" not in low:
        low["expert"] = low["e"]
    out = {}
    for col in key_columns(variant):
        if col not in low:
            if col == "q_dtype_w" and family(variant) != "moe":
                out[col] = "torch.int8"
                continue
            if col == "w_scale_block":     # the MXFP8 BMM lookup's default block (aiter/ops/opus/policy.py)
                out[col] = "128x128"
                continue
            raise KeyError("shape for %s lacks %r: %r" % (variant, col, shape))
        v = low[col]
        if col == "act_type" and isinstance(v, str) and v.startswith("<"):
            v = v[1:].split(":")[0]  # '<ActivationType.Silu: 0>' -> 'ActivationType.Silu'
        out[col] = v
    return out


def _canon(variant: str, shape: dict, gfx: str, cu_num: int) -> str:
    s = normalize_shape(variant, shape)
    return "|".join([variant, str(gfx), str(int(cu_num))] + ["%s=%s" % (k, s[k]) for k in sorted(s)])


def _u(text: str, salt: str) -> float:
    h = hashlib.sha256((salt + "#" + text).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / float(1 << 64)


def round_sig(x: float, sig: int = 6) -> float:
    """Round to ``sig`` significant digits (what tabulate's default 'g' format prints)."""
    if x == 0 or not math.isfinite(x):
        return x
    return float("%.*g" % (sig, x))


def _operand_family(variant: str, shape: dict) -> str:
    if variant in ("a4w4_blockscale", "a4w4_blockscale_bpreshuffle"):
        return "fp4"
    if variant == "a6w6":
        return "fp6"
    if variant in ("batched_bf16", "a16w16"):
        return "bf16"
    if variant in ("a8w8", "a8w8_bpreshuffle"):
        return "int8" if "int8" in str(shape.get("q_dtype_w", "torch.int8")) else "fp8"
    if variant == "moe_2stages":
        q = str(shape.get("q_dtype_w", ""))
        if "float4" in q or "fp4" in q:
            return "fp4"
        if "float8" in q or "fp8" in q or "int8" in q:
            return "fp8"
        return "bf16"
    return "fp8"


_BPE = {"fp8": 1.0, "int8": 1.0, "fp4": 0.5, "fp6": 0.75, "bf16": 2.0}


def flops_and_bytes(variant: str, shape: dict) -> tuple:
    """(flops, bytes) of one call, the basis of the roofline and of the TFLOPS / TB/s columns."""
    s = normalize_shape(variant, shape)
    fam = family(variant)
    bpe = _BPE[_operand_family(variant, s)]
    if fam == "moe":
        tok, md, idim = s["token"], s["model_dim"], s["inter_dim"]
        e, topk = s["expert"], s["topk"]
        flops = tok * md * idim * 3 * topk * 2
        touched = min(e, tok * topk)
        nbytes = touched * md * idim * 3 * bpe + tok * md * 2 * 2 + tok * topk * idim * 2
        return float(flops), float(nbytes)
    b = s.get("b", 1)
    m, n, k = s["m"], s["n"], s["k"]
    flops = 2.0 * b * m * n * k
    nbytes = b * (m * k * bpe + n * k * bpe + m * n * 2)
    return float(flops), float(nbytes)


# ------------------------------------------------------------------------------------------ model

def default_us(variant: str, shape: dict, gfx: str = "gfx950", cu_num: int = 256) -> float:
    """Time of the default (untuned) kernel in microseconds (4 decimals)."""
    variant = table_owner(variant)
    fam = family(variant)
    flops, nbytes = flops_and_bytes(variant, shape)
    opf = _operand_family(variant, normalize_shape(variant, shape))
    peak = _PEAK_TFLOPS[opf] * 1e12 * (float(cu_num) / 256.0) * _GFX_SPEED.get(gfx, 0.5)
    bw = _BANDWIDTH.get(gfx, 3.0e12)
    us = max(flops / peak, nbytes / bw) * 1e6 + _OVERHEAD_US[fam]
    jitter = 0.92 + 0.30 * _u(_canon(variant, shape, gfx, cu_num), "default")
    return round(us * jitter, 4)


def outcome(variant: str, shape: dict, gfx: str = "gfx950", cu_num: int = 256) -> str:
    """'failed' | 'regressed' | 'improved' for tuning this shape on this (gfx, cu_num)."""
    u = _u(_canon(variant, shape, gfx, cu_num), "outcome")
    if u < FAIL_FRACTION:
        return "failed"
    if u < FAIL_FRACTION + REGRESS_FRACTION:
        return "regressed"
    return "improved"


def _tune_factor(variant, shape, gfx, cu_num) -> float:
    u = _u(_canon(variant, shape, gfx, cu_num), "tune")
    if outcome(variant, shape, gfx, cu_num) == "regressed":
        return 0.80 + 0.17 * u
    return 0.60 + 0.35 * u


def _bench_factor(variant, key_shape, gfx, cu_num) -> float:
    u = _u(_canon(variant, key_shape, gfx, cu_num), "tune")
    if outcome(variant, key_shape, gfx, cu_num) == "regressed":
        return 1.04 + 0.20 * u
    return 0.60 + 0.35 * u


def tuned_us(variant: str, shape: dict, gfx: str = "gfx950", cu_num: int = 256):
    """Bench time of this shape when the module dispatches to its own tuned row (None if failed)."""
    if outcome(variant, shape, gfx, cu_num) == "failed":
        return None
    return bench_us(variant, shape, gfx, cu_num, tuned_from=shape)


def tune_result(variant: str, shape: dict, gfx: str = "gfx950", cu_num: int = 256, libtypes=None):
    """What the tuner writes for this shape (a dict of result columns), or None when no kernel is valid.
    ``libtypes``: the backends the tuner searched (a16w16's --libtype); None = every one its rows may name."""
    if outcome(variant, shape, gfx, cu_num) == "failed":
        return None
    s = normalize_shape(variant, shape)
    canon = _canon(variant, s, gfx, cu_num)
    us = round(default_us(variant, s, gfx, cu_num) * _tune_factor(variant, s, gfx, cu_num), 4)
    flops, nbytes = flops_and_bytes(variant, s)
    idx = int(_u(canon, "kernel") * 1000)
    if family(variant) == "moe":
        block_m = (16, 32, 64, 128)[idx % 4]
        us1 = round(us * (0.55 + 0.1 * _u(canon, "split")), 4)
        us2 = round(us - us1, 4)
        q = str(s["q_type"]).split(".")[-1]
        kn1 = "moe_ck2stages_gemm1_256x%dx64x128_1x4_MulABScaleExpertWeight_v1_Nswizzle0_Quant%s_silu_B16" % (
            block_m, q)
        kn2 = "moe_ck2stages_gemm2_256x%dx64x128_1x4_MulABScale_v1_Nswizzle0_Quant%s_MulRoutedWeight1_B16" % (
            block_m, q)
        return {
            "block_m": block_m, "ksplit": 0, "us1": us1, "kernelName1": kn1, "err1": "0.0%",
            "us2": us2, "kernelName2": kn2, "err2": "0.0%", "us": us, "run_1stage": 0,
            "xbf16": 0, "flat": 0,
            "tflops": round(flops / (us * 1e6), 2), "bw": round(nbytes / (us * 1e-6) / 1e9, 2),
        }
    libs = tuple(libtypes or facts(variant)["libtypes"] or ("ck",))
    libtype = libs[idx % len(libs)]
    splitk = (0, 0, 0, 2, 4)[idx % 5] if libtype != "asm" else (4, 7, 8)[idx % 3]
    # a tuner that always times its split-K candidates names the count in its kernelName (mxfp8); a6w6's asm
    # kernels take none
    if facts(variant)["splitk"] == "always" or variant == "a6w6":
        splitk = 0
    return {
        "libtype": libtype,
        "kernelId": idx % candidates(variant),
        "splitK": splitk,
        "us": us,
        "kernelName": kernel_name(variant, idx, libtype, gfx),
        "tflops": round(flops / (us * 1e6), 2),
        "bw": round(nbytes / (us * 1e-6) / 1e9, 2),
        "errRatio": 0.0,
    }


def bench_us(variant: str, shape: dict, gfx: str = "gfx950", cu_num: int = 256, tuned_from=None) -> float:
    """Production-kernel time the op_test measures (4 decimals).

    tuned_from: key shape of the tuned row the built module dispatched to, or None (default kernel).
    """
    base = default_us(variant, shape, gfx, cu_num)
    if tuned_from is None:
        return base
    return round(base * _bench_factor(variant, tuned_from, gfx, cu_num), 4)


def _backend_us(variant, shape, gfx, cu_num, backend):
    """Time of a backend that tuning never changes (asm/triton/torch/hipmm references)."""
    base = default_us(variant, shape, gfx, cu_num)
    u = _u(_canon(variant, shape, gfx, cu_num), "backend:" + backend)
    scale = {"asm": 0.9, "triton": 1.1, "torch": 4.0, "torch_einsum": 1.6, "hipmm": 1.05}.get(backend, 1.0)
    return round(base * scale * (0.9 + 0.3 * u), 4)


def backend_metrics(variant, shape, gfx="gfx950", cu_num=256, backend="ck", tuned_from=None) -> dict:
    """{'us', 'TFLOPS', 'TB/s', 'err'} of one backend, unrounded except us (4 decimals)."""
    if backend == "ck":
        us = bench_us(variant, shape, gfx, cu_num, tuned_from)
    else:
        us = _backend_us(variant, shape, gfx, cu_num, backend)
    flops, nbytes = flops_and_bytes(variant, shape)
    return {"us": us, "TFLOPS": flops / (us * 1e6), "TB/s": nbytes / (us * 1e6), "err": 0.0}


# op_tests that round their `us` to 2 decimals before printing (test_gemm_a8w8_mxfp8_bpreshuffle: round(us, 2))
US_2DP = ("a8w8_mxfp8_bpreshuffle",)


def bench_value(variant: str, shape: dict, metric: str, gfx: str = "gfx950", cu_num: int = 256,
                tuned_from=None):
    """Exact value printed in op_test column ``metric`` for ``shape`` (rounded as printed).

    Columns: '<backend> us' / '<backend> TFLOPS' / '<backend> TB/s' / '<backend> err' with backend in
    ck, ck bpreshuffle (= a8w8_bpreshuffle ck), asm, triton, torch_einsum, hipmm bpreshuffle; bare
    'us' / 'TFLOPS' / 'TB/s' / 'err' (a4w4, moe: the production kernel); 'ck avg' / 'torch avg'
    ([perf] lines, 2 decimals); 'uplift' (fraction, rounded to 3 decimals as printed by ``:.1%``).
    """
    if metric in ("ck avg", "torch avg", "uplift"):
        ck = round(bench_us(variant, shape, gfx, cu_num, tuned_from), 2)
        torch_us = round(_backend_us(variant, shape, gfx, cu_num, "torch"), 2)
        if metric == "ck avg":
            return ck
        if metric == "torch avg":
            return torch_us
        return round(_backend_us(variant, shape, gfx, cu_num, "torch") /
                     bench_us(variant, shape, gfx, cu_num, tuned_from) - 1, 3)
    parts = metric.rsplit(" ", 1)
    if len(parts) == 1:
        backend, qty = "ck", parts[0]
    else:
        backend, qty = parts
    if backend in ("ck bpreshuffle", "tgemm"):   # tgemm: a16w16's tuned dispatch
        backend = "ck"
    if backend == "hipmm bpreshuffle":
        backend = "hipmm"
    if qty == "us" and backend == "ck":
        if variant in US_2DP:
            return round_sig(round(bench_us(variant, shape, gfx, cu_num, tuned_from), 2))
        return round_sig(bench_us(variant, shape, gfx, cu_num, tuned_from))
    vals = backend_metrics(variant, shape, gfx, cu_num, backend, tuned_from)
    if qty not in vals:
        raise KeyError("unknown metric %r" % (metric,))
    return round_sig(vals[qty])


# the runtime lookups (padded M, MoE token tiers) live in lookups.py, copied beside this file
from .lookups import moe_padded_token, padded_m_candidates  # noqa: E402,F401  (re-exported)


def shapes_with_outcome(variant: str, want: str, base: dict, vary: str = "m", start: int = 1,
                        count: int = 1, gfx: str = "gfx950", cu_num: int = 256, limit: int = 100000) -> list:
    """First ``count`` shapes (``base`` with ``vary`` = start, start+1, ...) whose outcome is ``want``."""
    out = []
    v = start
    while len(out) < count and v < start + limit:
        s = dict(base)
        s[vary] = v
        if outcome(variant, s, gfx, cu_num) == want:
            out.append(s)
        v += 1
    return out
