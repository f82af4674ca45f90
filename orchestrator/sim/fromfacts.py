"""Serve a variant the simulated tree has no file of its own for: from its registry facts alone.

``serve_variant(inst, name, facts)`` writes into an installed node (host side) what AITER would ship for it:
the tune script at the entry's ``tune_script`` and the op_test at its benchmark's ``script`` (two lines each,
calling aiter/_sim/generic.py), its untuned and tuned CSVs (headers only), and its facts into
``aiter/_sim/variants_extra.json``, which the node's perf model and config lookup read. ``install`` serves so
every registry variant whose tuner the tree lacks; a test serves a variant it registers itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .perf_model import EXTRA_FILE

RESULTS = ("kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio")   # as base_tuner writes them
_STUB = ("# SPDX-License-Identifier: MIT\n"
         "# Simulated AITER %s of %s, served from its registry facts (orchestrator/sim/fromfacts.py)\n"
         "from aiter._sim.generic import %s\n\n"
         "if __name__ == \"__main__\":\n"
         "    %s(%r)\n")


def _version(text: str) -> tuple:
    return tuple(int(p) for p in text.split(".")[:3])


def shipped(facts: dict, version: str) -> bool:
    """The node's AITER release has this tuner (the entry's ``since``)."""
    return not facts.get("since") or tuple(facts["since"]) <= _version(version)


def unshipped_dirs(table: dict, version: str) -> tuple:
    """Tuner directories no variant this release ships has its tuner in (a directory a shipped variant's
    tuner shares, as csrc/ck_gemm_a4w4_blockscale holds the CK and the FlyDSL bpreshuffle tuner, stays:
    the later tuner is left out by ``serve_missing``, which serves only what the release ships)."""
    dirs = lambda shipped_: {os.path.dirname(f["tune_script"]) for f in table.values()  # noqa: E731
                             if shipped(f, version) == shipped_}
    return tuple(sorted(dirs(False) - dirs(True)))


def _write(path: str, text: str, mode: int = 0o644) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    os.chmod(path, mode)


def serve_variant(inst, name: str, facts: dict) -> None:
    """Lay the generic tuner, op_test, tables and facts of one variant into the installed node ``inst``."""
    legacy = inst.spec.profile == "legacy"
    host = inst.host_path
    tuner = _STUB % ("tuner", name, "tune_main", "tune_main", name)
    _write(host(inst.script(facts["tune_script"])), tuner, 0o755)
    bench = facts.get("bench")
    op_path = host(inst.script(bench["script"])) if bench else None
    # an installed wheel ships no op_tests; one the tree has (another variant's, as test_gemm_a4w4.py for the
    # a4w4 bpreshuffle tuner) stays the release's own
    if op_path and inst.spec.install_mode == "develop" and not os.path.exists(op_path):
        _write(op_path, _STUB % ("op_test", name, "bench_main", "bench_main", name))
    header = (["cu_num"] if legacy else ["gfx", "cu_num"]) + list(facts["untuned_columns"]) + \
        (["libtype"] if facts["libtypes"] else []) + list(RESULTS)
    for rel, cols in ((facts["untuned_csv"], facts["untuned_columns"]), (facts["tuned_csv"], header)):
        path = host(f"{inst.aiter_root}/{rel}")
        if not os.path.exists(path):
            _write(path, ",".join(cols) + "\n")
    extra_path = Path(host(inst.package_dir)) / "_sim" / EXTRA_FILE
    extra = json.loads(extra_path.read_text()) if extra_path.exists() else {}
    extra[name] = facts
    extra_path.write_text(json.dumps(extra, indent=1, sort_keys=True) + "\n")


def serve_missing(inst, table: dict) -> list[str]:
    """Serve every variant of ``table`` this release ships whose tune script the tree has no file for."""
    served = []
    for name, facts in table.items():
        script = facts["tune_script"]
        if "{" in script or not shipped(facts, inst.version):
            continue
        if os.path.exists(inst.host_path(inst.script(script))):
            continue
        serve_variant(inst, name, facts)
        served.append(name)
    return served
