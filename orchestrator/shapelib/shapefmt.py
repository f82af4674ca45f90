"""AITER log formats for shape mining: the message regexes, variant names from tuned-file and kernel names,
the fused-MoE tuple, the limits. Stdlib only, Python >= 3.8 (pushed to the node; see shapelog.py)."""

from __future__ import annotations

import os
import re

from .text import SGLANG_PREFIX, VLLM_PREFIX
from .variant_facts import FILE_STEMS, MOE_KEY, MOE_VARIANT  # noqa: F401 (MOE_KEY re-exported)

MAX_CONTINUATION_LINES = 8
MAX_RECORD_CHARS = 4096
ECHO_WINDOW = 32
CHUNK_BYTES = 8 << 20
MAX_EXAMPLES = 3          # example lines quoted per warning kind
CACHE_MAX = 65536        # distinct messages memoised (cleared when full)
MISSING = object()
MAX_LINE_BYTES = 1 << 20   # a longer physical line is skipped unparsed (one warning): memory stays O(1)

# --------------------------------------------------------------------------------------------
# variant from a tuned file / kernel name
# --------------------------------------------------------------------------------------------


def variant_from_tuned_file(path, has_q_dtype_w=False):
    """(variant, note) for the file named in a GEMM log line. note is None when the name is known."""
    p = path.strip().rstrip(",!")
    if p == "CKGEMM":
        return ("a8w8" if has_q_dtype_w else "a8w8_blockscale"), None
    if p.replace(" ", "").lower() == "ckgemmorasmgemm":
        return "a4w4_blockscale", None
    if p == "ASMGEMM":
        return "a8w8_bpreshuffle", ("'not found tuned config in ASMGEMM' (aiter v0.1.5.x) attributed "
                                    "to a8w8_bpreshuffle (inferred: the ASM a8w8 kernels live in the "
                                    "bpreshuffle table today)")
    base = os.path.basename(p.replace("\\", "/")).lower()
    for stem, variant in FILE_STEMS:   # variant_facts.py, generated from variants.py: longest stem first
        if stem in base:
            return variant, None
    # heuristics for renamed files
    if "a4w4" in base:
        v = "a4w4_blockscale"
    elif "blockscale" in base and "bpreshuffle" in base:
        v = "a8w8_blockscale_bpreshuffle"
    elif "bpreshuffle" in base:
        v = "a8w8_bpreshuffle" if has_q_dtype_w else "a8w8_blockscale_bpreshuffle"
    elif "blockscale" in base:
        v = "a8w8_blockscale"
    else:
        v = "a8w8" if has_q_dtype_w else "a8w8_blockscale"
    return v, "unrecognised tuned file name %r: its lines were attributed to %s" % (p, v)


def variant_from_kernel_name(name):
    n = name.strip().strip("'\"!,")
    low = n.lower()
    if low.startswith("a8w8_blockscale_bpreshuffle") or "blockscale_bpreshuffle" in low:
        return "a8w8_blockscale_bpreshuffle"
    if low.startswith("a8w8_blockscale"):
        return "a8w8_blockscale"
    if low.startswith("a8w8_bpreshuffle") or ("bpreshuffle" in low and ("i8gemm" in low or "pertoken" in low)):
        return "a8w8_bpreshuffle"
    if low.startswith("a8w8_batched"):
        return "batched_a8w8"
    if low.startswith("bf16_batched"):
        return "batched_bf16"
    if low.startswith("a8w8_rowwise") or low.startswith("a8w8_"):
        return "a8w8"
    if "f4gemm" in low or "a4w4" in low:
        return "a4w4_blockscale"
    if "blockscale" in low:
        return "a8w8_blockscale"
    return None


# --------------------------------------------------------------------------------------------
# regexes (applied only to prefiltered lines)
# --------------------------------------------------------------------------------------------

SGLANG_PREFIX_END = re.compile(SGLANG_PREFIX + r"\s*$")   # at the end of a record's prefix

BATCH_MISS = re.compile(
    r"shape is B:\s*(\d+), M:\s*(\d+), N:\s*(\d+), K:\s*(\d+)( dtype is bf16)?,? not found tuned config")
BF16_MISS = re.compile(
    r"shape is M:\s*(\d+), N:\s*(\d+), K:\s*(\d+),? dtype=['\"]?([^'\",\s]+)['\"]? "
    r"otype=['\"]?([^'\",\s]+)['\"]? bias=(\w+),? scaleAB=(\w+)(?:,? bpreshuffle=(\w+))?,? "
    r"not found tuned config in (.+?), will use default config")
GEMM_MISS = re.compile(
    r"shape is M:\s*(\d+), N:\s*(\d+), K:\s*(\d+),(?: q_dtype_w:\s*([^\s,]+),)? "
    r"not found tuned config in (.+?), will use default config")
# The MX asm GEMMs' own runtime lookups, %-style lines printed only with AITER_LOG_TUNED_CONFIG (read once in
# aiter/jit/core.py) and once per shape per process (lru_cached):
# * A6W6 (MXFP6, aiter/ops/gemm_op_a6w6.py, after v0.1.20; aiter-after-v0.1.20.md §3), A6W4 and A4W6
#   (ROCm/aiter aiter/ops/gemm_op_a6w4.py, find_string id 69223204969, and gemm_op_a4w6.py, id 69052546210,
#   both through gemm_op_mixed_mxfp.py _find_mixed_mxfp_config, id 68870533051; the mixed-MXFP tuner's
#   commit 610d1e8e): the family prefix in upper case names the variant in lower case. Their hit line has
#   no ``on {gfx}/{cu}`` (A6W6's has); the match kind is exact, or padded (M/N to 256, K to 128).
# * A16W8 MXFP8 (aiter/ops/gemm_op_a16w8_mxfp8.py, id 70186384978, tuner commit 59663079): the bucket row
#   (smallest tuned M >= M per gfx, cu_num, N, K) in its hit, gfx/cu in its miss.
MX_FAMILIES = {"A6W6": "a6w6", "A6W4": "a6w4", "A4W6": "a4w6", "A16W8 MXFP8": "a16w8_mxfp8"}
MX_START = re.compile(r"(A6W6|A6W4|A4W6|A16W8 MXFP8) shape M:")
MX_MISS = re.compile(r"(A6W6|A6W4|A4W6) shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) has no tuned config in (.+?); "
                     r"using the safe default kernel"
                     r"|(A16W8 MXFP8) shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) has no tuned config for (\w+)/(\d+) "
                     r"in (.+?); using the default kernel")
MX_HIT = re.compile(r"(A6W6|A6W4|A4W6) shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) matched (\w+) config "
                    r"M:\s*(\d+) N:\s*(\d+) K:\s*(\d+)(?: on (\w+)/(\d+))? in (.+?): (\S+)\s*$")
MX_BUCKET_HIT = re.compile(r"(A16W8 MXFP8) shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) uses the M:\s*(\d+) entry of "
                           r"(.+?): (\S+) splitK (\d+)\s*$")


def parse_mx_lookup(message):
    """``(hit, variant, shape, meta)`` of one MX lookup line (``message`` starts at its family prefix), or None.
    ``meta["padded_m"]``: the M of the row that served the shape when it is not the shape's own (a padded
    match, an A16W8 bucket row); ``meta["row"]``: the padded row's [M, N, K]."""
    m = MX_MISS.match(message)
    if m:
        if m.group(1):
            fam, dims, meta = m.group(1), m.group(2, 3, 4), {"file": m.group(5).strip()}
        else:
            fam, dims = m.group(6), m.group(7, 8, 9)
            meta = {"gfx": m.group(10), "cu_num": int(m.group(11)), "file": m.group(12).strip()}
        return False, MX_FAMILIES[fam], dict(zip("mnk", map(int, dims))), meta
    h = MX_HIT.match(message)
    if h:
        meta = {"match": h.group(5), "file": h.group(11).strip(), "kernel": h.group(12)}
        if h.group(9):
            meta.update(gfx=h.group(9), cu_num=int(h.group(10)))
        if h.group(5) != "exact":
            meta["padded_m"] = int(h.group(6))
            meta["row"] = [int(h.group(6)), int(h.group(7)), int(h.group(8))]
        return True, MX_FAMILIES[h.group(1)], dict(zip("mnk", map(int, h.group(2, 3, 4)))), meta
    b = MX_BUCKET_HIT.match(message)
    if b:
        shape = dict(zip("mnk", map(int, b.group(2, 3, 4))))
        meta = {"match": "bucket", "file": b.group(6).strip(), "kernel": b.group(7), "splitK": int(b.group(8))}
        if int(b.group(5)) != shape["m"]:
            meta["padded_m"] = int(b.group(5))
        return True, MX_FAMILIES[b.group(1)], shape, meta
    return None


GEMM_HIT = re.compile(
    r"shape (?:is )?(?:B:\s*(\d+), )?M:\s*(\d+), N:\s*(\d+), K:\s*(\d+)(.*?)\bis tuned\b(.*)")
HIT_Q = re.compile(r"q_dtype_w:\s*([^\s,]+)")
HIT_PADDED = re.compile(r"found padded_M:\s*(\d+)")
HIT_FILE = re.compile(r"\bin (\S+?)\s?(?:,|!|$)")
HIT_KERNEL = re.compile(r"[kK]ernel ?[nN]ame is ([^\s!,]+)")
HIT_CU = re.compile(r"cu_num = (\d+)")
BF16_FIELDS = re.compile(
    r"dtype=['\"]?([^'\",\s]+)['\"]? otype=['\"]?([^'\",\s]+)['\"]? bias=(\w+),? scaleAB=(\w+)"
    r"(?:,? bpreshuffle=(\w+))?")

FMOE_DEFAULT = re.compile(r"\[fused_moe\] using (1stage|2stage)( xbf16)? default for (\(.*)")
FMOE_FLY = re.compile(r"\[fused_moe\] no tuned FlyDSL config for (\(.*)")
FMOE_UNSUPPORTED = re.compile(r"Fmoe tuning not support for (\(.*)")   # online tuning found no config
FMOE_HIT = re.compile(r"\[fused_moe\] using (1stage|2stage)( xbf16)? \(kernelName1=")

DUMP = re.compile(r"\[GEMM_shape_dump\].*?csv_row:\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)(?:\s*,\s*([^\s,|]+))?")
DUMP_FIXED_TEXT = "gemm_a8w8_blockscale / bpreshuffle tune csv"
DISPATCH = re.compile(r"\[Fp8LinearMethod\] block_quant w8a8_block_fp8_linear=(\S+)(?: \(([^)]*)\))?")

_TUPLE_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|<[^>]*>|[^,\s][^,]*")
_ENUM_REPR = re.compile(r"<\s*([\w.]+)\s*:")
NEW_RECORD_MARKERS = ("[aiter", "[fused_moe]", "shape is ", "[GEMM_shape_dump]", "[Fp8LinearMethod]")
# a physical line that starts a new log record (so it cannot continue a wrapped tuple):
# "[...", "(Worker_TP0 pid=1) ", "INFO 04-10 ...", "Memory access fault ..." (a capitalised word)
VLLM_PREFIX_START = re.compile("^" + VLLM_PREFIX + " ?")
NEW_RECORD_START = re.compile(r"^(?:\[|%s|[A-Z][a-z]+ |[A-Z]{3,})" % VLLM_PREFIX)

NEEDLES_B = (b"tuned", b"fused_moe", b"GEMM_shape_dump", b"Fp8LinearMethod", b" shape M:",
              b"tuning not support", b"does not cover this")   # the last: FHMoE's raise (shapefhmoe.py)


def is_candidate(line):
    return ("tuned" in line or "fused_moe" in line or "GEMM_shape_dump" in line
            or "Fp8LinearMethod" in line or "tuning not support" in line or "does not cover this" in line
            or " shape M:" in line)   # the MX lookups' hit line names no "tuned" when its file does not


def _bool01(tok):
    t = tok.strip().strip("'\"").lower()
    if t in ("true", "1"):
        return 1
    if t in ("false", "0"):
        return 0
    raise ValueError("not a bool: %r" % tok)


def _enum_name(tok, prefix):
    t = tok.strip()
    m = _ENUM_REPR.match(t)
    if m:
        t = m.group(1)
    t = t.strip("'\" ")
    if "." not in t:
        t = prefix + "." + t
    return t


def dtype_str(tok):
    t = tok.strip().strip("'\" ")
    if t and "." not in t and t not in ("None", "none"):
        t = "torch." + t
    return t


def find_tuple_end(text):
    """Index just past the ')' closing the '(' at text[0], or -1 if it does not close."""
    j = text.find(")", 1)
    if j > 0:
        seg = text[1:j]
        if "(" not in seg and seg.count("'") % 2 == 0 and seg.count('"') % 2 == 0:
            # fast path: no nested '(' and no quoted ')' before the first ')' (the usual key tuple)
            return j + 1
    return _find_tuple_end_slow(text)


def _find_tuple_end_slow(text):
    depth = 0
    quote = None
    angle = False
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
            continue
        if angle:
            if ch == ">":
                angle = False
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "<":
            angle = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def parse_moe_tuple(text):
    """'(...)' of a [fused_moe] line -> (shape dict, meta dict). Raises ValueError when unusable."""
    inner = text.strip()
    if inner.startswith("("):
        inner = inner[1:]
    if inner.endswith(")"):
        inner = inner[:-1]
    toks = [t.strip() for t in _TUPLE_TOKEN.findall(inner)]
    toks = [t for t in toks if t]
    meta = {}
    i = 0
    if toks and toks[0].strip("'\"").startswith("gfx"):
        meta["gfx"] = toks[0].strip("'\"")
        i = 1
    ints = []
    while i < len(toks) and re.match(r"^-?\d+$", toks[i]):
        ints.append(int(toks[i]))
        i += 1
    if len(ints) == 6:
        meta["cu_num"] = ints[0]
        ints = ints[1:]
    elif len(ints) != 5:
        raise ValueError("expected 5 or 6 integers before the activation, got %d" % len(ints))
    rest = toks[i:]
    if len(rest) < 7:
        raise ValueError("tuple has %d elements after topk, need 7" % len(rest))
    shape = {
        "token": ints[0], "model_dim": ints[1], "inter_dim": ints[2], "expert": ints[3], "topk": ints[4],
        "act_type": _enum_name(rest[0], "ActivationType"),
        "dtype": dtype_str(rest[1]),
        "q_dtype_a": dtype_str(rest[2]),
        "q_dtype_w": dtype_str(rest[3]),
        "q_type": _enum_name(rest[4], "QuantType"),
        "use_g1u1": _bool01(rest[5]),
        "doweight_stage1": _bool01(rest[6]),
    }
    return shape, meta


MOE_PADDED_MAX = 32768  # fused_moe.get_padded_M: nextPow2(token) below this (aiter-after-v0.1.20.md §2.2, #5125)
DP_SHARED_MIN = 16      # fused_moe_dp_shared_expert.get_padded_M: its buckets start at 16 (test_fmoe_tuner_token_buckets)


def next_pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


def moe_bucket(token, dp_shared=False, tiers=None):
    """The token a fused-MoE lookup asks its table for: fused_moe.get_padded_M's nextPow2 below 32768, or the DP
    shared-expert path's (nextPow2, from 16 up: the tuner contract ``--token-bucket-contract dp_shared``).
    ``tiers``: the node's get_padded_M tiers (probed: aiter_profiles ``moe_padded_tiers``): nextPow2 below the
    first, above it the largest tier <= token (v0.1.14+: 32768/131072; v0.1.12: 32768; v0.1.11: 1024/2048/16384).
    Without them a token at or above 32768 is kept as it is (the rule unknown)."""
    t = int(token)
    if tiers and not dp_shared:
        tiers = sorted(int(x) for x in tiers)
        if t < tiers[0]:
            return next_pow2(t)
        return max(x for x in tiers if x <= t)
    if dp_shared:
        return max(DP_SHARED_MIN, next_pow2(t)) if t < MOE_PADDED_MAX else t
    return next_pow2(t) if t < MOE_PADDED_MAX else t


def shape_tuple_key(shape):
    return tuple(sorted((k, v) for k, v in shape.items() if k != "_meta"))


def pybool(tok):
    return str(tok).strip().strip("'\"").lower() in ("true", "1")
