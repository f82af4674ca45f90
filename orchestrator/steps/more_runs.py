"""The sequential design of issue 37: runs are added only for the shapes still undecided, up to a bound.

The node pipeline measures ``--repeats`` runs per arm, interleaved. With ``--max-repeats`` above that, the
compare step judges them with the bar of a sequential design (the union bound over shapes x looks,
``intervals.job_k``), and every shape that looks like it moves but is not decided yet
(``intervals.undecided``) gets ``--repeats`` more runs of both arms, interleaved before/after on the same
pinned GPU, the same private JIT dirs and tables as the pipeline's arms (the staging table is still there:
promotion comes later), all in one helper round trip per round; until no shape is undecided or each has
``--max-repeats`` runs. Each round's output is kept in the job directory (``more_runs_<n>.log``) and listed
in the compare step's info before it is used, so a resumed compare reads the rounds it already ran instead
of running them again.
"""

from __future__ import annotations

import math

from ..context import Ctx
from ..outcome.intervals import undecided
from ..outcome.keys import norm_key_value
from ..remote.shell import Cmd, quote
from ..state import atomic_write
from .armargs import arm_args
from .bench import announced, call_path, measured_by_call, plan_bench
from .prepare import SAMPLE_MARK


def design(job) -> tuple[int, int, int] | None:
    """(start, step, most) runs per arm, or None when the job runs a fixed number of runs."""
    start = int(job.request.repeats or 0)
    most = int(job.request.get("max_repeats") or 0)
    if start < 1 or most <= start or job.remote.get("moe_flydsl"):
        return None
    return start, start, most


def looks(seq: tuple[int, int, int] | None) -> int:
    """How many times a shape may be judged: the first look and one per added round."""
    if seq is None:
        return 1
    start, step, most = seq
    return 1 + math.ceil((most - start) / step)


def wanted(comp, key_columns: list[str], most: int) -> list[tuple]:
    """Keys of the shapes to measure again: undecided, with fewer than ``most`` runs in either arm."""
    out = []
    for r in comp.rows.to_dict("records"):
        v = {"verdict": r.get("verdict"), "gain_pct": _num(r.get("speedup_pct")),
             "threshold_pct": _num(r.get("threshold_pct"))}
        runs = min(int(r.get("before_n") or 0), int(r.get("after_n") or 0))
        if runs and runs < most and undecided(v):
            out.append(tuple(norm_key_value(r[c]) for c in key_columns))
    return out


def _num(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def round_request(ctx: Ctx, shapes: list[dict], first: int, step: int) -> tuple[dict, list]:
    """The helper ``run`` request of one round (before, after, before, ... ``step`` runs of each, numbered
    from ``first``) and the calls it makes."""
    remote = ctx.job.remote
    root, python = remote.aiter_root, ctx.target.container.python
    calls = plan_bench(ctx.variant, shapes)
    run_as = dict(remote.bench_run_as or {})
    env = remote.bench_env or {}

    def arm(name: str, n: int) -> str:
        cmds = [Cmd((python, run_as.get(c.script) or call_path(c, remote), *arm_args(c.args, name, remote)),
                    env=dict(env.get(name) or {}), cwd=root) for c in calls     # each arm's paths (armargs)
                if arm_args(c.args, name, remote) is not None]
        return f"echo {quote(f'{SAMPLE_MARK} {name} {n}')}; " + announced(cmds, "|| rc=$?")

    parts = [arm(name, first + i) for i in range(step) for name in ("before", "after")]
    return {"argv": ["sh", "-c", "rc=0; { " + "; ".join(parts) + "; } 2>&1; exit $rc"], "timeout_s": 3600}, calls


def extend(ctx: Ctx, judge, results: dict, errors: dict, err_spec, split_samples):
    """Judge, add a round for the undecided shapes, judge again ... -> the final comparison. ``judge()``
    compares ``results``/``errors`` as they stand; rounds already run (a resumed compare) are read back."""
    job, variant = ctx.job, ctx.variant
    seq = design(job)
    comp = judge()
    if seq is None:
        return comp
    start, step, most = seq
    cols = list(variant.key_columns)
    info = job.step_state("compare").info
    rounds = info.setdefault("more_runs", [])
    done = 0
    while True:
        if done < len(rounds):              # a round a crashed compare ran already: read, never run twice
            r = rounds[done]
            text = (ctx.job_dir / r["log"]).read_text(encoding="utf-8", errors="replace")
            shapes = [s for s in job.shapes if tuple(norm_key_value(s[c]) for c in cols) in
                      {tuple(norm_key_value(v) for v in k) for k in r["keys"]}]
            calls = plan_bench(variant, shapes)
        else:
            keys = set(wanted(comp, cols, most))
            shapes = [s for s in job.shapes if tuple(norm_key_value(s[c]) for c in cols) in keys]
            if not shapes:
                break
            first = start + done * step + 1
            req, calls = round_request(ctx, shapes, first, step)
            ctx.ui.event(f"{len(shapes)} shape(s) undecided after {first - 1} run(s) per arm: {step} more run(s) "
                         f"of both arms (up to --max-repeats {most})")
            answer = ctx.call("run", req, timeout=req["timeout_s"] + 100)
            text = (answer.get("stdout") or "") + ("\n" + answer["stderr"] if answer.get("stderr") else "")
            name = f"more_runs_{done + 1}.log"
            atomic_write(ctx.job_dir / name, text.encode())
            rounds.append({"log": name, "keys": [[s[c] for c in cols] for s in shapes], "runs": step})
            ctx.save()
        per_call = [c.shapes for c in calls]
        for side in ("before", "after"):
            for part in split_samples(text, side):
                results[side].extend(measured_by_call(variant.bench, shapes, part, per_call))
                errors[side].extend(measured_by_call(err_spec, shapes, part, per_call))
        done += 1
        comp = judge()
        if start + done * step >= most:
            break
    info["sequential"] = {"start": start, "step": step, "max": most, "looks": looks(seq), "rounds": done,
                          "runs_added": sum(len(r["keys"]) * r["runs"] for r in rounds[:done])}
    return comp
