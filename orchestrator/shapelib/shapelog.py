"""Streaming parser for AITER "no tuned config" log lines -> distinct shapes per kernel variant.

STDLIB ONLY, Python >= 3.8, no imports from ``orchestrator`` outside this package: pushed into containers
with the node-side package (``orchestrator.nodeside``'s ``shapes`` op) and also imported locally by
``tune-remote shapes``; ``python3 -m orchestrator.shapelib.shapelog`` is its CLI. This module is the public face
(and the CLI, and the M/token sweeps); the work is split by concern: ``shapefmt`` (the message formats,
regexes, variant names, the MoE tuple), ``shaperules`` (what each message adds to the result),
``shaperecords`` (physical lines -> records: continuations, echoes, memo), ``shapescan`` (bytes ->
candidate lines, grep-style) and ``shapepar`` (``parse_files``: files, a big dense one over several
processes). Beside them: ``text`` (ANSI escapes, line prefixes; shared with the laptop's parsers) and
``variant_facts`` (MOE_KEY, tuned-file stems: generated from orchestrator/variants.py).

Formats are from ../../../shared/reference/aiter-formats.md §3 and aiter-real-logs.md.

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
  ``batched_a8w8``. bf16 lines -> variant ``a16w16``.
  Old lines without a file (aiter v0.1.5.x), decided here:
    ``in CKGEMM``            -> ``a8w8_blockscale`` (``a8w8`` when the line has q_dtype_w). In v0.1.5 the
                                same string was printed by the a8w8 CK lookup too, so this is a guess;
                                tune-remote supports aiter >= 0.1.9 where the file path is printed.
    ``in CKGEMM or asmGEMM`` -> ``a4w4_blockscale`` (gemm_op_a4w4.py, v0.1.5.post4 - v0.1.9)
    ``in ASMGEMM``           -> ``a8w8_bpreshuffle`` (the ASM int8/fp8 kernels live in the bpreshuffle
                                table today); a warning says it was inferred.
  An unrecognised file name falls back the same way (q_dtype_w -> a8w8, else a8w8_blockscale) with
  one warning per file name.

MXFP8 BMM misses (``shapebmm``: aiter/ops/opus/policy.py, once per shape per process; no file named)
  ``shape B:{b} M:{m} N:{n} K:{k} w_scale {block} has no MXFP8 BMM tuned row`` (older: no ``w_scale``,
  block 128x128) -> ``bmm_a8w8_mxscale_bpreshuffle``, key b, m, n, k, w_scale_block.

GEMM hits (counted in ``hits``; shape in ``hit_shapes``; never a miss)
  ``... found padded_M: {p}, N:.., K:.. is tuned ...`` (all families, with or without q_dtype_w, the
  batched ``..., is tuned on cu_num = ..`` forms, the bf16 form and v0.1.4 ``shape M:.. is tuned on``).
  Variant from the file named after `` in ``, or, for ``in CKGEMM`` (v0.1.5), from the kernel name.

MX asm GEMM lookups (only with ``AITER_LOG_TUNED_CONFIG=1``, once per shape per process; shapefmt.parse_mx_lookup)
  A6W6 / A6W4 / A4W6 (variant ``a6w6`` / ``a6w4`` / ``a4w6``: the prefix in lower case)
  miss: ``{FAM} shape M:{M} N:{N} K:{K} has no tuned config in {file}; using the safe default kernel``
  hit:  ``{FAM} shape M:.. N:.. K:.. matched exact|padded config M:.. N:.. K:..[ on {gfx}/{cu}] in {file}: {kernel}``
  (A6W6 names gfx/cu, A6W4/A4W6 do not; padded: M/N to 256, K to 128). A16W8 MXFP8 (``a16w8_mxfp8``):
  miss: ``A16W8 MXFP8 shape M:.. N:.. K:.. has no tuned config for {gfx}/{cu} in {file}; using the default kernel``
  hit:  ``A16W8 MXFP8 shape M:.. N:.. K:.. uses the M:{bucket} entry of {file}: {kernel} splitK {n}``

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
counted at C speed instead (see ``LineScanner``). A physical line longer than ``MAX_LINE_BYTES`` (1 MiB) is
skipped unparsed, with one counted warning, so memory stays bounded by the block size whatever the
log. ``parse_stream`` applies the same rules per line.

M presets: ``m_sweep("pow2")`` (1..32768, default), ``m_sweep("cudagraph")`` (vLLM default capture sizes
1, 2, 4, 8..512 step 8, as in seed 003), or an explicit list; ``expand_m(shapes, preset)`` crosses them
with each distinct (N, K[, q_dtype_w]) (GEMM; batched per (B, N, K); bf16 per its non-M key) and each MoE
config (token sweep: powers of two 1..32768, the only token values AITER's padded lookup can hit).
"""

from __future__ import annotations

import collections
import json
import sys


from .shapefmt import CHUNK_BYTES, MOE_KEY, parse_moe_tuple, variant_from_tuned_file
from .shaperecords import parse_stream
from .shaperules import ShapeLogResult
from .shapepar import parse_files

__all__ = [
    "ShapeLogResult", "parse_stream", "parse_files", "variant_from_tuned_file",
    "m_sweep", "moe_token_sweep", "expand_m", "M_PRESETS", "MOE_KEY", "CHUNK_BYTES", "parse_moe_tuple",
]


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
    ap.add_argument("--procs", type=int, default=None,
                    help="processes for a big dense log (default: the CPUs this process may use, at most 8)")
    args = ap.parse_args(argv)
    r = parse_files(args.logs, variant=args.variant, keep_meta=args.meta, procs=args.procs)
    d = r.to_dict()
    if args.summary:
        d["ranges"] = r.ranges
        d["shapes"] = {v: len(s) for v, s in d["shapes"].items()}
        d["hit_shapes"] = {v: len(s) for v, s in d["hit_shapes"].items()}
        d["counts"] = {v: sum(c) for v, c in d["counts"].items()}
    json.dump(d, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
