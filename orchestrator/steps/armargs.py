"""Node-side paths of a benchmark call that differ per arm, as placeholders in ``BenchCall.args``.

A benchmark that is the tuner itself (FHMoE's ``--baseline-only``, a tuner's ``--run_config``) is told which
table to read and where to write on its command line, not only through ``AITER_CONFIG_*``: ``plan_bench``
leaves placeholders there and each arm substitutes its own paths (prepare: before/after, engage: live).

Arms: ``before`` (the live configuration, before tuning), ``after`` (the staging table), ``live`` (the live
table after promotion: the engaged-at-runtime check). A call with a placeholder the arm has no path for is not
run in that arm (``arm_args`` answers None): the before arm's ``--run_config <live table>`` where there is no
live table.
"""

from __future__ import annotations

# FHMoE (steps/fhmoe_input.py): its -i (the arm's table) and -o (a scratch file)
FHMOE_TABLE, FHMOE_SCRATCH = "{fhmoe:table}", "{fhmoe:scratch}"
# --run_config (style "run_config"): the shapes CSV (-i), a scratch -o, the TUNED_CSV argument
RC_SHAPES, RC_SCRATCH, RC_TABLE = "{runconfig:shapes}", "{runconfig:scratch}", "{runconfig:table}"
# --run_config of a tuner with probed_flags: the fragments its --help listed (prepare's remote.bench_probed, the
# same the tune command got), e.g. the MXFP8 BMM tuner's --w_scale_block, which filters -i there too; zero or more
RC_PROBED = "{runconfig:probed}"
ARMS = ("before", "after", "live")


def paths(arm: str, remote) -> dict:
    """placeholder -> this arm's node path (None: the arm runs no call that needs it)."""
    bench = f"{remote.job_dir}/bench"
    return {
        # before = the tuner's -i (the live rows + incumbents where the live table has none)
        FHMOE_TABLE: {"before": remote.untuned_csv, "after": remote.tuned_csv, "live": remote.live_csv}[arm],
        FHMOE_SCRATCH: f"{bench}/fhmoe_{arm}.csv",
        RC_SHAPES: f"{bench}/runconfig_shapes.csv",
        RC_SCRATCH: f"{bench}/runconfig_{arm}.csv",
        # the arm's table: before the live one (when it exists: prepare backed it up), after the staging table
        RC_TABLE: {"before": remote.live_csv if getattr(remote, "tuned_backup", None) else None,
                   "after": remote.tuned_csv, "live": remote.live_csv}[arm],
    }


def arm_args(args, arm: str, remote) -> tuple[str, ...] | None:
    """``args`` with this arm's paths (arguments without placeholders unchanged), None: not run in this arm."""
    sub = paths(arm, remote)
    if any(a in sub and sub[a] is None for a in args):
        return None
    probed = tuple(getattr(remote, "bench_probed", None) or ())
    return tuple(x for a in args for x in (probed if a == RC_PROBED else (sub.get(a, a),)))


PLACEHOLDERS = frozenset({FHMOE_TABLE, FHMOE_SCRATCH, RC_SHAPES, RC_SCRATCH, RC_TABLE, RC_PROBED})
