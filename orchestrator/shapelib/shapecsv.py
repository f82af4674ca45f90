"""AITER's own shape capture: the ``*_untuned_*.csv`` files the runtime appends its misses to.

With ``AITER_TUNE_GEMM=1`` (and ``AITER_TUNE_GEMM_DIR=DIR``) the runtime's ``aiter/utility/untuned_shapes.py``
(PR #5268) appends every missed shape of every GEMM family to a file named after the tuned table it consulted
(``a8w8_bpreshuffle_tuned_gemm.csv`` -> ``a8w8_bpreshuffle_untuned_gemm.csv``; a name without ``_tuned_``
gets ``untuned_`` in front), in the tuner's own input schema (header ``M,N,K`` or ``M,N,K,q_dtype_w``,
bf16 ``M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle``). Two forms exist upstream, both read here:
one file per family that every process appends to (a row is written once per process, so a row seen
``n`` times was missed by ``n`` processes), or one shard per process
(``<family>_untuned_gemm.<AITER_TUNE_GEMM_SHARD_ID or host.pid>.csv``): a row in ``n`` shards, again ``n``
processes. That number is the shape's weight (``counts``). A torn append (a row with fewer fields than the
header) is skipped, as AITER's tuner does, and counted in one warning. The fused-MoE runtime's own online
file (``untuned_fmoe.csv``) has the same form. Stdlib only, Python >= 3.8.
"""

import os
import re

from .shapefmt import MOE_VARIANT, dtype_str, pybool, variant_from_tuned_file

# <family>_untuned_<rest>[.<shard>].csv, or untuned_<rest>[.<shard>].csv
_NAME = re.compile(r"^(?P<stem>(?:.+_)?untuned_[^.]+)(?:\.(?P<shard>[^/]+))?\.csv$")
_INTS = ("b", "m", "n", "k", "token", "model_dim", "inter_dim", "expert", "topk", "use_g1u1", "doweight_stage1")
_BOOLS = ("bias", "scaleab", "bpreshuffle")
_DTYPES = ("q_dtype_w", "q_dtype_a", "dtype", "outdtype")
_ENUMS = {"act_type": "ActivationType", "q_type": "QuantType"}
_KNOWN = set(_INTS) | set(_BOOLS) | set(_DTYPES) | set(_ENUMS)
CAPTURE_HINT = ("AITER writes these with AITER_TUNE_GEMM=1 AITER_TUNE_GEMM_DIR=DIR in the server's "
                "environment (aiter/utility/untuned_shapes.py)")


def capture_name(path):
    """The file's stem (``a8w8_untuned_gemm``) when its name is a capture file's, else None."""
    m = _NAME.match(os.path.basename(path))
    return m.group("stem") if m else None


def capture_variant(path, columns):
    """(variant, note) of a capture file, from the tuned table its name was made from."""
    stem = capture_name(path) or ""
    if "fmoe" in stem or "token" in columns:
        return MOE_VARIANT, None
    if stem.startswith("untuned_"):
        tuned = stem[len("untuned_"):]
    else:
        tuned = stem.replace("_untuned_", "_tuned_", 1)
    if tuned.startswith("bf16_") and "batched" not in tuned or "outdtype" in columns:
        return "a16w16", None
    return variant_from_tuned_file(tuned + ".csv", "q_dtype_w" in columns)


def looks_like_capture(path, first_line):
    """A capture file: its name says so and its first line is a CSV header (not a log line)."""
    if capture_name(path) is None:
        return False
    cols = [c.strip().lower() for c in first_line.decode("utf-8", "replace").strip().split(",")]
    return len(cols) >= 2 and all(re.match(r"^[a-z_][a-z0-9_]*$", c) for c in cols) and \
        ("m" in cols or "token" in cols)


def _typed(col, value):
    v = value.strip().strip("'\"")
    if col in _INTS:
        return int(float(v))
    if col in _BOOLS:
        return pybool(v)
    if col in _DTYPES:
        return dtype_str(v)
    if col in _ENUMS:
        m = re.match(r"^<\s*([\w.]+)\s*:", v)
        v = m.group(1) if m else v
        return v if "." in v else "%s.%s" % (_ENUMS[col], v)
    return v


def parse_capture(f, path, parser):
    """Feed the rows of one capture file (binary file object) into ``parser`` (shaperecords.RecordParser):
    each row is one process's miss (counted in ``misses``, weighted in ``counts``)."""
    r = parser.r
    header = f.readline()
    r.lines += 1
    r.bytes += len(header)
    cols = [c.strip().lower() for c in header.decode("utf-8", "replace").strip().split(",")]
    variant, note = capture_variant(path, cols)
    if note:
        parser._warn_once(note)
    if not parser._wanted(variant):
        for raw in f:
            r.lines += 1
            r.bytes += len(raw)
        return
    keep = [(i, c) for i, c in enumerate(cols) if c in _KNOWN]
    torn = 0
    for raw in f:
        r.lines += 1
        r.bytes += len(raw)
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            continue
        cells = text.split(",")
        if len(cells) != len(cols):
            torn += 1
            continue
        try:
            shape = dict((c, _typed(c, cells[i])) for i, c in keep)
        except ValueError:
            torn += 1
            continue
        r._inc(r.misses, variant)
        if parser.keep_meta:
            shape["_meta"] = {"capture": path}
        r._add("shapes", variant, shape)
    if torn:
        parser._warn_once("%s: %d row(s) with the wrong number of fields were skipped (a torn append; "
                          "AITER's tuner skips them too)" % (path, torn))


def expand_dirs(paths):
    """A directory (AITER_TUNE_GEMM_DIR, a log directory) stands for the files in it, sorted, as the
    ``shapes`` op has always read one; other paths are kept as given."""
    out = []
    for p in paths:
        if isinstance(p, str) and os.path.isdir(p):
            out.extend(sorted(os.path.join(p, n) for n in os.listdir(p) if os.path.isfile(os.path.join(p, n))))
        else:
            out.append(p)
    return out
