"""Commands that run a job: run, resume, demo."""
from __future__ import annotations

import os
import time
from pathlib import Path

import click

from ..context import Ctx, Settings, Target
from ..errors import JobError, UsageError
from ..inventory import load_inventory
from ..preconnect import Preconnect, claim
from ..state import TERMINAL, JobState, Status, check_job_id, new_job_id
from ..variants import ALIASES, VARIANTS, get_variant
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, finish_job, run_settings, target_for, cli, resolve_job


def _validate_local_profiles(variant_name: str, profiles) -> None:
    """--profile's local:PATH traces are read here before anything remote: a bad one is one line, exit 2."""
    if not profiles:
        return
    from ..parsing.profile import read_local, split_profile_sources
    local = split_profile_sources(list(profiles))["local"]
    if local:
        read_local(local, get_variant(variant_name).name)


def _validate_local_inputs(variant_name: str, logs, shapes_csv, nk, model=None, m_preset=None,
                           check_logs=None) -> None:
    from ..steps.shape_sources import check_m_preset, parse_nk, split_log_sources
    variant = get_variant(variant_name)
    check_m_preset(m_preset)
    if nk and variant.family != "gemm":
        raise UsageError(f"--nk applies to dense GEMM variants, not {variant.name}",
                         hint="use --shapes-csv or --log for batched and MoE variants")
    for path in split_log_sources(list(logs if check_logs is None else check_logs))["local"]:
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise UsageError(f"log file {path} not found on this machine",
                             hint="local:PATH reads this machine; PATH alone is read inside the container")
    if shapes_csv:
        if not Path(shapes_csv).is_file():
            raise UsageError(f"--shapes-csv {shapes_csv} not found")
        from ..parsing.untuned import read_shapes_csv
        try:
            read_shapes_csv(shapes_csv, variant.name)
        except ValueError as exc:
            raise UsageError(f"--shapes-csv {shapes_csv}: {exc}",
                             hint=f"columns for {variant.name}: {','.join(variant.untuned_columns)}") from None
    parse_nk(list(nk))
    if not (logs or shapes_csv or nk or model):
        raise UsageError("no shape source given",
                         hint="pass --log PATH (server log), --shapes-csv FILE, --nk N,K or --model config.json")


@cli.command()
@click.option("--node", "node", multiple=True,
              help="node name, a group of the inventory's groups:, or all (repeatable: a campaign)")
@click.option("--container", default=None,
              show_default="the node's one container", help="container name on the node(s)")
@click.option("--variant", metavar="VARIANT",
              help="(required) one of: " + ", ".join(VARIANTS) + "; or a comma-separated list, or auto (a campaign)")
@click.option("--dry-run", is_flag=True, help="print the plan (targets, shapes, shards) and exit; nothing is launched")
@click.option("--slurm", default=None, metavar="CLUSTER", help="take the nodes from this Slurm cluster (inventory slurm:)")
@click.option("--slurm-nodes", type=click.IntRange(1), default=None,
              show_default="1", help="with --slurm: how many nodes (one batch job each)")
@click.option("--log", "logs", multiple=True, metavar="PATH",
              help="server log inside the container; node:PATH on the node's host; local:PATH here (repeatable). "
                   "Also AITER's own shape capture: a *_untuned_*.csv the runtime appends its misses to, or "
                   "its directory (start the server with AITER_TUNE_GEMM=1 AITER_TUNE_GEMM_DIR=DIR, e.g. "
                   "docker run -e ... for vLLM/SGLang; weight = processes that missed)")
@click.option("--shapes-csv", type=click.Path(dir_okay=False), help="shapes in AITER's untuned CSV format")
@click.option("--nk", multiple=True, metavar="N,K", help="an (N,K) pair to sweep M over (repeatable)")
@click.option("--model", "model", type=click.Path(dir_okay=False, exists=True), default=None,
              help="a model's config.json: its linears / experts at --tp are the shapes (dtypes for the node's gfx)")
@click.option("--tp", type=click.IntRange(1), default=1, show_default=True, help="with --model: tensor-parallel size")
@click.option("--m-preset", default=None, metavar="PRESET",
              show_default="pow2 for GEMM", help="M (token) values: pow2, cudagraph, logged, or a list like 1,8,64")
@click.option("--max-m", type=click.IntRange(1), default=None, metavar="M",
              help="largest M (MoE: token count) the server runs, e.g. its max_num_batched_tokens; "
                   "larger shapes are not tuned")
@click.option("--budget", default=None, metavar="DURATION",
              help="tune only the most-missed shapes whose estimated tuning time fits, e.g. 2h, 90m, 1h30m "
                   "(the plan shows the estimate; the rest are left for another job)")
@click.option("--table-from-log", is_flag=True,
              help="tune the table the log's miss lines say AITER consulted, when it differs from the "
                   "container's AITER_CONFIG_* / default table")
@click.option("--padded-m", is_flag=True,
              help="GEMM: tune M on AITER's padded-M grid only (16/32/64/128 steps), deduplicated: a shape "
                   "without its own row reads the row at its padded M")
@click.option("--gpus", default=None, metavar="LIST", show_default="the free ones", help="GPUs to tune on")
@click.option("--force-cu-num", is_flag=True,
              help="tune even when the tuning GPUs' cu_num differs from the serving GPUs' (partition modes)")
@click.option("--batch", type=click.IntRange(1), default=None, show_default="one shape per GPU", help="tuner --batch")
@click.option("--timeout", type=click.IntRange(1), default=None, show_default="600", help="tuner --timeout per task, seconds")
@click.option("--serve-cmd", default=None, metavar="CMD",
              help="shell line run in the container (cwd: aiter root) before tuning and after promotion: "
                   "start your server, run its serving benchmark, exit; figures go to serving.csv")
@click.option("--tune-arg", "tune_arg", multiple=True, metavar="ARG",
              help="pass flags to the tuner as is, e.g. --tune-arg=--all (repeatable; checked against "
                   "the node tuner's --help before anything runs)")
@click.option("--splitk", is_flag=True, help="tuner -k: also try splitK kernels (skipped by default)")
@click.option("--libtype", default=None, metavar="LIST", help="tuner --libtype (blockscale, bpreshuffle tuners)")
@click.option("--err-ratio", type=click.FloatRange(0, 1), default=None, help="tuner --errRatio")
@click.option("--moe-tuners", type=click.Choice(["standard", "flydsl", "both"]), default="standard",
              show_default=True, help="FP4 MoE: the standard fused-MoE tuner, its --mxfp4-flydsl path, or both "
                                      "with the faster row per shape by the end-to-end benchmark (aiter#5625)")
@click.option("--q-dtype-w", default=None, metavar="DTYPE",
              show_default="torch.int8", help="weight dtype of --nk shapes for a8w8/a8w8_bpreshuffle, e.g. "
                   "torch.float8_e4m3fnuz (gfx942), torch.float8_e4m3fn (gfx950)")
@click.option("--stall-timeout", type=click.FloatRange(0), default=None, metavar="S",
              show_default="twice the tuner --timeout: 1200", help="kill and relaunch (at most twice) a tuner "
                   "whose log and table have not changed for S seconds (0 = off)")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
              help="benchmark runs per arm (before/after interleaved on one pinned GPU); verdicts use them")
@click.option("--promote", "promote_mode", type=click.Choice(["proven", "all", "none"]), default="proven",
              show_default=True, help="rows merged into the live table at the end: proven (verdict improved), "
                                      "all tuned rows, or none")
@click.option("--job-id", default=None, show_default="<time>-<node>-<variant>", help="choose the job id")
@click.option("--yes", "-y", is_flag=True, help="never prompt")
@click.option("--detach", is_flag=True, help="return once the remote work is running; `resume` finishes it")
@click.option("--profile", "profiles", multiple=True, metavar="PATH",
              help="a server profile (torch.profiler trace with record_shapes, rocprofv3 kernel-trace CSV, or a "
                   "directory of them) as --log takes paths: shapes ranked by their share of GPU time (repeatable)")
@ACCEPT_NEW_HOST_KEY
@click.pass_obj
def run(env: Env, node, container, variant, dry_run, slurm, slurm_nodes, logs, shapes_csv, nk, model, tp, m_preset,
        max_m, budget, table_from_log, padded_m, gpus,
        force_cu_num, batch, timeout,
        tune_arg, splitk, libtype, err_ratio, moe_tuners, q_dtype_w,
        stall_timeout, repeats, promote_mode, serve_cmd, job_id, yes, detach, accept_new_host_key,
        profiles=()):
    """Discover, mine shapes, benchmark, tune (detached on the node), re-benchmark, compare, report, fetch.

    Several nodes (or a group, or all) and/or several variants (or auto) make one campaign job."""
    from .campaign import is_campaign_request, validate_campaign_inputs
    _required_inputs(variant, node, slurm, logs or profiles, shapes_csv, nk, model)
    nodes, variants = list(node), [ALIASES.get(v.strip(), v.strip()) for v in variant.split(",") if v.strip()]
    if not variants:
        raise UsageError(f"--variant {variant!r} names no variant",
                         hint="e.g. --variant a8w8_blockscale, several as a8w8_blockscale,moe_2stages, or auto")
    inv = load_inventory(env.inventory_path)
    if not nodes and not slurm:
        raise UsageError("say where to tune", hint="--node NODE (or a group, or all), or --slurm CLUSTER")
    if slurm_nodes is not None and not slurm:
        raise UsageError("--slurm-nodes applies to --slurm", hint="add --slurm CLUSTER, or leave --slurm-nodes out")
    slurm_nodes = slurm_nodes or 1
    campaign = bool(slurm) or is_campaign_request(inv, nodes, variants)
    if dry_run and detach:
        raise UsageError("--detach launches nothing with --dry-run", hint="leave out one of them")
    if dry_run and not campaign:    # one target's plan (discover, shapes) is a campaign's: printed, nothing
        campaign, detach = True, False  # launched (so --detach means nothing here)
    pre = None
    try:
        if campaign:
            validate_campaign_inputs(inv, nodes, container, variants, logs, shapes_csv, nk, detach, slurm)
            for v in variants:
                if v != "auto":
                    _validate_local_inputs(v, logs, shapes_csv, nk, model, m_preset)
        else:
            node, variant = nodes[0], variants[0]
            get_variant(variant)
            node_spec = inv.node(node)
            if container is None and len(node_spec.containers) == 1:
                container = next(iter(node_spec.containers))
            if container is None:
                raise UsageError(f"node {node!r} has {len(node_spec.containers)} containers; say which",
                                 hint="add --container NAME" + (" (one of: " + ", ".join(node_spec.containers) + ")"
                                                                if node_spec.containers else ""))
            ctr = node_spec.container(container)
            # connect and start the node helper while the inputs are checked and the job is made (preconnect.py)
            pre = (claim(env.inventory_path, node_spec, ctr, accept_new_host_key)
                   or Preconnect(node_spec, ctr, accept_new_host_key))
            _validate_local_inputs(variant, logs or profiles, shapes_csv, nk, model, m_preset, check_logs=logs)
            _validate_local_profiles(variant, profiles)
        if campaign and profiles:
            raise UsageError("--profile applies to one node and one variant (not a campaign yet)",
                             hint="run one job per node with --profile, or give the campaign --log")
        model_cfg = None
        if model:                     # read and checked once, before anything remote (whatever the variants)
            from ..parsing.modelshapes import check_model, read_model
            model_cfg = read_model(model)
            check_model(model_cfg, tp, model)
        gpu_list = _parse_gpus(gpus)
        if budget is not None:
            from ..outcome.budget import parse_duration
            parse_duration(budget)            # a bad duration: one line, exit 2, before anything remote
        from ..steps.tuneargs import compose, normalize_q_dtype_w
        tune_args = compose(tune_arg, splitk=splitk, libtype=libtype, err_ratio=err_ratio)
        from ..steps.moetuners import check_request
        check_request(moe_tuners, variants)
        q_dtype_w = normalize_q_dtype_w(q_dtype_w, variants) if q_dtype_w else None
        claimed = None
        if not job_id:
            job_id = new_job_id("-".join(variants) if campaign else variant,
                                (slurm or "-".join(nodes)) if campaign else node)
            if not dry_run:
                job_id = claimed = env.workspace.claim(job_id)
        job_id = check_job_id(job_id)
        if env.workspace.exists(job_id):
            raise UsageError(f"job {job_id} already exists in {env.workspace.root}",
                             hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
        with env.workspace.keeping(claimed):
            request = {"logs": list(logs), **({"profiles": list(profiles)} if profiles else {}), "shapes_csv": os.path.abspath(shapes_csv) if shapes_csv else None,
                       "nk": list(nk), "m_preset": m_preset, "gpus": gpu_list, "batch": batch, "timeout": timeout,
                       "stall_timeout": stall_timeout, "detach": detach, "repeats": repeats, "promote": promote_mode,
                       "serve_cmd": serve_cmd, "tune_args": tune_args, "q_dtype_w": q_dtype_w,
                       **({"moe_tuners": moe_tuners} if moe_tuners != "standard" else {}),
                       "max_m": max_m, "budget": budget, "padded_m": padded_m, "table_from_log": table_from_log,
                       "force_cu_num": force_cu_num, "model": model_cfg, "tp": tp}
            if campaign:
                from .campaign import run_campaign
                run_campaign(env, inv, nodes, container, variants, request, job_id, run_settings(yes, accept_new_host_key),
                             dry_run, slurm, slurm_nodes)
                return
            job = JobState(job_id=job_id, node=node, container=container, variant=variant, created=time.time(),
                           request=request)
            from ..engine import load_steps
            load_steps()                  # the first steps' modules, while the node starts the helper
            target, pre = pre.target(), None
            _drive(env, job, target, run_settings(yes, accept_new_host_key))
    except BaseException:
        if pre is not None:
            pre.abandon()
        raise


def _required_inputs(variant, node, slurm, logs, shapes_csv, nk, model) -> None:
    """Every required input that is missing, in one message (was: one error at a time)."""
    missing = [what for what, given in (("--variant VARIANT", variant), ("where to tune (--node NODE or --slurm "
                                                                         "CLUSTER)", node or slurm),
                                        ("a shape source (--log PATH, --shapes-csv FILE, --nk N,K or --model "
                                         "config.json)", logs or shapes_csv or nk or model)) if not given]
    if variant is None or len(missing) > 1:   # one of the others alone: its own message below, as before
        raise UsageError("run needs " + "; ".join(missing),
                         hint="e.g. tune-remote run --node NODE --variant a8w8_blockscale --log /path/server.log "
                              "(tune-remote run --help lists them)")


def _parse_gpus(gpus: str | None):
    if not gpus:
        return None
    try:
        out = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3") from None
    if not out or any(g < 0 for g in out):
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3")
    return out


def _drive(env: Env, job: JobState, target: Target, settings: Settings) -> None:
    from ..engine import run_job  # the steps load pandas and jinja2 when they run (warm.py: while it waits)
    ui = env.ui()
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=settings, ui=ui)
    target.connect()  # before the job is saved: a refused connection leaves no half-made job behind
    env.workspace.own(job.job_id, "resume" if job.rev else "run")   # one driver per job
    env.workspace.save(job)
    ui.event(f"job {job.job_id} ({job.variant} on {job.node}/{job.container}); "
             f"state in {env.workspace.job_dir(job.job_id)}")
    try:
        run_job(ctx)
    finally:
        target.close()
    finish_job(job, env)


@cli.command()
@JOB_ARG
@click.option("--yes", "-y", is_flag=True, help="never prompt")
@ACCEPT_NEW_HOST_KEY
@click.option("--relaunch", is_flag=True,
              help="a lost job (container restarted, process killed): launch it again; only the shapes not "
                   "tuned yet are tuned, the first baseline is kept")
@click.option("--retry", is_flag=True,
              help="a job that failed in a laptop step after its node pipeline succeeded (compare, promote, "
                   "report, fetch): run that step again")
@click.option("--node", "nodes", multiple=True, metavar="NODE",
              help="a campaign: re-attach only to its targets on this node (repeatable)")
@click.pass_obj
def resume(env: Env, job_id, yes, accept_new_host_key, relaunch, retry, nodes):
    """Re-attach to a job after a disconnect or a killed laptop process and carry it to the end."""
    from .pick import check_nodes
    job_id = resolve_job(env, job_id)
    check_nodes(env, env.workspace.load(job_id), nodes)   # no such job/node: say so first
    env.workspace.own(job_id, "resume")                 # a second driver exits 1 naming the first
    job = env.workspace.load(job_id)                    # what the last driver left, read under the lock
    if job.state == Status.LOST and not job.is_campaign:
        if not relaunch:
            raise JobError(f"job {job_id} was lost: {job.error or 'its process on the node is gone'}",
                           hint=f"`tune-remote resume {job_id} --relaunch` launches it again (rows already "
                                "tuned are kept, only the other shapes are tuned)")
        from ..steps.remote import prepare_relaunch
        from ..workflow import STEPS
        job.state, job.error = Status.RUNNING, None
        for name in STEPS[STEPS.index("remote"):]:
            job.step_state(name).status = Status.PENDING
        prepare_relaunch(job)
    elif relaunch:
        raise UsageError(f"job {job_id} is {job.state}, not lost: nothing to relaunch",
                         hint=f"`tune-remote resume {job_id}` re-attaches to a running job")
    if retry:
        _retry(job)
    if job.state in TERMINAL:
        finish_job(job, env)
        return
    if job.is_campaign:
        job.request["detach"] = False      # a detached campaign: this resume drives it to the end
        from .campaign import resume_campaign
        resume_campaign(env, job, run_settings(yes, accept_new_host_key), nodes)
        return
    job.request.detach = False
    _drive(env, job, target_for(env, job, accept_new_host_key), run_settings(yes, accept_new_host_key))

def _retry(job: JobState) -> None:
    """R-01: hours of tuning are not thrown away for a laptop-side failure after the node finished."""
    from ..workflow import STEPS
    if job.state != Status.FAILED or job.is_campaign:
        raise UsageError(f"job {job.job_id} is {job.state}, not a failed single job: nothing to retry",
                         hint=f"`tune-remote resume {job.job_id}` carries a running job on")
    failed = [n for n in STEPS if job.step_state(n).status == Status.FAILED]
    step = failed[0] if failed else job.step
    if step not in STEPS or STEPS.index(step) <= STEPS.index("remote") or job.step_state("remote").status != Status.DONE:
        raise JobError(f"job {job.job_id} failed at {step}, before its node pipeline succeeded: a retry would "
                       "not help", hint="start a new run")
    job.state, job.error = Status.RUNNING, None
    for name in STEPS[STEPS.index(step):]:
        job.step_state(name).status = Status.PENDING
    job.note(f"{step} retried after it failed on the laptop (resume --retry)")


@cli.command()
@click.option("--variant", default="a8w8_blockscale", show_default=True, help="variant to demo")
@click.option("--profile", type=click.Choice(["current", "legacy", "newest"]), default="current", show_default=True)
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="benchmark runs per arm")
@click.option("--noise", type=click.FloatRange(0, 50), default=0.0, show_default=True, metavar="PCT",
              help="simulated run-to-run benchmark noise, uniform +-PCT %")
@click.option("--noise-model", type=click.Choice(["uniform", "measured"]), default="uniform", show_default=True,
              help="measured: the benchmarks' noise drawn from a real GPU's (per-shape sd by size, process "
                   "levels, drift, tails; --noise unused)")
@click.option("--noise-seed", type=int, default=0, show_default=True, help="seed of --noise-model measured")
@click.option("--nodes", type=click.IntRange(1, 12), default=1, show_default=True,
              help="simulated nodes: 2 or more run a campaign (every third node a partitioned GPU kind)")
@click.option("--watch", "watch_demo", is_flag=True,
              help="two cycles of `tune-remote watch` over the node's growing server log")
@click.pass_obj
def demo(env: Env, variant, profile, repeats, noise, noise_model, noise_seed, nodes, watch_demo):
    """The whole pipeline against a local simulated node: no GPU, no SSH, no docker."""
    if watch_demo:
        from .watchloop import demo_watch
        demo_watch(env, variant, profile, repeats, noise, noise_model=noise_model, noise_seed=noise_seed)
        return
    from ..demo import demo_target, prepare_demo, serve_cmd
    from ..sim.logs import expected_shapes, log_specs
    logged = [v for v in VARIANTS if any(expected_shapes(log.name).get(v) for log in log_specs())]
    variant = get_variant(variant).name
    if get_variant(variant).bench is None or variant not in logged:   # the comparison runs its op_test on
        raise UsageError(f"the demo cannot run {variant}: " + (  # the shapes of a simulated server log
            "AITER ships no benchmark (op_test) for it" if get_variant(variant).bench is None
            else "no simulated server log has its shapes (tune it on a test-bed node: run --nk N,K)"),
            hint="demo one of: " + ", ".join(v for v in logged if VARIANTS[v].bench is not None))
    if nodes > 1:
        _demo_campaign(env, variant, profile, repeats, noise, nodes, noise_model, noise_seed)
        return
    job_id = env.workspace.claim(new_job_id(variant, "demo"))
    demo_dir, log_path = prepare_demo(env.workspace.root / ".demo-nodes" / job_id, profile=profile, variant=variant,
                                      noise_pct=noise, noise_model=noise_model, noise_seed=noise_seed)
    job = JobState(job_id=job_id, node="demo", container="simulated", variant=variant, created=time.time(),
                   request={"logs": [log_path], "demo_dir": str(demo_dir), "detach": False,
                            "m_preset": None, "nk": [], "shapes_csv": None, "gpus": None,
                            "batch": None, "timeout": None, "repeats": repeats, "promote": "proven",
                            "serve_cmd": serve_cmd(variant)})
    _drive(env, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2))
    jd = env.workspace.job_dir(job_id)
    if not env.quiet:
        click.echo(f"report: {jd / 'report.md'}\n        {jd / 'report.html'}\ncomparison: {jd / 'comparison.csv'}",
                   err=True)    # stdout: the one result line (JSON when piped)


def _demo_campaign(env: Env, variant: str, profile: str, repeats: int, noise: float, count: int,
                   noise_model: str = "uniform", noise_seed: int = 0) -> None:
    """`demo --nodes N`: a campaign over N simulated nodes (the campaign code, the demo's transport)."""
    from ..demo import demo_nodes
    from ..inventory import Inventory
    from .campaign import run_campaign
    job_id = env.workspace.claim(new_job_id(variant, f"demo{count}"))
    dirs, log_path = demo_nodes(env.workspace.root / ".demo-nodes" / job_id, count, profile=profile,
                                variant=variant, noise_pct=noise, noise_model=noise_model, noise_seed=noise_seed)
    request = {"logs": [log_path], "demo_nodes": dirs, "detach": False, "m_preset": None, "nk": [],
               "shapes_csv": None, "gpus": None, "batch": None, "timeout": None, "repeats": repeats,
               "promote": "proven"}
    run_campaign(env, Inventory(path="(demo)", nodes={}), list(dirs), "simulated", [variant], request, job_id,
                 Settings(yes=True, poll_s=0.2), False)
    jd = env.workspace.job_dir(job_id)
    if not env.quiet:
        click.echo(f"report: {jd / 'report.md'}\n        {jd / 'report.html'}\ncomparison: {jd / 'comparison.csv'}",
                   err=True)    # stdout: the one result line (JSON when piped)
