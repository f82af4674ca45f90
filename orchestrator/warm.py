"""Load what the steps after the pipeline need (pandas, jinja2, compare, report and its compiled templates:
~0.6 s of CPU) in a thread, once per process, while the job waits on its node.

Started by the remote step once the pipeline is launched (steps/remote.py): that wait is the longest of a job,
and the work before it (connect, discover, prepare, launch) is the job's critical path, which a thread holding
the GIL for pandas' import would slow on a small machine. Safe in a thread: the package has no import circle
(test_layers), so two threads importing never wait on each other's module locks in a cycle."""

from __future__ import annotations

import importlib
import threading

WARM_UP_MODULES = ("pandas", "jinja2", f"{__package__}.steps.compare", f"{__package__}.steps.report")

_started = threading.Event()


def warm_up() -> None:
    """Start loading them (once per process; later calls return at once)."""
    if _started.is_set():
        return
    _started.set()

    def load() -> None:
        try:
            for name in WARM_UP_MODULES:
                importlib.import_module(name)
            from .report import warm_templates
            warm_templates()
        except Exception:   # the step that needs it reports a missing library or template, not this thread
            return
    threading.Thread(target=load, name="tune-remote-warm-up", daemon=True).start()
