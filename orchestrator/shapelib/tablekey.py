"""The key of a tuned table, read from the table's own header: ONE definition that staging, promotion,
rollback, audit, the merge and compare all use (issue 36, bmm_a8w8_mxscale_bpreshuffle).

A tuned table is keyed by the GPU columns it has (``gfx``, ``cu_num``: each only where the header has it)
and then its shape columns, spelled as the table spells them: upper case in the CK tables
(``gfx,cu_num,M,N,K``, batched ``B,M,N,K``), lower case WITHOUT cu_num in the opus/FlyDSL MXFP8 BMM table
(``gfx,b,m,n,k,w_scale_block``: OpusBmmMxscaleTuner.KEYS, stored ROCm/aiter f081855b). Whether cu_num is
part of the key is decided by the node's table header, never by an AITER version: ROCm/aiter PR #5668
(open) would add cu_num to that table, and both forms work here.

``table_key(header, shape_columns=None)``: the key columns as ``header`` spells them. ``shape_columns``
(a variant's, any case) name the shape part; without them every known GEMM key column present is one.
``has_cu_num(header)``: whether cu_num is part of that table's key.
``prefix_columns(values)``: the GPU columns a promotion record's key prefix (staging's gfx/cu_num values,
as many as that table has) stands for: two are gfx, cu_num; one is gfx where it names one (a cu_num-less
table such as the MXFP8 BMM one), else cu_num (an older table without gfx). Stdlib only (node side, 3.8).
"""

from __future__ import annotations

GPU_COLUMNS = ("gfx", "cu_num")
# every GEMM table's shape key columns, in the order AITER's tuners write them (bf16's extra columns; the
# MXFP8 BMM table's per-group weight-scale block "32x32" | "128x128" | "1x32")
GEMM_SHAPE_COLUMNS = ("B", "M", "N", "K", "q_dtype_w", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle",
                      "w_scale_block")


def _spelled(header) -> dict:
    """lower case -> the header's own spelling (the first of a name, as csv.DictReader would keep it)."""
    out = {}
    for h in header:
        out.setdefault(str(h).strip().lower(), str(h).strip())
    return out


def table_key(header, shape_columns=None) -> list:
    spelled = _spelled(header)
    shape = GEMM_SHAPE_COLUMNS if shape_columns is None else tuple(shape_columns)
    cols = [spelled[c] for c in GPU_COLUMNS if c in spelled]
    for c in shape:
        low = c.lower()
        if low in GPU_COLUMNS or low not in spelled:
            continue
        if spelled[low] not in cols:
            cols.append(spelled[low])
    return cols


def has_cu_num(header) -> bool:
    return "cu_num" in _spelled(header)


def prefix_columns(values) -> tuple:
    values = [str(v) for v in values]
    if len(values) == 2:
        return GPU_COLUMNS
    if len(values) == 1:
        return ("gfx",) if values[0].lower().startswith("gfx") else ("cu_num",)
    return () if not values else None


def no_cu_num_note(label) -> str:
    """What audit cannot tell in a table whose key has no cu_num (the runtime looks its rows up on every CU
    count of the gfx)."""
    return (f"{label} has no cu_num column: audit cannot tell a row tuned on another GPU of the same gfx "
            "(MI350P, 128 CUs, vs MI355X, 256 CUs) from one of this node's; no foreign_cu_num check there "
            "(ROCm/aiter PR #5668, open, would add cu_num to its key)")
