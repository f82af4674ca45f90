"""Commands that run a job: run, resume, demo."""
from __future__ import annotations

import click

from ..context import Settings
from ..variants import VARIANTS
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, carried, cli, resolve_job, run_settings


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
                   "its directory (start the server with AITER_TUNE_GEMM=1 AITER_TUNE_GEMM_DIR=DIR: vLLM "
                   "'docker run -e AITER_TUNE_GEMM=1 -e AITER_TUNE_GEMM_DIR=/tuning/m -e VLLM_ROCM_USE_AITER=1 "
                   "... vllm serve', SGLang the same two before 'python -m sglang.launch_server'; weight = "
                   "processes that missed)")
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
              help="variants whose runtime pads M (the dense GEMMs, the MXFP8 BMM): tune M on AITER's padded-M "
                   "grid only (16/32/64/128 steps), deduplicated: a shape without its own row reads the row at "
                   "its padded M")
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
@click.option("--repeats", type=click.IntRange(1), default=None, show_default="5",
              help="benchmark runs per arm (before/after interleaved on one pinned GPU); verdicts use them. Not "
                   "given: 5, then 5 more at a time for the shapes still undecided, up to --max-repeats; given: "
                   "exactly N (unless --max-repeats is given too)")
@click.option("--max-repeats", type=click.IntRange(1), default=None, metavar="M", show_default="30",
              help="the sequential design's bound: runs are added for undecided shapes only, --repeats at a time, "
                   "up to M per arm (docs/outcome.md)")
@click.option("--serve-repeats", type=click.IntRange(1), default=3, show_default=True, metavar="N",
              help="with --serve-cmd: its runs before tuning and after promotion, each metric judged like the "
                   "benchmarks (one run a side is not judged)")
@click.option("--accuracy-cmd", default=None, metavar="CMD",
              help="with --serve-cmd: a shell line printing an accuracy score (e.g. lm-eval's exact_match), run "
                   "before tuning and after promotion")
@click.option("--max-accuracy-drop", type=click.FloatRange(0), default=1.0, show_default=True, metavar="PCT",
              help="with --accuracy-cmd: a score lower by more than PCT % after promotion is a regression")
@click.option("--on-serving-regression", type=click.Choice(["rollback", "keep"]), default="rollback",
              show_default=True, help="a promotion whose serving is proven slower, or whose accuracy drops: "
                                      "rolled back, or kept with a note")
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
def run(env: Env, node, container, variant, dry_run, slurm, slurm_nodes, job_id, yes, detach, accept_new_host_key,
        **options):
    """Discover, mine shapes, benchmark, tune (detached on the node), re-benchmark, compare, report, fetch.

    Several nodes (or a group, or all) and/or several variants (or auto) make one campaign job."""
    from ..campaign import runs
    settings = run_settings(yes, accept_new_host_key)
    carried(env, settings, lambda console: runs.run(
        env.workspace, env.inventory_path, settings, console, node=node, container=container, variant=variant,
        dry_run=dry_run, slurm=slurm, slurm_nodes=slurm_nodes, job_id=job_id, detach=detach, **options))


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
    from ..campaign import runs
    settings, job_id = run_settings(yes, accept_new_host_key), resolve_job(env, job_id)
    carried(env, settings, lambda console: runs.resume(env.workspace, env.inventory_path, job_id, settings, console,
                                                       relaunch=relaunch, retry=retry, nodes=nodes))


@cli.command()
@click.option("--variant", default="a8w8_blockscale", show_default=True, help="variant to demo")
@click.option("--profile", type=click.Choice(["current", "legacy", "newest", "head"]), default="current", show_default=True)
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
@click.option("--max-repeats", type=click.IntRange(1), default=None, metavar="M",
              help="the sequential design: --repeats runs per arm, then --repeats more for the undecided shapes, "
                   "up to M")
@click.option("--aa", is_flag=True, help="an A/A node: tuning changes nothing (every tuned row runs as the "
                                         "untuned kernel), to see what the verdicts say when nothing moved")
@click.pass_obj
def demo(env: Env, variant, profile, repeats, noise, noise_model, noise_seed, nodes, watch_demo, max_repeats=None,
         aa=False):
    """The whole pipeline against a local simulated node: no GPU, no SSH, no docker."""
    if watch_demo:
        from .watchloop import demo_watch
        demo_watch(env, variant, profile, repeats, noise, noise_model=noise_model, noise_seed=noise_seed)
        return
    from ..campaign import runs
    job = carried(env, Settings(yes=True), lambda console: runs.demo(env.workspace, console, variant, profile,
                                                                     repeats, noise, nodes, noise_model, noise_seed,
                                                                     max_repeats=max_repeats, aa=aa))
    jd = env.workspace.job_dir(job.job_id)
    if not env.quiet:
        click.echo(f"report: {jd / 'report.md'}\n        {jd / 'report.html'}\ncomparison: {jd / 'comparison.csv'}",
                   err=True)    # stdout: the one result line (JSON when piped)
