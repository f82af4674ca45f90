"""Node-side paths of a benchmark call that differ per arm, as placeholders in ``BenchCall.args``.

A benchmark that is the tuner itself (FHMoE's ``--baseline-only``, a tuner's ``--run_config``) is told which
table to read and where to write on its command line, not only through ``AITER_CONFIG_*``: ``plan_bench``
leaves placeholders there and each arm substitutes its own paths (prepare: before/after, engage: live).

Arms: ``before`` (the live configuration, before tuning), ``after`` (the staging table), ``live`` (the live
table after promotion: the engaged-at-runtime check). A placeholder an arm has no path for is dropped from
the argument list (``--run_config`` without a CSV in the before arm).
"""

from __future__ import annotations

# FHMoE (steps/fhmoe_input.py): its -i (the arm's table) and -o (a scratch file)
FHMOE_TABLE, FHMOE_SCRATCH = "{fhmoe:table}", "{fhmoe:scratch}"
# --run_config (style "run_config"): the shapes CSV (-i), a scratch -o, the TUNED_CSV argument
RC_SHAPES, RC_SCRATCH, RC_TABLE = "{runconfig:shapes}", "{runconfig:scratch}", "{runconfig:table}"
ARMS = ("before", "after", "live")


def paths(arm: str, remote) -> dict:
    """placeholder -> this arm's node path (None: drop the argument)."""
    bench = f"{remote.job_dir}/bench"
    return {
        # before = the tuner's -i (the live rows + incumbents where the live table has none)
        FHMOE_TABLE: {"before": remote.untuned_csv, "after": remote.tuned_csv, "live": remote.live_csv}[arm],
        FHMOE_SCRATCH: f"{bench}/fhmoe_{arm}.csv",
        RC_SHAPES: f"{bench}/runconfig_shapes.csv",
        RC_SCRATCH: f"{bench}/runconfig_{arm}.csv",
        # before: no CSV (the tuner times its default kernel); after: the staging table; live: the live table
        RC_TABLE: {"before": None, "after": remote.tuned_csv, "live": remote.live_csv}[arm],
    }


def arm_args(args, arm: str, remote) -> tuple[str, ...]:
    """``args`` with this arm's paths; arguments without placeholders come back unchanged."""
    sub = paths(arm, remote)
    return tuple(sub.get(a, a) for a in args if not (a in sub and sub[a] is None))


PLACEHOLDERS = frozenset({FHMOE_TABLE, FHMOE_SCRATCH, RC_SHAPES, RC_SCRATCH, RC_TABLE})
