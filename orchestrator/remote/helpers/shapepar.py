"""A big dense log mined in several processes (what one core cannot do at grep's speed).

The file is cut at newlines into byte ranges, one per process. Each range's candidate lines are counted
(the dense path's ``bytes.split`` + ``collections.Counter`` over the whole range, in first-seen order)
and its last lines kept: the first range here, the others by forked workers meanwhile. With one process
(one CPU, ``procs=1``, no fork) the ranges are ``min_range`` bytes and all counted here, one after the
other: a whole range per Counter is still faster than the plain scan's block by block. Each worker's count is then applied here in file order exactly as a dense block's is
(``_Scanner.take``): only when the parser is free to take it (no wrapped record open, no SGLang record
in the echo window) and every counted line is order-free; otherwise that range is scanned here line by
line. The workers only count; every judgement is made here, so the answer is the one-process answer.

Used for plain files of at least two ``MIN_RANGE_BYTES`` whose samples look dense (many
candidate lines, lines of ordinary length); sparse logs keep the one-process ``bytes.find`` scan, which
is already near grep's speed. Stdlib only, Python >= 3.8; Linux only (elsewhere everything stays here).
"""

import collections
import os
import pickle
import sys
import warnings

try:  # the laptop imports orchestrator.remote.helpers.*; the node, top-level modules beside node_helper.py
    from .shapefmt import ECHO_WINDOW, MAX_LINE_BYTES
    from .shapescan import DENSE_MIN_CANDIDATES, DENSE_PROBE_BYTES, _EFFECTS_MAX, _is_candidate_b
except ImportError:
    from shapefmt import ECHO_WINDOW, MAX_LINE_BYTES  # type: ignore
    from shapescan import DENSE_MIN_CANDIDATES, DENSE_PROBE_BYTES, _EFFECTS_MAX, _is_candidate_b  # type: ignore

MAX_PROCS = 8
MIN_RANGE_BYTES = 32 << 20
WORKER_BLOCK = 1 << 20
PRUNE_BYTES = 8 << 20     # read between two prunings: the lines that are not candidates take at most this
MAX_KEPT_BYTES = 16 << 20  # distinct candidate lines a worker keeps (and sends back); more: it refuses
PROBES = 8
MIN_PROBE_LINES = 64     # a probe with fewer newlines holds over-long lines: not a dense log


def cpus():
    try:
        return len(os.sched_getaffinity(0))     # the container's cpuset, not the host's cores
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def plan(size, procs=None, min_range=MIN_RANGE_BYTES):
    """(ranges, processes) for a file of ``size`` bytes: ranges of at least ``min_range`` bytes, one per
    process, or all counted here when only one process may run; (1, 1): stay with the plain scan."""
    most = size // max(1, min_range)
    if most < 2:
        return 1, 1
    n = min(cpus(), MAX_PROCS) if procs is None else max(1, procs)
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):   # macOS: fork is unsafe there
        n = 1
    n = min(n, most)
    return (n, n) if n > 1 else (most, 1)


def looks_dense(f, size):
    """Every probe, spread over the file, has many candidates and ordinary line lengths."""
    for i in range(PROBES):
        f.seek(max(0, size * i // PROBES))
        probe = f.read(DENSE_PROBE_BYTES)
        if probe.count(b"tuned") < DENSE_MIN_CANDIDATES or probe.count(b"\n") < MIN_PROBE_LINES:
            return False
    return True


def cuts(f, size, n):
    """n + 1 offsets: 0, the start of the line after each ``size * i / n``, size."""
    out = [0]
    for i in range(1, n):
        pos = max(size * i // n, out[-1])
        f.seek(pos)
        while True:
            block = f.read(1 << 16)
            if not block:
                pos = size
                break
            nl = block.find(b"\n")
            if nl >= 0:
                pos += nl + 1
                break
            pos += len(block)
        out.append(pos)
    out.append(size)
    return out


def count_range(path, start, end, scanner):
    """A worker's digest of ``path[start:end]`` (whole lines): candidate-line counts in first-seen order,
    the last lines holding ECHO_WINDOW records (fed one by one), the line count; None to refuse (an
    over-long line, too many distinct lines, a line that needs its neighbours, too few records)."""
    counts = collections.Counter()   # every line (C speed); pruned to the candidates now and then
    known = set()                    # the candidates among them, checked once each
    kept = 0                         # their bytes
    since_prune = 0
    lines_n = 0
    held = []            # the lines of the last two blocks, not counted yet: the tail comes from them
    carry = b""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            block = f.read(min(WORKER_BLOCK, left))
            if not block:
                return None                                  # the file shrank under us
            left -= len(block)
            lines = block.split(b"\n")
            if carry:
                lines[0] = carry + lines[0]
            carry = lines.pop()
            if len(carry) > MAX_LINE_BYTES:
                return None
            lines_n += len(lines)
            held.append(lines)
            if len(held) > 2:
                counts.update(held.pop(0))
                since_prune += len(block)
                if since_prune >= PRUNE_BYTES:
                    since_prune = 0
                    kept += _prune(counts, known)
                    if len(counts) > _EFFECTS_MAX or kept > MAX_KEPT_BYTES:
                        return None
    if carry:
        return None                                          # ranges end at a newline
    last = [line for lines in held for line in lines]
    i = len(last)
    records = 0
    while i > 0 and records < ECHO_WINDOW:
        i -= 1
        if _is_candidate_b(last[i]):
            eff = scanner._effect(last[i])
            if eff is None:
                return None
            records += eff[0]
    if records < ECHO_WINDOW:
        return None
    counts.update(last[:i])
    if _prune(counts, known) + kept > MAX_KEPT_BYTES or len(counts) > _EFFECTS_MAX:
        return None
    return {"counts": list(counts.items()), "tail": last[i:], "lines": lines_n, "bytes": end - start}


def _prune(counts, known):
    """Drop the lines that are not candidates (the order of the others stays: first seen); the bytes of
    the candidates found new."""
    added = 0
    for line in list(counts):
        if line not in known:
            if _is_candidate_b(line):
                known.add(line)
                added += len(line)
            else:
                del counts[line]
    return added


class _Worker(object):
    """A forked child counting one range; its digest comes back pickled through a pipe."""

    def __init__(self, path, start, end, scanner):
        self.start, self.end = start, end
        r, w = os.pipe()
        try:
            with warnings.catch_warnings():     # 3.12+ warns about fork with threads: the child uses none of theirs
                warnings.simplefilter("ignore", DeprecationWarning)
                self.pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
        if self.pid == 0:                                    # the child: count, answer, exit at once
            code = 0
            try:
                os.close(r)
                digest = count_range(path, start, end, scanner)
                with os.fdopen(w, "wb") as out:
                    pickle.dump(digest, out, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001 - the parent scans the range itself
                code = 1
            os._exit(code)
        os.close(w)
        self.fd = r

    def digest(self):
        """The digest, or None (refused, or the worker failed: the range is scanned here)."""
        try:
            with os.fdopen(self.fd, "rb") as f:
                self.fd = None
                return pickle.load(f)
        except Exception:  # noqa: BLE001 - an empty pipe (the child died) reads as EOFError
            return None
        finally:
            self.reap()

    def reap(self, kill=False):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid:
            if kill:
                try:
                    os.kill(self.pid, 9)
                except OSError:
                    pass
            try:
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = 0


def scan(scanner, f, path, size, chunk_bytes, procs=None, min_range=MIN_RANGE_BYTES):
    """Scan the open file ``f`` (at offset 0) range by range, the ranges counted ahead in other processes
    (or here); False (nothing read) when it is not worth it: a small or sparse file."""
    n, nprocs = plan(size, procs, min_range)
    if n < 2 or not looks_dense(f, size):
        f.seek(0)
        return False
    offsets = cuts(f, size, n)
    ranges = [(a, b) for a, b in zip(offsets, offsets[1:]) if b > a]
    workers = {}
    try:
        for start, end in ranges[1:nprocs]:
            try:
                workers[start] = _Worker(path, start, end, scanner)
            except OSError:            # no fork now (process or memory limits): counted here instead
                break
        scanner.ranges["processes"] = 1 + len(workers)
        for start, end in ranges:
            w = workers.get(start)
            digest = w.digest() if w is not None else count_range(path, start, end, scanner)
            if digest is not None and scanner.take(digest):
                scanner.ranges["counted"] += 1
            else:
                scanner.ranges["scanned"] += 1
                f.seek(start)
                scanner.file(f, chunk_bytes, limit=end - start)
    finally:
        for w in workers.values():
            w.reap(kill=True)
    return True
