"""``TUNE_REMOTE_TRACE=1``: one stderr line per round trip to a container (helper request or exec), with its
wall time, so that a slow link's cost can be read off a real run. Op names and the command's first words
only: no request body, no environment (nothing secret reaches the trace)."""

from __future__ import annotations

import contextlib
import os
import sys
import time

ON = os.environ.get("TUNE_REMOTE_TRACE", "") not in ("", "0")
_T0 = time.monotonic()


@contextlib.contextmanager
def span(label: str, what: str):
    if not ON:
        yield
        return
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"tune-remote trace: t+{start - _T0:7.3f} s {(time.monotonic() - start) * 1000:8.1f} ms  "
              f"{label}: {what}",
              file=sys.stderr, flush=True)


def argv_head(argv, words: int = 3) -> str:
    """The first words of a command, each cut to 40 characters."""
    return " ".join(a if len(a) <= 40 else a[:37] + "..." for a in list(argv)[:words])
