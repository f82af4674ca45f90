"""The record-level parser: physical lines -> records (continuations, SGLang echoes, memoised messages)
-> the rules of shaperules.py. Stdlib only, Python >= 3.8."""

from __future__ import annotations

import collections

from .shapefmt import (
    ECHO_WINDOW, MAX_CONTINUATION_LINES, MAX_EXAMPLES, MAX_LINE_BYTES, MAX_RECORD_CHARS,
    CACHE_MAX, MISSING, MX_START, NEW_RECORD_MARKERS, NEW_RECORD_START, SGLANG_PREFIX_END, VLLM_PREFIX_START,
    find_tuple_end, is_candidate, shape_tuple_key, variant_from_tuned_file)
from .shaperules import ShapeLogResult, MessageRules
from .text import ANSI_RE, process_of

_CACHE_CHARS = 8 << 20    # the memo's keys (message texts) together: memory O(1) whatever the messages


# --------------------------------------------------------------------------------------------
# the record-level parser
# --------------------------------------------------------------------------------------------


class RecordParser(MessageRules):
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
        self._cache_chars = 0

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
        sg = prefix[:1] == "[" and "[aiter" not in prefix and bool(SGLANG_PREFIX_END.search(prefix))
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
        c = counts.get(message)   # again: the eviction above may have dropped this message's only entry
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
        if not is_candidate(line):
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
        s = RecordParser(self.want, self.keep_meta)
        s._once = set(self._once)
        s.feed(line)
        r = s.r
        if s._pending is not None or r.warnings or s._warn_counts or r.dispatch or len(s._recent) > 1:
            return None
        if s._recent and s._recent[0][1]:
            return None
        counts = tuple((name, v, n) for name in ("misses", "hits", "dumps", "notes", "refused")
                       for v, n in getattr(r, name).items())
        who = dict(((v, i), w) for v, i, w in r._worker_seen)
        adds = tuple((table, v, shape, who.get((v, i)) if table == "shapes" else None)
                     for table in ("shapes", "hit_shapes", "unsupported")
                     for v, shapes in getattr(r, table).items() for i, shape in enumerate(shapes))
        return (len(s._recent), counts, adds)

    def apply_effect(self, effect, times):
        """``times`` occurrences of a line whose ``effect_of`` is ``effect`` (the echo window aside)."""
        counts, adds = effect[1], effect[2]
        r = self.r
        for name, v, n in counts:
            counter = getattr(r, name)
            counter[v] = counter.get(v, 0) + n * times
        for add in adds:
            if add[2] is None:                   # (counts list, index, None, workers): a shape already added
                add[0][add[1]] += times
                if add[3] is not None:           # lines without a process: each one a process
                    add[3][add[1]] += times
            else:
                r._add(add[0], add[1], dict(add[2]), times=times, who=add[3])

    def count_slots(self, adds):
        """``adds`` of a line whose shapes are in the result now, as (counts list, index, None): counting
        another sighting is then one list increment (the dense path's hot loop)."""
        r, out = self.r, []
        for table, v, shape, who in adds:
            if table == "shapes":   # a line naming its process was counted for it already: lines only
                out.append((r.counts[v], r._seen[(table, v)][shape_tuple_key(shape)], None,
                            r.workers[v] if who is None else None))
        return tuple(out)

    @property
    def pending(self):
        return self._pending is not None

    def _continue(self, line):
        if "\x1b" in line:
            line = ANSI_RE.sub("", line)
        body = line.rstrip("\r\n")
        vp = VLLM_PREFIX_START.match(body)
        if vp and vp.group(0).strip() in self._pending[1]:
            body = body[vp.end():]       # vLLM prefixes every physical line of a message
        if NEW_RECORD_START.match(body) or any(m in body for m in NEW_RECORD_MARKERS):
            self.finish_pending_as_open()
            if is_candidate(line):
                self._record(line)
            return
        kind, prefix, text, n = self._pending
        text = text + " " + body.strip()
        n += 1
        end = find_tuple_end(text[text.index("("):]) if "(" in text else -1
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
            line = ANSI_RE.sub("", line)
        line = line.rstrip("\r\n")
        if "not found tuned config" in line:
            self._gemm_miss(line)
        elif "[fused_moe]" in line or "Fmoe tuning not support" in line:
            self._fused_moe(line)
        elif " shape M:" in line and MX_START.search(line):
            self._mx_lookup(MX_START.search(line).start(), line)
        elif "does not cover this" in line:
            self._fhmoe(line)
        elif "has no MXFP8 BMM tuned row" in line:
            self._bmm_mxscale(line)
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
        got = self._cache.get(message, MISSING)
        if got is MISSING:
            got = parse(message)
            if got is not None:
                got = got + (shape_tuple_key(got[1]),)
            if len(self._cache) >= CACHE_MAX or self._cache_chars + len(message) > _CACHE_CHARS:
                self._cache.clear()
                self._cache_chars = 0
            self._cache[message] = got
            self._cache_chars += len(message)
        return got

    def _emit(self, counter, table, parsed, prefix=None):
        variant, shape, meta, key = parsed
        if self.want is not None and variant not in self.want:
            return
        ShapeLogResult._inc(counter, variant)
        if self.keep_meta and meta:
            shape = dict(shape)
            shape["_meta"] = dict(meta)
        else:
            shape = dict(shape)
        self.r._add(table, variant, shape, key, who=process_of(prefix))


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def parse_stream(lines, variant=None, keep_meta=False):
    """Parse an iterable of lines (str, or bytes decoded as utf-8 with errors="replace").

    ``variant``: None (all), a variant name, or an iterable of names to keep. ``bytes`` counts the
    utf-8 size of the lines seen.
    """
    p = RecordParser(variant, keep_meta)
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
        if p._pending is not None or is_candidate(line):
            if len(line) > MAX_LINE_BYTES:
                p.skip_long_line(line[:300], is_candidate(line))
            else:
                p.feed(line)
    r.lines += nlines
    r.bytes += nbytes
    return p.finish()
