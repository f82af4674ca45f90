"""Scanning: bytes -> the candidate lines the parser sees (what grep does, then parse those).
Stdlib only, Python >= 3.8."""

from __future__ import annotations

import collections
import gzip

from .shapefmt import ECHO_WINDOW, MAX_LINE_BYTES, NEEDLES_B


def open_log_binary(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


# --------------------------------------------------------------------------------------------
# scanning: bytes -> the candidate lines the rules above see (what grep does, then parse those)
# --------------------------------------------------------------------------------------------

DENSE_PROBE_BYTES = 256 << 10
DENSE_MIN_CANDIDATES = 16  # "tuned" this often in a block's first 256 KiB: count identical lines instead
EFFECTS_MAX = 65536
_EFFECTS_BYTES = 8 << 20    # the memo's keys (whole lines) together: memory stays O(1) whatever the lines


def is_candidate_b(line):
    return (b"tuned" in line or b"fused_moe" in line or b"GEMM_shape_dump" in line
            or b"Fp8LinearMethod" in line or b"tuning not support" in line or b"does not cover this" in line
            or b" shape M:" in line)  # the MX lookups' (shapefmt.MX_START) hit line names no "tuned" itself


class LineScanner(object):
    """Feeds a parser from binary blocks and counts the lines; memory is bounded by the block size.

    Sparse blocks: ``bytes.find`` of the needles; only those lines are decoded and fed (the cost
    grows with the number of candidates, not with the size). Dense blocks (a serving log repeats the
    same few miss lines millions of times): ``bytes.split`` + ``collections.Counter`` (C speed), then
    each distinct candidate line is applied once with its count, in first-seen order. That is exact
    because only order-free lines go that way (``RecordParser.effect_of``; anything else sends the block to
    the sparse path), and the last ``ECHO_WINDOW`` records are fed one by one so that the SGLang echo
    window ends as ``feed`` would leave it.
    """

    def __init__(self, parser):
        self.p = parser
        self.effects = {}   # line bytes -> effect (only order-free lines are remembered)
        self._effect_bytes = 0

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
                if len(self.effects) >= EFFECTS_MAX or self._effect_bytes + len(line) > _EFFECTS_BYTES:
                    self.effects.clear()
                    self._effect_bytes = 0
                self.effects[line] = eff
                self._effect_bytes += len(line)
        return eff

    def count_lines(self, lines):
        """Apply whole lines by their counts; False (nothing applied) when some line needs its neighbours."""
        i = self.tail_start(lines)
        return i is not None and self.apply_counts(collections.Counter(lines[:i]).items(), lines[i:])

    def tail_start(self, lines):
        """Where the last lines holding ECHO_WINDOW records begin (they are fed one by one after a count,
        leaving the echo window as feeding every line would); None when one of them needs its neighbours
        or there are fewer records."""
        i = len(lines)
        records = 0
        while i > 0 and records < ECHO_WINDOW:
            i -= 1
            if is_candidate_b(lines[i]):
                eff = self._effect(lines[i])
                if eff is None:
                    return None
                records += eff[0]
        return i if records >= ECHO_WINDOW else None

    def apply_counts(self, counts, tail):
        """``counts`` ((line, times) in first-seen order) then the ``tail`` lines one by one, as feeding
        every line in order would; False (nothing applied) when a counted line is not order-free. The
        caller has checked that ``tail`` holds the last ECHO_WINDOW records (the window feed leaves)."""
        p = self.p
        counted = []
        effects = self.effects
        for line, count in counts:
            eff = effects.get(line)
            if eff is None:
                if not is_candidate_b(line):
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
        for line in tail:
            if is_candidate_b(line):
                p.feed(line.decode("utf-8", "replace"))
        return True

    def take(self, digest):
        """A range counted elsewhere (shapepar): applied like a dense block when the parser is free to take
        it; False (nothing applied) otherwise. Only the counting is trusted, every judgement is made here."""
        p = self.p
        if p._pending is not None or any(sg for _msg, sg in p._recent):
            return False
        if self.tail_start(digest["tail"]) is None or not self.apply_counts(digest["counts"], digest["tail"]):
            return False
        p.r.lines += digest["lines"]
        p.r.bytes += digest["bytes"]
        return True

    def feed_range(self, data, s, e):
        p = self.p
        if e - s > MAX_LINE_BYTES:
            p.skip_long_line(data[s:s + 300].decode("utf-8", "replace"), is_candidate_b(data[s:e]))
        else:
            p.feed(data[s:e].decode("utf-8", "replace"))

    def sparse(self, data, n):
        """Feed the candidate lines of ``data[:n]`` (whole lines only) to the parser."""
        cursor = self._continuations(data, 0, n)   # a wrapped MoE tuple from the previous chunk
        starts = set()
        for needle in NEEDLES_B:
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
            cursor = self._continuations(data, e + 1, n)

    def _continuations(self, data, cursor, n):
        """Feed the lines from ``cursor`` while a record is pending (a tuple wrapped over lines); the next cursor."""
        while self.p._pending is not None and cursor <= n:      # data[n] is a newline: [n, n) is a line
            e = data.find(b"\n", cursor, n)
            if e < 0:
                e = n
            self.feed_range(data, cursor, e)
            cursor = e + 1
        return cursor

    def file(self, f, chunk_bytes, limit=None):
        """A whole file (or its next ``limit`` bytes) in ``chunk_bytes`` reads. A line that outgrows
        MAX_LINE_BYTES before its newline is dropped (not kept in memory) up to that newline, as a complete
        over-long line would be."""
        p, r = self.p, self.p.r
        tail = b""
        long_line = None    # while dropping an over-long line: [example, is a candidate, last bytes]
        while True:
            if limit is None:
                block = f.read(chunk_bytes)
            else:
                block = f.read(min(chunk_bytes, limit))
                limit -= len(block)
            if not block:
                break
            r.bytes += len(block)
            if long_line is not None:
                nl = block.find(b"\n")
                part = block if nl < 0 else block[:nl]
                long_line[1] = long_line[1] or is_candidate_b(long_line[2] + part)
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
                long_line = [tail[:300].decode("utf-8", "replace"), is_candidate_b(tail), tail[-16:]]
                tail = b""
        if long_line is not None:
            r.lines += 1
            p.skip_long_line(long_line[0], long_line[1])
        elif tail:
            r.lines += 1
            self.sparse(tail + b"\n", len(tail))

