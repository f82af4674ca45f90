"""What each AITER message adds to a parse: the result container and the per-message rules (GEMM miss/hit,
the MX asm GEMMs' lookups, fused MoE, SGLang dump/dispatch) that RecordParser mixes in. Stdlib only, Python >= 3.8."""

from __future__ import annotations

import collections
import json
import re

from .shapefmt import (
    MOE_VARIANT, BATCH_MISS, BF16_FIELDS, BF16_MISS,
    DISPATCH, DUMP, DUMP_FIXED_TEXT, FMOE_DEFAULT, FMOE_FLY, FMOE_HIT, FMOE_UNSUPPORTED, GEMM_HIT,
    GEMM_MISS, HIT_CU, HIT_FILE, HIT_KERNEL, HIT_PADDED, HIT_Q, dtype_str,
    find_tuple_end, parse_mx_lookup, pybool, shape_tuple_key, parse_moe_tuple, variant_from_kernel_name)
from .shapefhmoe import FHMOE_VARIANT, TUNABLE as FHMOE_TUNABLE, parse_raise
from .shapebmm import parse_miss as parse_bmm_miss


# --------------------------------------------------------------------------------------------
# result
# --------------------------------------------------------------------------------------------


class ShapeLogResult(object):
    """Outcome of one parse. All counters are per variant name."""

    def __init__(self):
        self.shapes = collections.OrderedDict()      # variant -> [shape] (misses + dumps)
        self.hit_shapes = collections.OrderedDict()  # variant -> [shape] (tuned lookups)
        self.unsupported = collections.OrderedDict() # variant -> [shape] AITER's online tuner found no config for
        self.refused = collections.OrderedDict()     # variant -> 'Fmoe tuning not support' lines
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
        self.ranges = {"counted": 0, "scanned": 0, "processes": 1}   # shapepar (parse_files)
        self._seen = {}                              # (table, variant) -> {key: index in the table}
        self.counts = collections.OrderedDict()      # variant -> [lookups of shapes[variant][i]]
        # variant -> [processes that logged shapes[variant][i]]: the weight where AITER logs a miss once per
        # shape per process (a line without a process prefix counts as one process of its own)
        self.workers = collections.OrderedDict()
        self._worker_seen = set()                    # (variant, index, process)

    # -- building ------------------------------------------------------------------------
    def _add(self, table, variant, shape, key=None, times=1, who=None):
        seen = self._seen.setdefault((table, variant), {})
        if key is None:
            key = shape_tuple_key(shape)
        at = seen.get(key)
        if at is not None:
            if table == "shapes":
                self.counts[variant][at] += times
                self._worker(variant, at, who, times)
            return False
        rows = getattr(self, table).setdefault(variant, [])
        seen[key] = len(rows)
        rows.append(shape)
        if table == "shapes":
            self.counts.setdefault(variant, []).append(times)
            self.workers.setdefault(variant, []).append(0)
            self._worker(variant, seen[key], who, times)
        return True

    def _worker(self, variant, at, who, times):
        """``times`` lines of shape ``at`` from process ``who`` (None: each line a process of its own)."""
        if who is None:
            self.workers[variant][at] += times
        elif (variant, at, who) not in self._worker_seen:
            self._worker_seen.add((variant, at, who))
            self.workers[variant][at] += 1

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
        d = self._dict()
        if self.unsupported:   # only when the log has such lines: the dict of every other log is as before
            d["unsupported"] = {v: list(s) for v, s in self.unsupported.items()}
            d["refused"] = dict(self.refused)
        return d

    def workers_dict(self):
        """{variant: [processes that logged each shape]}: what the node ops answer as ``workers`` beside
        ``counts`` (the laptop weighs by it where the node's AITER logs a miss once per process)."""
        return {v: list(c) for v, c in self.workers.items()}

    def _dict(self):
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
        for name in ("shapes", "counts", "workers", "hit_shapes", "hits", "misses", "dumps", "notes", "unsupported",
                     "refused"):
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


def logs_once(probes, source):
    """Does the node print a variant's miss line once per shape per process? Its own runtime file's answer
    (``miss_once[source]``, the registry's ``miss_source``; issue 36); a state probed before that key (a job or
    watch state of an older tune-remote): ``miss_log_once``, the node's one answer then; else False."""
    probes = probes or {}
    once = probes.get("miss_once")
    if isinstance(once, dict):
        return once.get(source) is True
    return probes.get("miss_log_once") is True


def miss_weights(answer, variant, once_per_process):
    """Each shape's weight in a shapes / log_tail answer: where the node's AITER logs a miss once per shape per
    process (``logs_once``: probed in the variant's runtime file), the processes that logged it (``workers``: a
    line's count there says nothing about how often the shape ran); elsewhere its lines (``counts``). A list aligned
    with ``answer["shapes"][variant]``; an answer without the asked-for list (an older helper) gives 1 each."""
    n = len((answer.get("shapes") or {}).get(variant) or [])
    got = (answer.get("workers" if once_per_process else "counts") or {}).get(variant) or []
    return [int(got[i]) if i < len(got) else 1 for i in range(n)]


class MessageRules(object):
    """The message rules of ``shaperecords.RecordParser`` (which holds the state they use)."""

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
        self._emit(self.r.misses, "shapes", parsed, line[:start])

    def _parse_gemm_miss(self, message):
        m = BATCH_MISS.match(message)
        if m:
            variant = "batched_bf16" if m.group(5) else "batched_a8w8"
            shape = {"b": int(m.group(1)), "m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4))}
            return variant, shape, {}
        if "dtype=" in message:
            m = BF16_MISS.match(message)
            if m:
                shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3)),
                         "bias": pybool(m.group(6)), "dtype": m.group(4), "outdtype": m.group(5),
                         "scaleab": pybool(m.group(7)),
                         "bpreshuffle": pybool(m.group(8)) if m.group(8) else False}
                return "a16w16", shape, {"file": m.group(9).strip()}
        m = GEMM_MISS.match(message)
        if m:
            q = m.group(4)
            path = m.group(5).strip()
            variant = self._variant_for_file(path, bool(q))
            shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
            if q:
                shape["q_dtype_w"] = dtype_str(q)
            return variant, shape, {"file": path}
        return None

    def _gemm_hit(self, line):
        m = GEMM_HIT.search(line)
        if not m:
            return
        b, mid, rest = m.group(1), m.group(5), m.group(6)
        shape = {"m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4))}
        meta = {}
        pm = HIT_PADDED.search(mid)
        if pm:
            meta["padded_m"] = int(pm.group(1))
        cu = HIT_CU.search(rest)
        if cu:
            meta["cu_num"] = int(cu.group(1))
        kn = HIT_KERNEL.search(rest)
        if kn:
            meta["kernel"] = kn.group(1)
        fm = HIT_FILE.search(rest)
        path = fm.group(1).strip() if fm else None
        if path:
            meta["file"] = path
        if b is not None:
            variant = "batched_bf16" if "dtype is bf16" in mid else "batched_a8w8"
            shape = {"b": int(b), "m": shape["m"], "n": shape["n"], "k": shape["k"]}
        elif "dtype=" in mid:
            variant = "a16w16"
            f = BF16_FIELDS.search(mid)
            if f:
                shape.update({"bias": pybool(f.group(3)), "dtype": f.group(1), "outdtype": f.group(2),
                              "scaleab": pybool(f.group(4)),
                              "bpreshuffle": pybool(f.group(5)) if f.group(5) else False})
        else:
            q = HIT_Q.search(mid)
            if q:
                shape["q_dtype_w"] = dtype_str(q.group(1))
            variant = None
            if path and path != "CKGEMM":
                variant = self._variant_for_file(path, bool(q))
            if variant is None and kn:
                variant = variant_from_kernel_name(kn.group(1))
            if variant is None:
                variant = "a8w8" if q else "a8w8_blockscale"
        if self._is_echo(line[:m.start()], line[m.start():]):
            return
        self._emit(self.r.hits, "hit_shapes", (variant, shape, meta, shape_tuple_key(shape)))

    def _mx_lookup(self, start, line):
        """An MX asm GEMM's own lookup line (A6W6, A6W4, A4W6, A16W8 MXFP8: shapefmt.parse_mx_lookup)."""
        message = line[start:]
        if self._is_echo(line[:start], message):
            return
        parsed = parse_mx_lookup(message)
        if parsed is None:
            self._warn_count("mx_unparsed", "%d MX GEMM lookup line(s) ('A6W6/A6W4/A4W6/A16W8 MXFP8 shape') "
                             "were not understood", line)
            return
        hit, variant, shape, meta = parsed
        if hit:
            self._emit(self.r.hits, "hit_shapes", (variant, shape, meta, shape_tuple_key(shape)))
        else:
            self._emit(self.r.misses, "shapes", (variant, shape, meta, shape_tuple_key(shape)), line[:start])

    def _bmm_mxscale(self, line):
        """The MXFP8 BMM lookup's miss line (shapebmm.py): both forms, the w_scale block a key column."""
        start = line.find("shape B:")
        parsed = parse_bmm_miss(line[start:]) if start >= 0 else None
        if parsed is None:
            self._warn_count("bmm_unparsed", "%d 'has no MXFP8 BMM tuned row' line(s) were not understood", line)
            return
        if self._is_echo(line[:start], line[start:]):
            return
        variant, shape = parsed
        self._emit(self.r.misses, "shapes", (variant, shape, {}, shape_tuple_key(shape)), line[:start])

    def _fhmoe(self, line):
        """FHMoE raises instead of logging a miss (shapefhmoe.py): HY4 MXFP8 is a shape to tune, DSV4 I384 one
        this AITER's tune_fhmoe.py cannot tune (refused, like 'Fmoe tuning not support')."""
        parsed = parse_raise(line)
        if parsed is None or self._is_echo(line[:line.find("The active FHMoE")], line[line.find("The active FHMoE"):]):
            return
        contract, shape, meta = parsed
        table = (self.r.misses, "shapes") if contract == FHMOE_TUNABLE else (self.r.refused, "unsupported")
        self._emit(table[0], table[1], (FHMOE_VARIANT, shape, meta, shape_tuple_key(shape)), line[:line.find("The")])

    # -- MoE -----------------------------------------------------------------------------
    def _fused_moe(self, line):
        m = FMOE_DEFAULT.search(line)
        kind = "miss"
        if not m:
            m = FMOE_FLY.search(line)
        if not m:
            m = FMOE_UNSUPPORTED.search(line)   # aiter#3202: AITER_ONLINE_TUNE ran its tuner and got no row
            kind = "unsupported" if m else kind
        if not m:
            h = FMOE_HIT.search(line)
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
        if find_tuple_end(text[tpos:]) >= 0:
            self._moe_record(kind, prefix, text)
        else:
            self._pending = [kind, prefix, text, 1]

    def _moe_record(self, kind, prefix, text, assembled=False):
        tpos = text.index("(", text.index(" for ") if " for " in text else 0)
        end = find_tuple_end(text[tpos:])
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
        if kind == "unsupported":
            self._emit(self.r.refused, "unsupported", parsed)
            return
        self._emit(self.r.misses, "shapes", parsed, prefix)

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
        self._emit(self.r.dumps, "shapes", parsed, line[:start])

    def _parse_dump(self, message):
        m = DUMP.match(message)
        if not m:
            return None
        low = message.lower().replace(DUMP_FIXED_TEXT, "")
        if self.want and "a8w8_blockscale_bpreshuffle" in self.want and "a8w8_blockscale" not in self.want:
            variant = "a8w8_blockscale_bpreshuffle"
        elif "bpreshuffle" in low:
            variant = "a8w8_blockscale_bpreshuffle"
        else:
            variant = "a8w8_blockscale"
        shape = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
        return variant, shape, ({"dtype": m.group(4)} if m.group(4) else {})

    def _dispatch(self, line):
        m = DISPATCH.search(line)
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
