"""The shapes step: the shapes from their sources (shape_sources.py), those already in model_configs dropped,
the budget's plan, confirm, the list for the node's -i CSV."""

from __future__ import annotations

from pathlib import Path

from . import riders
from ..context import Ctx
from ..errors import JobError
from ..outcome import budget
from ..outcome.keys import norm_key_value
from ..state import Status
from ..variants import KernelVariant, get_variant
from .shape_sources import collect


PLAN_HOOKS: list = []   # f(ctx, shapes, described) -> the shapes to tune: --reuse proven (store/plan.py)


def _model_config_keys(variant: KernelVariant, root: str, cu_num, gfx) -> dict:
    return {"patterns": [f"{root}/aiter/configs/model_configs/*{Path(variant.tuned_csv).stem}*.csv"],
            "key_columns": list(variant.key_columns), "cu_num": cu_num, "gfx": gfx}


def model_config_keys_template(ctx: Ctx) -> dict:
    """drop_tuned_in_model_configs' request as a discover rider (steps/riders.py)."""
    return _model_config_keys(get_variant(ctx.job.variant), "{root}", "{cu_num}", "{gfx}")


def _write_full_list(ctx: Ctx, variant: KernelVariant, shapes: list[dict]) -> str | None:
    """The shapes to tune in the job's directory (untuned/, where fetch puts the node's copy later): the
    terminal shows a summary and says where the whole list is."""
    from ..parsing.untuned import write_untuned_csv
    from ..state import atomic_write
    path = ctx.job_dir / "untuned" / Path(variant.untuned_csv).name
    try:
        text = write_untuned_csv(shapes, variant.name)
    except ValueError:
        return None           # prepare says what is missing
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode())
    return str(path)


def drop_tuned_in_model_configs(ctx: Ctx, shapes: list[dict]) -> list[dict]:
    """Shapes that already have a row (for this GPU) in aiter/configs/model_configs/*<tuned name>*.csv.

    With the AITER_CONFIG_* variable unset, AITER merges those files with the default tuned CSV, and
    from v0.1.12 on a key present in two of them makes the merge raise (and rewrite the files), so
    such shapes are not tuned into the default CSV again (aiter-formats.md §5.1). One round trip.
    """
    job, variant = ctx.job, ctx.variant
    env = {**(job.facts.env or {}), **ctx.target.container.env}
    if env.get(variant.config_env):
        riders.drop(ctx, "tuned_keys")
        return shapes  # an explicit table: AITER does not merge model_configs
    res = riders.call(ctx, "tuned_keys", _model_config_keys(variant, job.remote.aiter_root, job.facts.cu_num,
                                                           job.facts.gfx))
    where: dict[tuple, str] = {}
    for path, keys in (res.get("files") or {}).items():
        for key in keys:
            where.setdefault(tuple(str(norm_key_value(v)) for v in key), Path(path).name)
    if not where:
        return shapes
    keep, clash = [], {}
    for s in shapes:
        name = where.get(tuple(str(norm_key_value(s.get(c))) for c in variant.key_columns))
        if name is None:
            keep.append(s)
        else:
            clash[name] = clash.get(name, 0) + 1
    if clash:
        files = ", ".join(f"{n} ({c})" for n, c in sorted(clash.items()))
        if ctx.profile.merge_rejects_duplicates:
            job.note(f"{sum(clash.values())} shape(s) already have rows in aiter/configs/model_configs/ "
                     f"({files}); not tuned again: AITER {job.facts.version} raises on duplicate keys "
                     "across the tables it merges")
            return keep
        job.note(f"{sum(clash.values())} shape(s) also have rows in aiter/configs/model_configs/ ({files}); "
                 "AITER keeps the lowest-us row when it merges them")
    return shapes


def time_line(variant: str, shapes: list[dict], timed: dict, total_us: float) -> str:
    """The plan's share line (issue 38): what the shapes to tune hold of the variant's and of all GPU time."""
    share = sum(timed.get(budget.exact_key(s), (0.0, 0.0))[0] for s in shapes)
    var_us = sum(us for _, us in timed.values())
    mine = sum(timed.get(budget.exact_key(s), (0.0, 0.0))[1] for s in shapes)
    of_var = f"{100 * mine / var_us:.0f} % of the {variant} time, " if var_us > 0 else ""
    nks = len({(s.get("n"), s.get("k")) if "n" in s else (s.get("model_dim"), s.get("inter_dim")) for s in shapes})
    return (f"these {len(shapes)} shapes ({nks} (N,K) / MoE dims) are {of_var}{100 * share:.0f} % of all GPU "
            f"time in the profile ({total_us / 1000:.1f} ms)")


def plan_time(ctx: Ctx, shapes: list[dict], described: list[str], missed: dict,
              timed: dict | None = None) -> list[dict]:
    """The plan's estimated tuning time; with --budget, the most-missed shapes that fit it (P-07).
    ``missed``: exact key -> times the log missed it."""
    variant, job = ctx.variant, ctx.job
    info = job.step_state("shapes").info
    gpus = len(job.facts.tune_gpus or []) or 1
    rate, source = budget.seconds_per_shape(ctx.workspace, variant.name, variant.family, job.facts.gfx)
    if job.request.budget:
        limit = budget.parse_duration(job.request.budget)
        if timed is not None:
            shapes, left = budget.within_by_share(shapes, limit, gpus, rate,
                                                  {k: v[0] for k, v in timed.items()})
        else:
            shapes, left = budget.within(shapes, limit, gpus, rate)
        if left:
            most = "largest-time-share (per tuning second)" if timed is not None else "most-missed"
            least = "least share per tuning second" if timed is not None else "least missed"
            msg = (f"--budget {job.request.budget}: the {len(shapes)} {most} shape(s) fit, "
                   f"{len(left)} left for another job ({least} last)")
            job.note(msg)
            described.append(msg)
    if missed:
        info["misses"] = [missed.get(budget.exact_key(s), 0) for s in shapes]
    if timed is not None:
        info["time_share"] = [timed.get(budget.exact_key(s), (0.0, 0.0))[0] for s in shapes]
        info["gpu_us"] = [timed.get(budget.exact_key(s), (0.0, 0.0))[1] for s in shapes]
        line = time_line(variant.name, shapes, timed, float(info.get("profile_total_gpu_us") or 0.0))
        info["time_line"] = line
        described.append(line)
    est = budget.estimate(shapes, gpus, rate)
    info["estimate_s"] = round(est, 1)
    described.append(f"estimated tuning time: {budget.fmt_duration(est)} for {len(shapes)} shape(s) on "
                     f"{gpus} GPU(s) ({source})")
    return shapes


def run(ctx: Ctx) -> None:
    variant = ctx.variant
    shapes, described = collect(ctx)
    info = ctx.job.step_state("shapes").info
    missed = dict(zip(map(budget.exact_key, shapes), info.get("misses") or []))
    timed = {k: (t, us) for k, t, us in zip(map(budget.exact_key, shapes), info.get("time_share") or [],
                                             info.get("gpu_us") or [])} if "time_share" in info else None
    shapes = drop_tuned_in_model_configs(ctx, shapes)
    info.pop("reused", None)            # a re-run of the step asks again
    offered = shapes
    for hook in PLAN_HOOKS:
        shapes = hook(ctx, shapes, described)
    tuned = {id(s) for s in shapes}
    held = [s for s in offered if id(s) not in tuned] if "reused" in info else []
    if shapes:
        shapes = plan_time(ctx, shapes, described, missed, timed)
    elif held:
        info["estimate_s"] = 0.0
        described.append("estimated tuning time: 0 s (every shape's row comes from the team's store)")
    if held:        # kept in the job: benchmarked and judged with the tuned ones (their arrays aligned)
        shapes = shapes + held
        if missed:
            info["misses"] = [missed.get(budget.exact_key(s), 0) for s in shapes]
        if timed is not None:
            info["time_share"] = [timed.get(budget.exact_key(s), (0.0, 0.0))[0] for s in shapes]
            info["gpu_us"] = [timed.get(budget.exact_key(s), (0.0, 0.0))[1] for s in shapes]
    if not shapes:
        raise JobError(f"no {variant.name} shapes to tune",
                       hint="the logs had no untuned shapes of this variant; check --variant, or give "
                            "--nk N,K / --shapes-csv FILE")
    missing = [c for c in variant.key_columns if any(c not in s for s in shapes)]
    if missing:
        raise JobError(f"shapes lack column(s) {', '.join(missing)} that {variant.name} needs on AITER "
                       f"{ctx.job.facts.version}",
                       hint="give them in --shapes-csv (AITER untuned CSV format)")
    ctx.job.shapes = shapes
    ctx.job.step_state("shapes").info["sources"] = described
    ctx.ui.show_shapes(variant, shapes, described, ctx.job.step_state("shapes").info.get("misses"),
                       full_list=_write_full_list(ctx, variant, shapes))
    if not ctx.settings.yes and ctx.settings.interactive and not ctx.ui.confirm(
            f"Tune these {len(shapes)} {variant.name} shapes on {ctx.job.node}/{ctx.job.container}?"):
        ctx.job.state = Status.CANCELLED
        ctx.job.error = "cancelled at the shape confirmation"
        return
    # the node copy is written by prepare's first round trip, from job.shapes (issue 9: round trips)
    ctx.job.remote.untuned_csv = f"{ctx.job.remote.job_dir}/{Path(variant.untuned_csv).name}"
