"""Streaming parser for AITER "no tuned config" log lines -> distinct shapes per kernel variant.

STDLIB ONLY, Python >= 3.8, no imports from ``orchestrator``: this file is pushed alone into containers
(next to node_helper.py) and is also imported locally by ``tune-remote shapes``.

Formats are from ../../../../shared/reference/aiter-formats.md §3 and aiter-real-logs.md.

What is recognised (after ANSI colour codes are stripped; every regex anchors on the *message text*,
so any prefix in front of it is accepted: ``[aiter] ``, vLLM ``(Worker_TP4_EP4 pid=892) ``,
``(APIServer pid=1) ``, SGLang ``[2026-02-17 23:52:11 TP4] ``, or none at all as in the second physical
line of an ``AITER_LOG_MORE=1`` record):

GEMM misses (counted in ``misses``, shape recorded in ``shapes``)
  ``shape is M:{M}, N:{N}, K:{K}, not found tuned config in {file}, will use default config!``
  ``shape is M:{M}, N:{N}, K:{K}, q_dtype_w:{q}, not found tuned config in {file}, ...``  (q_dtype_w kept)
  ``shape is B:{B}, M:{M}, N:{N}, K:{K}[ dtype is bf16], not found tuned config in CKGEMM, ...``
  ``shape is M:.., N:.., K:.. dtype='..' otype='..' bias=.., scaleAB=.., bpreshuffle=.., not found ...``
  Variant = from the tuned file's basename (``/tmp/aiter_configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv``
  -> ``a8w8_blockscale_bpreshuffle``; model_configs names such as ``dsv3_a8w8_blockscale_tuned_gemm.csv`` and
  ``a8w8_blockscale_bpreshuffle_tuned_gemm_mm2.5.csv`` work because the known stem is searched *inside*
  the name, longest stem first). Batched lines -> ``batched_bf16`` if ``dtype is bf16`` else
  ``batched_a8w8``. bf16 (a16w16) lines -> variant ``bf16`` (recorded, tune-remote does not tune it).
  Old lines without a file (aiter v0.1.5.x), decided here:
    ``in CKGEMM``            -> ``a8w8_blockscale`` (``a8w8`` when the line has q_dtype_w). In v0.1.5 the
                                same string was printed by the a8w8 CK lookup too, so this is a guess;
                                tune-remote supports aiter >= 0.1.9 where the file path is printed.
    ``in CKGEMM or asmGEMM`` -> ``a4w4_blockscale`` (gemm_op_a4w4.py, v0.1.5.post4 - v0.1.9)
    ``in ASMGEMM``           -> ``a8w8_bpreshuffle`` (the ASM int8/fp8 kernels live in the bpreshuffle
                                table today); a warning says it was inferred.
  An unrecognised file name falls back the same way (q_dtype_w -> a8w8, else a8w8_blockscale) with
  one warning per file name.

GEMM hits (counted in ``hits``; shape in ``hit_shapes``; never a miss)
  ``... found padded_M: {p}, N:.., K:.. is tuned ...`` (all families, with or without q_dtype_w, the
  batched ``..., is tuned on cu_num = ..`` forms, the bf16 form and v0.1.4 ``shape M:.. is tuned on``).
  Variant from the file named after `` in ``, or, for ``in CKGEMM`` (v0.1.5), from the kernel name.

A6W6 (variant ``a6w6``; only with ``AITER_LOG_TUNED_CONFIG=1``)
  miss: ``A6W6 shape M:{M} N:{N} K:{K} has no tuned config in {file}; using the safe default kernel``
  hit:  ``A6W6 shape M:.. N:.. K:.. matched exact|padded config M:.. N:.. K:.. on {gfx}/{cu} in {file}: {kernel}``

Fused MoE (variant ``moe_2stages``)
  miss: ``[fused_moe] using (1stage|2stage)( xbf16)? default for (...)``
  miss: ``[fused_moe] no tuned FlyDSL config for (...), using heuristic FlyDSL fallback ...``
  hit:  ``[fused_moe] using 2stage (kernelName1='...', kernelName2='...') for (...)``
  The tuple is parsed tolerantly: optional leading ``'gfx950'`` (v0.1.13+), optional int cu_num
  (decided by counting the ints before the activation), activation ``'ActivationType.Silu'`` or
  ``<ActivationType.Silu: 0>`` or bare, quant type likewise, ``True/False`` -> 1/0, trailing extra
  elements ignored. A tuple wrapped over several physical lines is accumulated until its parenthesis
  closes (at most ``MAX_CONTINUATION_LINES`` lines / ``MAX_RECORD_CHARS`` chars, and never across a line
  that starts a new aiter record); an unterminated tuple (e.g. a truncated copy) gives a warning.
  ``token`` is kept as logged, i.e. already padded by AITER (``nextPow2`` below 32768).
  ``bypass tuned results for fp8 blockscale`` is counted in ``notes`` with one warning.

SGLang (from the GEAK skill, seed 002)
  ``[GEMM_shape_dump] ... csv_row: M,N,K,dtype`` -> shape for ``a8w8_blockscale`` (or
  ``a8w8_blockscale_bpreshuffle`` when the line names ``blockscale_bpreshuffle``/``bpreshuffle`` outside the
  fixed text ``(aiter gemm_a8w8_blockscale / bpreshuffle tune CSV)``, or when the caller filters on
  ``variant="a8w8_blockscale_bpreshuffle"``). Counted in ``dumps`` (not misses: a dump lists every shape
  run, tuned or not). The weight dtype goes to ``_meta`` only.
  ``[Fp8LinearMethod] block_quant w8a8_block_fp8_linear=<name> (<module>)`` -> recorded in ``dispatch``;
  a Triton implementation adds a warning that the CK path is not used, so CK tuning will not help.

Duplicates: SGLang re-emits every aiter record through its own handler (``[aiter] X`` and
``[2026-02-17 23:52:11 TP4] X``). A SGLang-prefixed record whose message equals a recent
(last ``ECHO_WINDOW`` records) non-SGLang record, or the other way round, is one record and counted once.
Records from different processes (vLLM workers) are separate lookups and are each counted.

Shapes are dicts with lower-case keys (docs/internals.md "Shapes"): GEMM ``m,n,k[,q_dtype_w]``, batched
``b,m,n,k``, bf16 ``m,n,k,bias,dtype,outdtype,scaleab,bpreshuffle``, MoE ``token, model_dim, inter_dim,
expert, topk, act_type, dtype, q_dtype_a, q_dtype_w, q_type, use_g1u1, doweight_stage1``. They are
deduplicated per variant in first-seen order. With ``keep_meta=True`` the first sighting's extra info
(``gfx``, ``cu_num``, ``file``, ``padded_m``, weight ``dtype`` ...) is attached under ``"_meta"``.

Speed and memory: ``parse_files`` reads binary blocks and finds candidate lines with ``bytes.find`` on a
few needles (``tuned``, ``fused_moe``, ``GEMM_shape_dump``, ``Fp8LinearMethod``); only those lines are
decoded and given to the regexes. Blocks dense in candidates are split and their identical lines
counted at C speed instead (see ``_Scanner``). A physical line longer than ``MAX_LINE_BYTES`` (1 MiB) is
skipped unparsed, with one counted warning, so memory stays bounded by the block size whatever the
log. ``parse_stream`` applies the same rules per line.

M presets: ``m_sweep("pow2")`` (1..32768, default), ``m_sweep("cudagraph")`` (vLLM default capture sizes
1, 2, 4, 8..512 step 8, as in seed 003), or an explicit list; ``expand_m(shapes, preset)`` crosses them
with each distinct (N, K[, q_dtype_w]) (GEMM; batched per (B, N, K); bf16 per its non-M key) and each MoE
config (token sweep: powers of two 1..32768, the only token values AITER's padded lookup can hit).
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
import sys

__all__ = [
    "ShapeLogResult", "parse_stream", "parse_files", "variant_from_tuned_file",
    "m_sweep", "moe_token_sweep", "expand_m", "M_PRESETS", "MOE_KEY",
]

MAX_CONTINUATION_LINES = 8
MAX_RECORD_CHARS = 4096
ECHO_WINDOW = 32
CHUNK_BYTES = 8 << 20
MAX_EXAMPLES = 3          # example lines quoted per warning kind
_CACHE_MAX = 65536        # distinct messages memoised (cleared when full)
_MISSING = object()

MOE_VARIANT = "moe_2stages"
MOE_KEY = (
    "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
    "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
)

# --------------------------------------------------------------------------------------------
# variant from a tuned file / kernel name
# --------------------------------------------------------------------------------------------

# longest first: "a8w8_blockscale_bpreshuffle_tuned_gemm" must win over "a8w8_blockscale_..."
_FILE_STEMS = (
    ("a8w8_blockscale_bpreshuffle_tuned_gemm", "a8w8_blockscale_bpreshuffle"),
    ("a8w8_blockscale_tuned_gemm", "a8w8_blockscale"),
    ("a8w8_bpreshuffle_tuned_gemm", "a8w8_bpreshuffle"),
    ("a4w4_blockscale_tuned_gemm", "a4w4_blockscale"),
    ("a6w6_blockscale_tuned_gemm", "a6w6"),
    ("a8w8_tuned_batched_gemm", "batched_a8w8"),
    ("bf16_tuned_batched_gemm", "batched_bf16"),
    ("a8w8_tuned_gemm", "a8w8"),
    ("bf16_tuned_gemm", "bf16"),
)


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
    for stem, variant in _FILE_STEMS:
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

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SGLANG_PREFIX = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*$")

_BATCH_MISS = re.compile(
    r"shape is B:\s*(\d+), M:\s*(\d+), N:\s*(\d+), K:\s*(\d+)( dtype is bf16)?,? not found tuned config")
_BF16_MISS = re.compile(
    r"shape is M:\s*(\d+), N:\s*(\d+), K:\s*(\d+),? dtype=['\"]?([^'\",\s]+)['\"]? "
    r"otype=['\"]?([^'\",\s]+)['\"]? bias=(\w+),? scaleAB=(\w+)(?:,? bpreshuffle=(\w+))?,? "
    r"not found tuned config in (.+?), will use default config")
_GEMM_MISS = re.compile(
    r"shape is M:\s*(\d+), N:\s*(\d+), K:\s*(\d+),(?: q_dtype_w:\s*([^\s,]+),)? "
    r"not found tuned config in (.+?), will use default config")
# A6W6 (MXFP6, aiter/ops/gemm_op_a6w6.py, after v0.1.20; aiter-after-v0.1.20.md §3): %-style lines,
# printed only with AITER_LOG_TUNED_CONFIG=1
A6W6_VARIANT = "a6w6"
_A6W6_MISS = re.compile(r"A6W6 shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) has no tuned config in (.+?); "
                        r"using the safe default kernel")
_A6W6_HIT = re.compile(r"A6W6 shape M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) matched (\w+) config "
                       r"M:\s*(\d+) N:\s*(\d+) K:\s*(\d+) on (\w+)/(\d+) in (.+?): (\S+)\s*$")
_GEMM_HIT = re.compile(
    r"shape (?:is )?(?:B:\s*(\d+), )?M:\s*(\d+), N:\s*(\d+), K:\s*(\d+)(.*?)\bis tuned\b(.*)")
_HIT_Q = re.compile(r"q_dtype_w:\s*([^\s,]+)")
_HIT_PADDED = re.compile(r"found padded_M:\s*(\d+)")
_HIT_FILE = re.compile(r"\bin (\S+?)\s?(?:,|!|$)")
_HIT_KERNEL = re.compile(r"[kK]ernel ?[nN]ame is ([^\s!,]+)")
_HIT_CU = re.compile(r"cu_num = (\d+)")
_BF16_FIELDS = re.compile(
    r"dtype=['\"]?([^'\",\s]+)['\"]? otype=['\"]?([^'\",\s]+)['\"]? bias=(\w+),? scaleAB=(\w+)"
    r"(?:,? bpreshuffle=(\w+))?")

_FMOE_DEFAULT = re.compile(r"\[fused_moe\] using (1stage|2stage)( xbf16)? default for (\(.*)")
_FMOE_FLY = re.compile(r"\[fused_moe\] no tuned FlyDSL config for (\(.*)")
_FMOE_HIT = re.compile(r"\[fused_moe\] using (1stage|2stage)( xbf16)? \(kernelName1=")

_DUMP = re.compile(r"\[GEMM_shape_dump\].*?csv_row:\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)(?:\s*,\s*([^\s,|]+))?")
_DUMP_FIXED_TEXT = "gemm_a8w8_blockscale / bpreshuffle tune csv"
_DISPATCH = re.compile(r"\[Fp8LinearMethod\] block_quant w8a8_block_fp8_linear=(\S+)(?: \(([^)]*)\))?")

_TUPLE_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|<[^>]*>|[^,\s][^,]*")
_ENUM_REPR = re.compile(r"<\s*([\w.]+)\s*:")
_NEW_RECORD_MARKERS = ("[aiter", "[fused_moe]", "shape is ", "[GEMM_shape_dump]", "[Fp8LinearMethod]")
# a physical line that starts a new log record (so it cannot continue a wrapped tuple):
# "[...", "(Worker_TP0 pid=1) ", "INFO 04-10 ...", "Memory access fault ..." (a capitalised word)
_VLLM_PREFIX = re.compile(r"^\(\w+ pid=\d+\) ?")
_NEW_RECORD_START = re.compile(r"^(?:\[|\(\w+ pid=\d+\)|[A-Z][a-z]+ |[A-Z]{3,})")

_NEEDLES_B = (b"tuned", b"fused_moe", b"GEMM_shape_dump", b"Fp8LinearMethod", b"A6W6 shape")


def _is_candidate(line):
    return ("tuned" in line or "fused_moe" in line or "GEMM_shape_dump" in line
            or "Fp8LinearMethod" in line)


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


def _dtype_str(tok):
    t = tok.strip().strip("'\" ")
    if t and "." not in t and t not in ("None", "none"):
        t = "torch." + t
    return t


def _find_tuple_end(text):
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
        "dtype": _dtype_str(rest[1]),
        "q_dtype_a": _dtype_str(rest[2]),
        "q_dtype_w": _dtype_str(rest[3]),
        "q_type": _enum_name(rest[4], "QuantType"),
        "use_g1u1": _bool01(rest[5]),
        "doweight_stage1": _bool01(rest[6]),
    }
    return shape, meta


def _shape_key(shape):
    return tuple(sorted((k, v) for k, v in shape.items() if k != "_meta"))


# --------------------------------------------------------------------------------------------
# result
# --------------------------------------------------------------------------------------------


class ShapeLogResult(object):
    """Outcome of one parse. All counters are per variant name."""

    def __init__(self):
        self.shapes = collections.OrderedDict()      # variant -> [shape] (misses + dumps)
        self.hit_shapes = collections.OrderedDict()  # variant -> [shape] (tuned lookups)
        self.hits = collections.OrderedDict()
        self.misses = collections.OrderedDict()
        self.dumps = collections.OrderedDict()
        self.notes = collections.OrderedDict()       # e.g. {"moe_blockscale_bypass": 3}
        self.dispatch = []                           # [{"name", "module", "triton": bool}]
        self.warnings = []
        self.lines = 0
        self.bytes = 0
        self.files = []
        self.missing = []
        self._seen = {}                              # (table, variant) -> {key: index in the table}
        self.counts = collections.OrderedDict()      # variant -> [lookups of shapes[variant][i]]

    # -- building ------------------------------------------------------------------------
    def _add(self, table, variant, shape, key=None, times=1):
        seen = self._seen.setdefault((table, variant), {})
        if key is None:
            key = _shape_key(shape)
        at = seen.get(key)
        if at is not None:
            if table == "shapes":
                self.counts[variant][at] += times
            return False
        rows = getattr(self, table).setdefault(variant, [])
        seen[key] = len(rows)
        rows.append(shape)
        if table == "shapes":
            self.counts.setdefault(variant, []).append(times)
        return True

    @staticmethod
    def _inc(counter, variant, n=1):
        counter[variant] = counter.get(variant, 0) + n

    # -- output --------------------------------------------------------------------------
    def variants(self):
        out = []
        for d in (self.shapes, self.misses, self.hits, self.dumps):
            for v in d:
                if v not in out:
                    out.append(v)
        return out

    def to_dict(self):
        return {
            "shapes": {v: list(s) for v, s in self.shapes.items()},
            "counts": {v: list(c) for v, c in self.counts.items()},   # how often each shape was looked up
            "hit_shapes": {v: list(s) for v, s in self.hit_shapes.items()},
            "hits": dict(self.hits),
            "misses": dict(self.misses),
            "dumps": dict(self.dumps),
            "notes": dict(self.notes),
            "dispatch": list(self.dispatch),
            "warnings": list(self.warnings),
            "lines": self.lines,
            "bytes": self.bytes,
            "files": list(self.files),
            "missing": list(self.missing),
        }

    def to_json(self):
        """The JSON-able dict (what node_helper's ``shapes`` op returns); ``to_json_text()`` gives the text."""
        return self.to_dict()

    def to_json_text(self, **kw):
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d):
        r = cls()
        for name in ("shapes", "counts", "hit_shapes", "hits", "misses", "dumps", "notes"):
            getattr(r, name).update(d.get(name) or {})
        r.dispatch = list(d.get("dispatch") or [])
        r.warnings = list(d.get("warnings") or [])
        r.lines = int(d.get("lines") or 0)
        r.bytes = int(d.get("bytes") or 0)
        r.files = list(d.get("files") or [])
        r.missing = list(d.get("missing") or [])
        return r

    def __repr__(self):
        return "ShapeLogResult(%s, lines=%d, bytes=%d)" % (
            ", ".join("%s:%d" % (v, len(s)) for v, s in self.shapes.items()), self.lines, self.bytes)


# --------------------------------------------------------------------------------------------
# the record-level parser
# --------------------------------------------------------------------------------------------


class _Parser(object):
    def __init__(self, variant=None, keep_meta=False, result=None):
        if variant is None:
            self.want = None
        elif isinstance(variant, str):
            self.want = {variant}
        else:
            self.want = set(variant)
        self.keep_meta = keep_meta
        self.r = result if result is not None else ShapeLogResult()
        self._file_variant = {}
        self._recent = collections.deque()
        self._recent_counts = {}      # message -> [non-SGLang count, SGLang count] inside the window
        self._pending = None          # [kind, prefix, text, n_lines]
        self._warn_counts = collections.OrderedDict()   # kind -> [count, examples, template]
        self._once = set()
        self._cache = {}

    # -- warnings ------------------------------------------------------------------------
    def _warn_once(self, text):
        if text not in self._once:
            self._once.add(text)
            self.r.warnings.append(text)

    def _warn_count(self, kind, template, example):
        entry = self._warn_counts.get(kind)
        if entry is None:
            entry = self._warn_counts[kind] = [0, [], template]
        entry[0] += 1
        if len(entry[1]) < MAX_EXAMPLES:
            entry[1].append(example[:300])

    def finish(self):
        if self._pending is not None:
            kind, prefix, text, _n = self._pending
            self._pending = None
            self._warn_count("moe_tuple_open", "%d [fused_moe] record(s) with a tuple that never closes "
                             "(truncated or wrapped line?) were skipped", text)
        for kind, (count, examples, template) in self._warn_counts.items():
            self.r.warnings.append(template % count + "; e.g. " + " || ".join(repr(e) for e in examples))
        self._warn_counts.clear()
        n = self.r.notes.get("moe_blockscale_bypass", 0)
        if n:
            self._warn_once(
                "AITER logged 'bypass tuned results for fp8 blockscale' %d time(s): on aiter v0.1.9-v0.1.12 "
                "tuned fmoe rows for Silu/bf16/fp8/fp8/per_1x128 MoE with token*topk <= 128 (all of them on "
                "v0.1.10) are ignored, so tuning those shapes has no runtime effect" % n)
        return self.r

    def reset_file(self):
        """Called between files: no record or echo spans two files."""
        if self._pending is not None:
            self.finish_pending_as_open()
        self._recent.clear()
        self._recent_counts.clear()

    def finish_pending_as_open(self):
        kind, prefix, text, _n = self._pending
        self._pending = None
        self._warn_count("moe_tuple_open", "%d [fused_moe] record(s) with a tuple that never closes "
                         "(truncated or wrapped line?) were skipped", text)

    # -- filtering -----------------------------------------------------------------------
    def _wanted(self, variant):
        return self.want is None or variant in self.want

    # -- echo dedup ----------------------------------------------------------------------
    def _is_echo(self, prefix, message):
        """True when this record is SGLang's re-emission of a recent aiter record (or vice versa)."""
        sg = prefix[:1] == "[" and "[aiter" not in prefix and bool(_SGLANG_PREFIX.search(prefix))
        counts = self._recent_counts
        c = counts.get(message)
        other = 0 if sg else 1
        if c is not None and c[other] > 0:
            # consume one record of the other kind from the window
            for idx, (msg, was_sg) in enumerate(self._recent):
                if was_sg != sg and msg == message:
                    del self._recent[idx]
                    break
            c[other] -= 1
            if c[0] == 0 and c[1] == 0:
                del counts[message]
            return True
        if len(self._recent) >= ECHO_WINDOW:
            old, old_sg = self._recent.popleft()
            oc = counts[old]
            oc[1 if old_sg else 0] -= 1
            if oc[0] == 0 and oc[1] == 0:
                del counts[old]
        self._recent.append((message, sg))
        if c is None:
            c = counts[message] = [0, 0]
        c[1 if sg else 0] += 1
        return False

    # -- entry point ---------------------------------------------------------------------
    def feed(self, line):
        """One physical line (str). Cheap when the line is not a candidate."""
        if self._pending is not None:
            self._continue(line)
            return
        if not _is_candidate(line):
            return
        self._record(line)

    def skip_long_line(self, example, candidate):
        """A physical line over MAX_LINE_BYTES is not parsed: it ends a wrapped tuple, and is counted."""
        if self._pending is not None:
            self.finish_pending_as_open()
        if candidate:
            self._warn_count("long_line", "%d candidate line(s) longer than " + str(MAX_LINE_BYTES)
                             + " bytes were skipped unparsed", example)

    def effect_of(self, line):
        """What feeding ``line`` does when the answer does not depend on the lines around it.

        Returns ``(is_record, counts, adds)`` (``is_record``: it enters the SGLang echo window), or
        None when the line starts a wrapped tuple, warns, is an SGLang-prefixed record (an echo
        candidate) or records a dispatch: such lines must go through ``feed`` in order."""
        s = _Parser(self.want, self.keep_meta)
        s._once = set(self._once)
        s.feed(line)
        r = s.r
        if s._pending is not None or r.warnings or s._warn_counts or r.dispatch or len(s._recent) > 1:
            return None
        if s._recent and s._recent[0][1]:
            return None
        counts = tuple((name, v, n) for name in ("misses", "hits", "dumps", "notes")
                       for v, n in getattr(r, name).items())
        adds = tuple((table, v, shape) for table in ("shapes", "hit_shapes")
                     for v, shapes in getattr(r, table).items() for shape in shapes)
        return (len(s._recent), counts, adds)

    def apply_effect(self, effect, times):
        """``times`` occurrences of a line whose ``effect_of`` is ``effect`` (the echo window aside)."""
        counts, adds = effect[1], effect[2]
        r = self.r
        for name, v, n in counts:
            counter = getattr(r, name)
            counter[v] = counter.get(v, 0) + n * times
        for add in adds:
            if add[2] is None:                   # (counts list, index, None): a shape already added
                add[0][add[1]] += times
            else:
                r._add(add[0], add[1], dict(add[2]), times=times)

    def count_slots(self, adds):
        """``adds`` of a line whose shapes are in the result now, as (counts list, index, None): counting
        another sighting is then one list increment (the dense path's hot loop)."""
        r, out = self.r, []
        for table, v, shape in adds:
            if table == "shapes":
                out.append((r.counts[v], r._seen[(table, v)][_shape_key(shape)], None))
        return tuple(out)

    @property
    def pending(self):
        return self._pending is not None

    def _continue(self, line):
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        body = line.rstrip("\r\n")
        vp = _VLLM_PREFIX.match(body)
        if vp and vp.group(0).strip() in self._pending[1]:
            body = body[vp.end():]       # vLLM prefixes every physical line of a message
        if _NEW_RECORD_START.match(body) or any(m in body for m in _NEW_RECORD_MARKERS):
            self.finish_pending_as_open()
            if _is_candidate(line):
                self._record(line)
            return
        kind, prefix, text, n = self._pending
        text = text + " " + body.strip()
        n += 1
        end = _find_tuple_end(text[text.index("("):]) if "(" in text else -1
        if end >= 0:
            self._pending = None
            self._moe_record(kind, prefix, text, assembled=True)
            return
        if n >= MAX_CONTINUATION_LINES or len(text) > MAX_RECORD_CHARS:
            self._pending = [kind, prefix, text, n]
            self.finish_pending_as_open()
            return
        self._pending = [kind, prefix, text, n]

    def _record(self, line):
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        line = line.rstrip("\r\n")
        if "not found tuned config" in line:
            self._gemm_miss(line)
        elif "[fused_moe]" in line:
            self._fused_moe(line)
        elif "A6W6 shape " in line:
            self._a6w6(line)
        elif "is tuned" in line:
            self._gemm_hit(line)
        elif "GEMM_shape_dump" in line:
            self._dump(line)
        elif "Fp8LinearMethod" in line:
            self._dispatch(line)
        elif "bypass tuned results for fp8 blockscale" in line:
            pos = line.index("bypass tuned results")
            if not self._is_echo(line[:pos], line[pos:]):
                ShapeLogResult._inc(self.r.notes, "moe_blockscale_bypass")

    # -- GEMM ----------------------------------------------------------------------------
    def _variant_for_file(self, path, has_q):
        key = (path, has_q)
        got = self._file_variant.get(key)
        if got is None:
            variant, note = variant_from_tuned_file(path, has_q)
            if note:
                self._warn_once(note)
            got = self._file_variant[key] = variant
        return got

    def _cached(self, message, parse):
        """parse(message) -> (variant, shape, meta) or None, memoised per distinct message text."""
        got = self._cache.get(message, _MISSING)
        if got is _MISSING:
            got = parse(message)
            if got is not None:
                got = got + (_shape_key(got[1]),)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[message] = got
        return got

    def _emit(self, counter, table, parsed):
        variant, shape, meta, key = parsed
        if self.want is not None and variant not in self.want:
            return
        ShapeLogResult._inc(counter, variant)
        if self.keep_meta and meta:
            shape = dict(shape)
            shape["_meta"] = dict(meta)
        else:
            shape = dict(shape)
        self.r._add(table, variant, shape, key)

    def _gemm_miss(self, line):
        start = line.find("shape is ")
        if start < 0:
            self._warn_count("gemm_unparsed", "%d 'not found tuned config' line(s) were not understood", line)
            return
        message = line[start:]
        if self._is_echo(line[:start], message):
            return
        parsed = self._cached(message, self._parse_gemm_miss)
        if parsed is None:
            self._warn_count("gemm_unparsed", "%d 'not found tuned config' line(s) were not understood", line)
            return
        self._emit(self.r.misses, "shapes", parsed)

    def _parse_gemm_miss(self, message):
        m = _BATCH_MISS.match(message)
        if m:
            variant = "batched_bf16" if m.group(5) else "batched_a8w8"
            shape = {"b": int(m.group(1)), "m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4))}
            return variant, shape, {}
        if "dtype=" in message:
            m = _BF16_MISS.match(message)
            if m:
                shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3)),
                         "bias": _pybool(m.group(6)), "dtype": m.group(4), "outdtype": m.group(5),
                         "scaleab": _pybool(m.group(7)),
                         "bpreshuffle": _pybool(m.group(8)) if m.group(8) else False}
                return "bf16", shape, {"file": m.group(9).strip()}
        m = _GEMM_MISS.match(message)
        if m:
            q = m.group(4)
            path = m.group(5).strip()
            variant = self._variant_for_file(path, bool(q))
            shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
            if q:
                shape["q_dtype_w"] = _dtype_str(q)
            return variant, shape, {"file": path}
        return None

    def _gemm_hit(self, line):
        m = _GEMM_HIT.search(line)
        if not m:
            return
        b, mid, rest = m.group(1), m.group(5), m.group(6)
        shape = {"m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4))}
        meta = {}
        pm = _HIT_PADDED.search(mid)
        if pm:
            meta["padded_m"] = int(pm.group(1))
        cu = _HIT_CU.search(rest)
        if cu:
            meta["cu_num"] = int(cu.group(1))
        kn = _HIT_KERNEL.search(rest)
        if kn:
            meta["kernel"] = kn.group(1)
        fm = _HIT_FILE.search(rest)
        path = fm.group(1).strip() if fm else None
        if path:
            meta["file"] = path
        if b is not None:
            variant = "batched_bf16" if "dtype is bf16" in mid else "batched_a8w8"
            shape = {"b": int(b), "m": shape["m"], "n": shape["n"], "k": shape["k"]}
        elif "dtype=" in mid:
            variant = "bf16"
            f = _BF16_FIELDS.search(mid)
            if f:
                shape.update({"bias": _pybool(f.group(3)), "dtype": f.group(1), "outdtype": f.group(2),
                              "scaleab": _pybool(f.group(4)),
                              "bpreshuffle": _pybool(f.group(5)) if f.group(5) else False})
        else:
            q = _HIT_Q.search(mid)
            if q:
                shape["q_dtype_w"] = _dtype_str(q.group(1))
            variant = None
            if path and path != "CKGEMM":
                variant = self._variant_for_file(path, bool(q))
            if variant is None and kn:
                variant = variant_from_kernel_name(kn.group(1))
            if variant is None:
                variant = "a8w8" if q else "a8w8_blockscale"
        if self._is_echo(line[:m.start()], line[m.start():]):
            return
        self._emit(self.r.hits, "hit_shapes", (variant, shape, meta, _shape_key(shape)))

    def _a6w6(self, line):
        start = line.find("A6W6 shape ")
        message = line[start:]
        if self._is_echo(line[:start], message):
            return
        m = _A6W6_MISS.match(message)
        if m:
            shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
            self._emit(self.r.misses, "shapes", (A6W6_VARIANT, shape, {"file": m.group(4).strip()},
                                                 _shape_key(shape)))
            return
        h = _A6W6_HIT.match(message)
        if h:
            shape = {"m": int(h.group(1)), "n": int(h.group(2)), "k": int(h.group(3))}
            meta = {"match": h.group(4), "gfx": h.group(8), "cu_num": int(h.group(9)),
                    "file": h.group(10).strip(), "kernel": h.group(11)}
            if h.group(4) != "exact":
                meta["padded_m"] = int(h.group(5))
            self._emit(self.r.hits, "hit_shapes", (A6W6_VARIANT, shape, meta, _shape_key(shape)))
            return
        self._warn_count("a6w6_unparsed", "%d 'A6W6 shape' line(s) were not understood", line)

    # -- MoE -----------------------------------------------------------------------------
    def _fused_moe(self, line):
        m = _FMOE_DEFAULT.search(line)
        kind = "miss"
        if not m:
            m = _FMOE_FLY.search(line)
        if not m:
            h = _FMOE_HIT.search(line)
            if h:
                if not self._is_echo(line[:h.start()], line[h.start():]):
                    if self._wanted(MOE_VARIANT):
                        ShapeLogResult._inc(self.r.hits, MOE_VARIANT)
                return
            if "flydsl unavailable" in line or "discarding Opus" in line or "is_shuffled=False" in line:
                pos = line.index("[fused_moe]")
                if not self._is_echo(line[:pos], line[pos:]):
                    ShapeLogResult._inc(self.r.notes, "moe_tuned_config_not_used")
                    self._warn_count("moe_not_used", "%d [fused_moe] line(s) say a tuned config exists "
                                     "but was not used (flydsl unavailable / is_shuffled)", line)
            return
        start = m.start()
        prefix = line[:start]
        text = line[start:]
        tpos = text.index("(", text.index(" for ") if " for " in text else 0)
        if _find_tuple_end(text[tpos:]) >= 0:
            self._moe_record(kind, prefix, text)
        else:
            self._pending = [kind, prefix, text, 1]

    def _moe_record(self, kind, prefix, text, assembled=False):
        tpos = text.index("(", text.index(" for ") if " for " in text else 0)
        end = _find_tuple_end(text[tpos:])
        message = text[:tpos + end]
        if assembled:
            message = re.sub(r"\s+", " ", message.replace("( ", "(").replace(" )", ")"))
        if self._is_echo(prefix, message):
            return
        parsed = self._cached(message, self._parse_moe_message)
        if parsed is None:
            tup = message[message.index("(", message.index(" for ") if " for " in message else 0):]
            try:
                parse_moe_tuple(tup)
                why = "?"
            except ValueError as e:
                why = str(e)
            self._warn_count("moe_tuple_bad", "%d [fused_moe] tuple(s) could not be parsed", "%s (%s)" % (tup, why))
            return
        self._emit(self.r.misses, "shapes", parsed)

    @staticmethod
    def _parse_moe_message(message):
        tpos = message.index("(", message.index(" for ") if " for " in message else 0)
        try:
            shape, meta = parse_moe_tuple(message[tpos:])
        except ValueError:
            return None
        return MOE_VARIANT, shape, meta

    # -- SGLang --------------------------------------------------------------------------
    def _dump(self, line):
        start = line.find("[GEMM_shape_dump]")
        parsed = self._cached(line[start:], self._parse_dump) if start >= 0 else None
        if parsed is None:
            self._warn_count("dump_unparsed", "%d [GEMM_shape_dump] line(s) without a csv_row: M,N,K", line)
            return
        self._emit(self.r.dumps, "shapes", parsed)

    def _parse_dump(self, message):
        m = _DUMP.match(message)
        if not m:
            return None
        low = message.lower().replace(_DUMP_FIXED_TEXT, "")
        if self.want and "a8w8_blockscale_bpreshuffle" in self.want and "a8w8_blockscale" not in self.want:
            variant = "a8w8_blockscale_bpreshuffle"
        elif "bpreshuffle" in low:
            variant = "a8w8_blockscale_bpreshuffle"
        else:
            variant = "a8w8_blockscale"
        shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
        return variant, shape, ({"dtype": m.group(4)} if m.group(4) else {})

    def _dispatch(self, line):
        m = _DISPATCH.search(line)
        if not m:
            return
        name, module = m.group(1), m.group(2) or ""
        triton = "triton" in name.lower() or "triton" in module.lower()
        entry = {"name": name, "module": module, "triton": triton}
        if entry not in self.r.dispatch:
            self.r.dispatch.append(entry)
        if triton:
            self._warn_once(
                "SGLang dispatches block-FP8 linears to %s (%s), a Triton kernel: the CK a8w8_blockscale path "
                "is not used, so CK tuning will not help until SGLang uses aiter's CK GEMM (see "
                "fp8_utils.py dispatch / --fp8-gemm-backend)" % (name, module or "?"))


def _pybool(tok):
    return str(tok).strip().strip("'\"").lower() in ("true", "1")


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def parse_stream(lines, variant=None, keep_meta=False):
    """Parse an iterable of lines (str, or bytes decoded as utf-8 with errors="replace").

    ``variant``: None (all), a variant name, or an iterable of names to keep. ``bytes`` counts the
    utf-8 size of the lines seen.
    """
    p = _Parser(variant, keep_meta)
    r = p.r
    nlines = 0
    nbytes = 0
    for line in lines:
        if isinstance(line, (bytes, bytearray)):
            nbytes += len(line)
            line = bytes(line).decode("utf-8", "replace")
        else:
            nbytes += len(line) if line.isascii() else len(line.encode("utf-8", "replace"))
        nlines += 1
        if p._pending is not None or _is_candidate(line):
            if len(line) > MAX_LINE_BYTES:
                p.skip_long_line(line[:300], _is_candidate(line))
            else:
                p.feed(line)
    r.lines += nlines
    r.bytes += nbytes
    return p.finish()


def _open_binary(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


# --------------------------------------------------------------------------------------------
# scanning: bytes -> the candidate lines the rules above see (what grep does, then parse those)
# --------------------------------------------------------------------------------------------

MAX_LINE_BYTES = 1 << 20   # a longer physical line is skipped unparsed (one warning): memory stays O(1)
DENSE_PROBE_BYTES = 256 << 10
DENSE_MIN_CANDIDATES = 16  # "tuned" this often in a block's first 256 KiB: count identical lines instead
_EFFECTS_MAX = 65536


def _is_candidate_b(line):
    return (b"tuned" in line or b"fused_moe" in line or b"GEMM_shape_dump" in line
            or b"Fp8LinearMethod" in line)


class _Scanner(object):
    """Feeds a parser from binary blocks and counts the lines; memory is bounded by the block size.

    Sparse blocks: ``bytes.find`` of the needles; only those lines are decoded and fed (the cost
    grows with the number of candidates, not with the size). Dense blocks (a serving log repeats the
    same few miss lines millions of times): ``bytes.split`` + ``collections.Counter`` (C speed), then
    each distinct candidate line is applied once with its count, in first-seen order. That is exact
    because only order-free lines go that way (``_Parser.effect_of``; anything else sends the block to
    the sparse path), and the last ``ECHO_WINDOW`` records are fed one by one so that the SGLang echo
    window ends as ``feed`` would leave it.
    """

    def __init__(self, parser):
        self.p = parser
        self.effects = {}   # line bytes -> effect (only order-free lines are remembered)

    def dense(self, block):
        """Worth counting identical lines: many candidates, and no record or echo spans into the block."""
        p = self.p
        return (p._pending is None and block.count(b"tuned", 0, DENSE_PROBE_BYTES) >= DENSE_MIN_CANDIDATES
                and not any(sg for _msg, sg in p._recent))

    def _effect(self, line):
        eff = self.effects.get(line)
        if eff is None and len(line) <= MAX_LINE_BYTES:
            eff = self.p.effect_of(line.decode("utf-8", "replace"))
            if eff is not None:
                if len(self.effects) >= _EFFECTS_MAX:
                    self.effects.clear()
                self.effects[line] = eff
        return eff

    def count_lines(self, lines):
        """Apply whole lines by their counts; False (nothing applied) when some line needs its neighbours."""
        p = self.p
        i = len(lines)
        records = 0
        while i > 0 and records < ECHO_WINDOW:
            i -= 1
            if _is_candidate_b(lines[i]):
                eff = self._effect(lines[i])
                if eff is None:
                    return False
                records += eff[0]
        if records < ECHO_WINDOW:
            return False
        counted = []
        effects = self.effects
        for line, count in collections.Counter(lines[:i]).items():
            eff = effects.get(line)
            if eff is None:
                if not _is_candidate_b(line):
                    continue
                eff = self._effect(line)
                if eff is None:
                    return False
            counted.append((line, eff, count))
        for line, eff, count in counted:
            p.apply_effect(eff, count)
            if eff[2] and eff[2][0][2] is not None:   # its shapes are in the result now: count them only
                effects[line] = (eff[0], eff[1], p.count_slots(eff[2]))
        # no record here is SGLang's, so none was an echo: only the window's final content matters
        p._recent.clear()
        p._recent_counts.clear()
        for line in lines[i:]:
            if _is_candidate_b(line):
                p.feed(line.decode("utf-8", "replace"))
        return True

    def feed_range(self, data, s, e):
        p = self.p
        if e - s > MAX_LINE_BYTES:
            p.skip_long_line(data[s:s + 300].decode("utf-8", "replace"), _is_candidate_b(data[s:e]))
        else:
            p.feed(data[s:e].decode("utf-8", "replace"))

    def sparse(self, data, n):
        """Feed the candidate lines of ``data[:n]`` (whole lines only) to the parser."""
        p = self.p
        cursor = 0
        # a wrapped MoE tuple from the previous chunk continues here
        while p._pending is not None and cursor < n:
            e = data.find(b"\n", cursor, n)
            if e < 0:
                e = n
            self.feed_range(data, cursor, e)
            cursor = e + 1
        starts = set()
        for needle in _NEEDLES_B:
            pos = data.find(needle, cursor, n)
            while pos >= 0:
                starts.add(data.rfind(b"\n", 0, pos) + 1)
                e = data.find(b"\n", pos, n)
                if e < 0:
                    break
                pos = data.find(needle, e + 1, n)
        for s in sorted(starts):
            if s < cursor:
                continue
            e = data.find(b"\n", s, n)
            if e < 0:
                e = n
            self.feed_range(data, s, e)
            cursor = e + 1
            while p._pending is not None and cursor < n:
                e = data.find(b"\n", cursor, n)
                if e < 0:
                    e = n
                self.feed_range(data, cursor, e)
                cursor = e + 1

    def file(self, f, chunk_bytes):
        """A whole file in ``chunk_bytes`` reads. A line that outgrows MAX_LINE_BYTES before its newline
        is dropped (not kept in memory) up to that newline, as a complete over-long line would be."""
        p, r = self.p, self.p.r
        tail = b""
        long_line = None    # while dropping an over-long line: [example, is a candidate, last bytes]
        while True:
            block = f.read(chunk_bytes)
            if not block:
                break
            r.bytes += len(block)
            if long_line is not None:
                nl = block.find(b"\n")
                part = block if nl < 0 else block[:nl]
                long_line[1] = long_line[1] or _is_candidate_b(long_line[2] + part)
                long_line[2] = part[-16:]
                if nl < 0:
                    continue
                r.lines += 1
                p.skip_long_line(long_line[0], long_line[1])
                long_line = None
                block = block[nl + 1:]
            if self.dense(block):
                lines = block.split(b"\n")
                if tail:
                    lines[0] = tail + lines[0]
                rest = lines.pop()
                if lines and self.count_lines(lines):
                    r.lines += len(lines)
                    block = b""
                    tail = rest
            if block:
                data = tail + block if tail else block
                cut = data.rfind(b"\n")
                if cut < 0:
                    tail = data
                else:
                    tail = data[cut + 1:]
                    self.sparse(data, cut)
                    r.lines += data.count(b"\n", 0, cut + 1)
            if len(tail) > MAX_LINE_BYTES:
                long_line = [tail[:300].decode("utf-8", "replace"), _is_candidate_b(tail), tail[-16:]]
                tail = b""
        if long_line is not None:
            r.lines += 1
            p.skip_long_line(long_line[0], long_line[1])
        elif tail:
            r.lines += 1
            self.sparse(tail + b"\n", len(tail))


def parse_files(paths, variant=None, keep_meta=False, skip_missing=False, chunk_bytes=CHUNK_BYTES):
    """Parse log files (plain or .gz) in binary chunks; memory stays bounded (lines over 1 MiB skipped).

    Missing files raise FileNotFoundError unless ``skip_missing`` (then listed in ``.missing``).
    """
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    p = _Parser(variant, keep_meta)
    r = p.r
    scanner = _Scanner(p)
    for path in paths:
        path = os.fspath(path)
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        try:
            f = _open_binary(path)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            if not skip_missing:
                raise
            r.missing.append(path)
            continue
        r.files.append(path)
        with f:
            scanner.file(f, chunk_bytes)
        p.reset_file()
    return p.finish()


# --------------------------------------------------------------------------------------------
# M / token presets
# --------------------------------------------------------------------------------------------

M_PRESETS = {
    "pow2": [1 << i for i in range(16)],                              # 1 .. 32768
    "cudagraph": [1, 2, 4] + list(range(8, 513, 8)),                  # vLLM default capture sizes
}


def m_sweep(preset="pow2"):
    """List of M values: "pow2" (default), "cudagraph", "a,b,c", or an explicit iterable of ints."""
    if preset is None:
        preset = "pow2"
    if isinstance(preset, str):
        key = preset.strip().lower()
        if key in M_PRESETS:
            return list(M_PRESETS[key])
        try:
            values = [int(x) for x in key.replace(" ", "").split(",") if x]
        except ValueError:
            raise ValueError("unknown M preset %r (choose pow2, cudagraph, or a list like 1,2,4)" % preset)
    else:
        values = [int(x) for x in preset]
    if not values or any(v <= 0 for v in values):
        raise ValueError("M values must be positive integers, got %r" % (preset,))
    return sorted(set(values))


def moe_token_sweep(max_token=32768):
    """Powers of two 1..max_token: AITER pads MoE tokens to nextPow2 below 32768 before the lookup."""
    out = []
    t = 1
    while t <= max_token:
        out.append(t)
        t <<= 1
    return out


def expand_m(shapes, preset="pow2", keep_logged=True, tokens=None):
    """Cross each distinct non-M part of ``shapes`` with the M preset.

    GEMM shapes: grouped by every key but ``m`` (i.e. (N, K[, q_dtype_w]); batched (B, N, K); bf16 its
    dtype fields). MoE shapes (``token`` key): grouped by every key but ``token``, crossed with ``tokens``
    (default ``moe_token_sweep()``). ``keep_logged`` keeps the M/token values that were logged (the
    runtime looks the exact M up first). Groups keep first-seen order; M ascending inside a group.
    ``preset=None`` or ``"none"`` returns the shapes unchanged (``_meta`` dropped).
    """
    shapes = list(shapes)
    if preset is None or (isinstance(preset, str) and preset.strip().lower() in ("none", "logged")):
        return [{k: v for k, v in s.items() if k != "_meta"} for s in shapes]
    ms = m_sweep(preset)
    toks = list(tokens) if tokens is not None else moe_token_sweep()
    groups = collections.OrderedDict()
    for s in shapes:
        dim = "token" if "token" in s else "m"
        base = tuple((k, v) for k, v in s.items() if k not in (dim, "_meta"))
        g = groups.get((dim, base))
        if g is None:
            g = groups[(dim, base)] = set()
        if keep_logged and dim in s:
            g.add(int(s[dim]))
    out = []
    for (dim, base), logged in groups.items():
        values = sorted(set(toks if dim == "token" else ms) | logged)
        keys = [k for k, _ in base]
        for v in values:
            d = dict(base)
            d[dim] = v
            # canonical order: the dim first for GEMM (after b), token first for MoE
            if dim == "m":
                order = (["b"] if "b" in d else []) + ["m"] + [k for k in keys if k != "b"]
            else:
                order = ["token"] + keys
            out.append({k: d[k] for k in order})
    return out


# --------------------------------------------------------------------------------------------
# CLI (handy on a node: python3 shapelog.py server.log [--variant NAME] [--meta])
# --------------------------------------------------------------------------------------------


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="AITER untuned-shape log parser")
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--meta", action="store_true")
    ap.add_argument("--summary", action="store_true", help="counts only, no shape lists")
    args = ap.parse_args(argv)
    r = parse_files(args.logs, variant=args.variant, keep_meta=args.meta)
    d = r.to_dict()
    if args.summary:
        d["shapes"] = {v: len(s) for v, s in d["shapes"].items()}
        d["hit_shapes"] = {v: len(s) for v, s in d["hit_shapes"].items()}
        d["counts"] = {v: sum(c) for v, c in d["counts"].items()}
    json.dump(d, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
