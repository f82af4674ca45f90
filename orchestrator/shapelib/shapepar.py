"""``parse_files``, and a big dense log mined in several processes (what one core cannot do at grep's speed).

The file is cut at newlines into byte ranges, one per process. Each range's candidate lines are counted
(the dense path's ``bytes.split`` + ``collections.Counter`` over the whole range, in first-seen order)
and its last lines kept: the first range here, the others by forked workers meanwhile, all reading the
file this process opened (``os.pread``: a log rotated meanwhile is read as it was opened). With one
process (one CPU, ``procs=1``, no fork) the ranges are ``min_range`` bytes, all counted here one after
the other: a whole range per Counter is still faster than the plain scan's block by block.

Each count is then applied here in file order exactly as a dense block's is (``LineScanner.take``): only
when the parser is free to take it (no wrapped record open, no SGLang record in the echo window) and
every counted line is order-free; otherwise that range is scanned here line by line. The workers only
count; every judgement is made here, so the answer is the one-process answer. A worker keeps only the
file and its pipe open; whatever interrupts the reading of its answer (the helper's deadline) kills it.

Used for plain files of at least two ``MIN_RANGE_BYTES`` whose samples look dense (many candidate
lines, lines of ordinary length); sparse logs keep the one-process ``bytes.find`` scan, which is already
near grep's speed. Stdlib only, Python >= 3.8; Linux only (elsewhere everything stays here).
"""

import collections
import os
import pickle
import signal
import sys
import warnings

from .shapecsv import expand_dirs, looks_like_capture, parse_capture
from .shapefmt import CHUNK_BYTES, MAX_LINE_BYTES
from .shaperecords import RecordParser
from .shapescan import (DENSE_MIN_CANDIDATES, DENSE_PROBE_BYTES, EFFECTS_MAX, is_candidate_b, open_log_binary,
                        LineScanner)

MAX_PROCS = 8
MIN_RANGE_BYTES = 32 << 20
WORKER_BLOCK = 1 << 20
PRUNE_BYTES = 8 << 20     # read between two prunings: the lines that are not candidates take at most this
MAX_KEPT_BYTES = 16 << 20  # distinct candidate lines a worker keeps (and sends back); more: it refuses
PROBES = 8
MAX_RANGES = 1024
MIN_PROBE_LINES = 64     # a probe with fewer newlines holds over-long lines: not a dense log


def cpus():
    try:
        return len(os.sched_getaffinity(0))     # the container's cpuset, not the host's cores
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def plan(size, procs=None, min_range=None):
    """(ranges, processes) for a file of ``size`` bytes: ranges of at least ``min_range`` bytes (None:
    MIN_RANGE_BYTES), one per process, or all counted here when only one process may run; (1, 1): stay with
    the plain scan."""
    most = min(size // max(1, MIN_RANGE_BYTES if min_range is None else min_range), MAX_RANGES)
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
    """n + 1 offsets: 0, the start of the line after each ``size * i / n``, and the end of the file's last
    whole line (a log being written ends mid-line: that part is scanned here, as the end of a file is)."""
    end = size
    f.seek(max(0, size - (1 << 20)))
    last = f.read()
    nl = last.rfind(b"\n")
    if nl >= 0:
        end = size - len(last) + nl + 1
    out = [0]
    for i in range(1, n):
        pos = min(max(end * i // n, out[-1]), end)
        f.seek(pos)
        while pos < end:
            block = f.read(min(1 << 16, end - pos))
            if not block:
                pos = end
                break
            nl = block.find(b"\n")
            if nl >= 0:
                pos += nl + 1
                break
            pos += len(block)
        out.append(pos)
    out.append(end)
    return out


def count_range(fd, start, end, scanner):
    """A worker's digest of bytes ``start:end`` (whole lines) of the open file ``fd`` (read with pread: the
    file the parent opened, even if the log was rotated since): candidate-line counts in first-seen order,
    the last lines holding ECHO_WINDOW records (fed one by one), the line count; None to refuse (an
    over-long line, too many distinct lines, a line that needs its neighbours, too few records)."""
    counts = collections.Counter()   # every line (C speed); pruned to the candidates now and then
    known = set()                    # the candidates among them, checked once each
    kept = 0                         # their bytes
    since_prune = 0
    lines_n = 0
    held = []            # the lines of the last two blocks, not counted yet: the tail comes from them
    carry = b""
    pos = start
    while pos < end:
        block = os.pread(fd, min(WORKER_BLOCK, end - pos), pos)
        if not block:
            return None                                      # the file shrank under us
        pos += len(block)
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
                if len(counts) > EFFECTS_MAX or kept > MAX_KEPT_BYTES:
                    return None
    if carry:
        return None                                          # ranges end at a newline
    last = [line for lines in held for line in lines]
    i = scanner.tail_start(last)
    if i is None:
        return None
    counts.update(last[:i])
    if _prune(counts, known) + kept > MAX_KEPT_BYTES or len(counts) > EFFECTS_MAX:
        return None
    return {"counts": list(counts.items()), "tail": last[i:], "lines": lines_n, "bytes": end - start}


def _prune(counts, known):
    """Drop the lines that are not candidates (the order of the others stays: first seen); the bytes of
    the candidates found new."""
    added = 0
    for line in list(counts):
        if line not in known:
            if is_candidate_b(line):
                known.add(line)
                added += len(line)
            else:
                del counts[line]
    return added


class _Worker(object):
    """A forked child counting one range; its digest comes back pickled through a pipe. Created unstarted,
    so that whoever holds it can always reap it (``fork`` forks with SIGINT/SIGALRM blocked)."""

    def __init__(self, start, end):
        self.start, self.end = start, end
        self.pid = 0
        self.fd = None

    def fork(self, fd, scanner):
        """Fork the child (it keeps only ``fd`` and its pipe's write end: a worker whose reader gave up sees
        EPIPE instead of blocking on a pipe a sibling holds open)."""
        r, w = os.pipe()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGALRM))
        try:
            with warnings.catch_warnings():     # 3.12+ warns about fork with threads: the child uses none of theirs
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                _child(fd, w, self.start, self.end, scanner, keep=(fd, w))     # never returns
            self.pid, self.fd = pid, r
            os.close(w)
        except OSError:
            os.close(r)
            os.close(w)
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)   # a deadline that came meanwhile fires now

    def digest(self):
        """The digest, or None (refused, or the worker failed: the range is scanned here). Whatever stops
        the reading (a deadline, an interrupt) kills the worker."""
        fd, self.fd = self.fd, None
        try:
            with os.fdopen(fd, "rb") as f:
                got = pickle.load(f)
        except Exception:  # noqa: BLE001 - an empty pipe (the child died) reads as EOFError
            self.reap(kill=True)
            return None
        except BaseException:
            self.reap(kill=True)
            raise
        self.reap()
        return got

    def reap(self, kill=False):
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)
        if self.pid:
            if kill:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = 0


def _child(fd, w, start, end, scanner, keep):
    """The worker's whole life: only ``keep`` stays open (stdio on /dev/null: a helper killed meanwhile
    does not see its channel held open by workers), signals as by default, count, answer, exit."""
    code = 0
    try:
        for sig in (signal.SIGINT, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        for name in os.listdir("/proc/self/fd"):
            n = int(name)
            if n > 2 and n not in keep:
                try:
                    os.close(n)
                except OSError:
                    pass
        digest = count_range(fd, start, end, scanner)
        with os.fdopen(w, "wb") as out:
            pickle.dump(digest, out, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - the parent scans the range itself
        code = 1
    os._exit(code)


def scan(scanner, f, size, chunk_bytes, procs=None, min_range=None):
    """Scan the open file ``f`` (at offset 0) range by range, the ranges counted ahead in other processes
    (or here); False (nothing read) when it is not worth it: a small or sparse file."""
    n, nprocs = plan(size, procs, min_range)
    if n < 2 or not looks_dense(f, size):
        f.seek(0)
        return False
    offsets = cuts(f, size, n)
    ranges = [(a, b) for a, b in zip(offsets, offsets[1:]) if b > a]
    fd = f.fileno()
    ranges_of = scanner.p.r.ranges    # what parse_files answers (.ranges)
    workers = {}
    try:
        for start, end in ranges[1:nprocs]:
            w = workers[start] = _Worker(start, end)
            try:
                w.fork(fd, scanner)
            except OSError:            # no fork now (process or memory limits): counted here instead
                del workers[start]
                break
        ranges_of["processes"] = max(ranges_of["processes"], 1 + len(workers))   # over the files: the most
        for start, end in ranges:
            w = workers.get(start)
            digest = w.digest() if w is not None else count_range(fd, start, end, scanner)
            if digest is not None and scanner.take(digest):
                ranges_of["counted"] += 1
            else:
                ranges_of["scanned"] += 1
                f.seek(start)
                scanner.file(f, chunk_bytes, limit=end - start)
        if offsets[-1] < size:         # the last line has no newline yet: scanned as a file's end is
            f.seek(offsets[-1])
            scanner.file(f, chunk_bytes, limit=size - offsets[-1])
    finally:
        for w in workers.values():
            w.reap(kill=True)
    return True


def parse_files(paths, variant=None, keep_meta=False, skip_missing=False, chunk_bytes=CHUNK_BYTES, procs=None,
                min_range=None):
    """Parse log files (plain or .gz) in binary chunks; memory stays bounded (lines over 1 MiB skipped).

    Missing files raise FileNotFoundError unless ``skip_missing`` (then listed in ``.missing``). A big
    dense plain file is cut into ranges of at least ``min_range`` bytes counted ahead, spread over up to
    ``procs`` processes (default: the CPUs this process may use, at most MAX_PROCS; 1 = this
    process only); ``.ranges`` says how it went. A directory stands for its files; a capture CSV of AITER's
    (``*_untuned_*.csv`` with a CSV header, shapecsv.py) gives its rows, weighted by the processes that missed.
    """
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    paths = expand_dirs([os.fspath(p) if hasattr(p, "__fspath__") else p for p in paths])
    p = RecordParser(variant, keep_meta)
    r = p.r
    scanner = LineScanner(p)
    for path in paths:
        path = os.fspath(path)
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        try:
            f = open_log_binary(path)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            if not skip_missing:
                raise
            r.missing.append(path)
            continue
        r.files.append(path)
        with f:
            if not path.endswith(".gz") and looks_like_capture(path, f.readline()):
                f.seek(0)
                parse_capture(f, path, p)
                p.reset_file()
                continue
            f.seek(0)
            if path.endswith(".gz") or not scan(scanner, f, os.fstat(f.fileno()).st_size, chunk_bytes, procs,
                                                min_range):
                scanner.file(f, chunk_bytes)
        p.reset_file()
    return p.finish()
