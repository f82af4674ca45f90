"""Generate shapelib/variant_facts.py and sim/variant_table.py from orchestrator/variants.py.

The node helper is stdlib-only and cannot import ``orchestrator.variants``; what it needs of the registry
(the fused-MoE key, the tuned-file stems that name a variant in AITER's log lines) is written into a small
module of literals, committed and pushed with the helper (review D-11). The simulated node is stdlib-only too:
its perf model, tuned-table lookups and generic tuner / op_test read each variant's facts (``sim_facts``) from
``sim/variant_table.py``. ``tests/unit/test_variant_facts.py`` regenerates both in memory and fails when a
committed file differs. After changing ``VARIANTS``, ``MOE_KEY`` or ``LOGGED_ONLY_TUNED_CSV``, run::

    python -m orchestrator.gen_variant_facts
"""

from __future__ import annotations

import json
import posixpath
import pprint
import sys
from pathlib import Path

from .variants import LOGGED_ONLY_TUNED_CSV, MOE_KEY, VARIANTS, KernelVariant

COMMAND = "python -m orchestrator.gen_variant_facts"
TARGET = Path(__file__).resolve().parent / "shapelib" / "variant_facts.py"
SIM_TARGET = Path(__file__).resolve().parent / "sim" / "variant_table.py"


def _stem(tuned_csv: str) -> str:
    base = posixpath.basename(tuned_csv)
    return base[:-4] if base.endswith(".csv") else base


def file_stems() -> list[tuple[str, str]]:
    """(tuned-file stem, variant) for the GEMM families (their log lines name the tuned file) and the
    logged-only GEMMs, longest stem first: the first stem found in a file name wins, so a stem that contains
    another is tried before it (stems of equal length keep the registry's order)."""
    pairs, tables = [], set()
    for v in VARIANTS.values():
        if v.family == "moe" or v.tuned_csv in tables:
            continue     # a tuner writing another variant's table (a4w4 bpreshuffle): its lines are that one's
        tables.add(v.tuned_csv)
        pairs.append((_stem(v.tuned_csv), v.name))
    pairs += [(_stem(csv), name) for name, csv in LOGGED_ONLY_TUNED_CSV.items()]
    stems = [s for s, _ in pairs]
    dup = sorted({s for s in stems if stems.count(s) > 1})
    if dup:
        raise ValueError("two variants share the tuned-file stem(s) %s" % ", ".join(dup))
    return sorted(pairs, key=lambda p: -len(p[0]))


def moe_variant() -> str:
    names = [v.name for v in VARIANTS.values() if v.family == "moe"]
    if len(names) != 1:
        raise ValueError("the helper knows one fused-MoE variant; the registry has %r" % names)
    return names[0]


def render() -> str:
    """The text of variant_facts.py (deterministic: the test compares it byte for byte)."""
    q = json.dumps
    out = [
        '"""Variant facts for the node helper. GENERATED from orchestrator/variants.py: do not edit.',
        "",
        "Change variants.py, then run `%s`" % COMMAND,
        "(tests/unit/test_variant_facts.py fails while this file differs from what it writes).",
        "Stdlib only, Python >= 3.8 (pushed to the node with the helper).",
        '"""',
        "",
        "# the fused-MoE variant and the key of its tuned CSV (variants.MOE_KEY)",
        "MOE_VARIANT = %s" % q(moe_variant()),
        "MOE_KEY = (",
        *("    %s," % q(c) for c in MOE_KEY),
        ")",
        "",
        "# tuned-file stem -> variant, longest first: the first stem found in a file name wins",
        "# (from each GEMM variant's tuned_csv and variants.LOGGED_ONLY_TUNED_CSV)",
        "FILE_STEMS = (",
        *("    (%s, %s)," % (q(s), q(v)) for s, v in file_stems()),
        ")",
        "",
    ]
    return "\n".join(out)


def sim_facts(v: KernelVariant) -> dict:
    """What the simulated node knows of one variant (the entry as the newest AITER has it): its tuner's
    paths and key, the backends its rows name, its benchmark's arguments and output. JSON-safe."""
    b = v.bench
    return {
        "family": v.family, "since": list(v.since) if v.since else None,
        "requires_gfx": sorted(v.requires_gfx) if v.requires_gfx else None,
        "tune_script": v.tune_script, "tune_flags": list(v.tune_flags), "untuned_csv": v.untuned_csv,
        "tuned_csv": v.tuned_csv, "config_env": v.config_env, "untuned_columns": list(v.untuned_columns),
        "libtypes": list(v.libtypes), "splitk": v.splitk, "jit_module": v.jit_module,
        "bench": None if b is None else {
            "script": b.script, "style": b.style, "output": b.output, "metric": b.metric,
            "key_columns": dict(b.key_columns), "extra_args": list(b.extra_args),
            "row_filter": dict(b.row_filter)},
    }


def render_sim() -> str:
    """The text of sim/variant_table.py (deterministic)."""
    out = [
        '"""Variant facts for the simulated node. GENERATED from orchestrator/variants.py: do not edit.',
        "",
        "Change variants.py, then run `%s`" % COMMAND,
        "(tests/unit/test_variant_facts.py fails while this file differs from what it writes).",
        "Stdlib only, Python >= 3.8 (copied into the node beside perf_model.py). Each entry: sim_facts().",
        '"""',
        "",
        "VARIANTS = %s" % pprint.pformat({n: sim_facts(v) for n, v in VARIANTS.items()}, width=104,
                                         sort_dicts=False),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    for target, text in ((TARGET, render()), (SIM_TARGET, render_sim())):
        if target.exists() and target.read_text(encoding="utf-8") == text:
            print(f"{target} is up to date")
            continue
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
