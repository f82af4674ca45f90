"""Prepare: back up the tuned CSV, plan the benchmarks (patched copies where argparse `choices` refuse
our values), build the tune command. Nothing long-running starts here."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from ..context import Ctx
from ..errors import JobError
from ..parsing.untuned import write_untuned_csv
from ..remote.shell import Cmd, quote, render
from ..variants import KernelVariant
from ..workflow import LOG_STEP_NAMES
from ..outcome.keys import norm_key_value
from . import fhmoe_input, moetuners, serving_check, tuneargs
from .armargs import arm_args
from .reused import reused, reused_key_set
from .bench import (announced, bench_inputs, call_path, check_moe_quant, measured_by_note, plan_bench,
                    prepare_ops, run_config_gate)

DEFAULT_REPEATS = 3  # benchmark runs per arm (run --repeats)
DEFAULT_TIMEOUT_S = 600  # per-task watchdog; older AITER has none by default (aiter-formats.md §1.1)


def tuned_csv_path(ctx: Ctx, variant: KernelVariant) -> str:
    """The file AITER reads at runtime: the container's AITER_CONFIG_* (first path) or the default."""
    return runtime_table(variant, ctx.job.remote, lambda: {**(ctx.job.facts.env or {}), **ctx.target.container.env},
                         ctx.job.note)


def runtime_table(variant: KernelVariant, remote, env, note) -> str:
    """``tuned_csv_path`` of its parts (a job's or a campaign plan's): ``env()`` the container's environment."""
    if remote.table_from_log:   # run --table-from-log: the table the server's log named (C-12)
        return remote.table_from_log
    configured = env().get(variant.config_env)
    root = remote.aiter_root
    if configured:
        first = configured.split(":")[0]
        if not first.startswith("/"):     # the tuner and benches run in the aiter root: resolve it there (C-21)
            note(f"{variant.config_env}={configured} is a relative path: AITER resolves it against the "
                 f"server's working directory; tune-remote used {root}/{first} (the aiter root)")
            first = f"{root}/{first}"
        return first
    return f"{root}/{variant.tuned_csv}"


_SAFE_CSV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,120}\.csv$")
LOCAL_NAMES = ("comparison.csv", "serving.csv")   # what the job writes into its local directory


def staging_name(live: str, variant: KernelVariant) -> str:
    """The staging table's file name, which is also its local name after fetch: the live table's name when
    that is a plain CSV name, else the variant's default one. The node controls the live path (its
    AITER_CONFIG_*); it must not name a laptop file (state.json, report.md, comparison.csv, `..`; S-04)."""
    name = os.path.basename(live)
    if _SAFE_CSV.match(name) and name not in LOCAL_NAMES:
        return name
    return os.path.basename(variant.tuned_csv)


def tune_script(ctx: Ctx, variant: KernelVariant) -> str:
    """The tune script relative to the meta root (MoE's pre-0.1.10 path names the gfx)."""
    return variant.tune_script.format(gfx=ctx.job.facts.gfx or "gfx942")


def hip_devices(facts: dict, physical: list[int]) -> list[int]:
    """HIP_VISIBLE_DEVICES for physical (rocm-smi) GPU ids: their logical index in this container (C-02).
    Jobs discovered before the map existed (or without one) use the ids as they are."""
    mapping = facts.get("gpu_map")
    if not mapping:
        return [int(g) for g in physical]
    return [int(mapping[str(g)]) for g in physical]


def tune_command(ctx: Ctx, variant: KernelVariant, untuned: str, tuned: str, flydsl: bool = False) -> Cmd:
    req, profile = ctx.job.request, ctx.profile
    gpus = ctx.job.facts.tune_gpus
    mp = len(gpus)
    script = tune_script(ctx, variant)
    if variant.family == "fhmoe":   # not the common tuner CLI (steps/fhmoe_input.py)
        return fhmoe_input.tune_command(ctx.target.container.python, f"{ctx.job.remote.meta_root}/{script}",
                                        untuned, tuned, ctx.job.shapes, hip_devices(ctx.job.facts, gpus),
                                        ctx.job.remote.aiter_root, list(req.tune_args or []))
    argv = [ctx.target.container.python, f"{ctx.job.remote.meta_root}/{script}",
            "-i", untuned, "-o", tuned, "--mp", str(mp), "--batch", str(req.batch or max(1, mp))]
    if profile.has_flag("--timeout"):
        argv += ["--timeout", str(req.timeout or DEFAULT_TIMEOUT_S)]
    argv += list(variant.tune_flags)
    argv += tuneargs.probed_argv(variant.probed_flags, (ctx.job.facts.get("probes") or {}).get("tuner_help"),
                                 list(req.tune_args or []))
    argv += list(req.tune_args or [])
    if flydsl:      # -i/-o are always given above: its defaults rewrite the Kimi model table (issue 30)
        argv.append(moetuners.FLAG)
    env: dict[str, str] = {}  # inventory env comes from the pipeline launch, not from this line
    # confine the tuner to the free GPUs: --mp N alone would use GPUs 0..N-1, busy or not
    env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, hip_devices(ctx.job.facts, gpus)))  # logical ids (C-02)
    return Cmd(tuple(argv), env=env, cwd=ctx.job.remote.aiter_root)


STALL_RELAUNCHES = 2


def stall_timeout_s(ctx: Ctx) -> float:
    """--stall-timeout S (0 = off); default twice the tuner's per-task --timeout (1200 s with ours): a
    task that runs that long has been killed by the tuner itself, so a silent log means a livelock."""
    req = ctx.job.request
    if req.stall_timeout is not None:
        return float(req.stall_timeout)
    return 2.0 * float(req.timeout or DEFAULT_TIMEOUT_S)


LOG_BYTES_PER_SHAPE = 64 * 1024     # tuner + bench output per shape, generous (candidates, JIT lines)
HEADROOM_BYTES = 64 * 1024 * 1024   # run dir, markers, a JIT build's temporaries


def space_needed(table_bytes: int, shapes: int) -> int:
    """Bytes a job writes on the node: the backup and the staging copy of the table, AITER's in-place
    rewrites of the staging copy, a repair copy, logs, headroom."""
    return 4 * table_bytes + shapes * LOG_BYTES_PER_SHAPE + HEADROOM_BYTES


def check_space(ctx: Ctx, tuned: str, table_bytes: int, free: dict) -> None:
    """Refuse to start on a node whose disk is (almost) full: a full disk mid-run truncates AITER's table
    and kills the pipeline's bookkeeping. Says how much the job needs. ``free``: the disk_free op's answer."""
    need = space_needed(table_bytes, len(ctx.job.shapes))
    mib = 1024 * 1024
    ctx.job.remote.space_needed_bytes = need
    for path, f in free.items():
        have = f.get("free_bytes")
        if have is not None and have < need:
            raise JobError(f"not enough free space on the node for {path}: {have / mib:.0f} MiB free in "
                           f"{f.get('checked')}, this job needs about {need / mib:.0f} MiB",
                           hint="free space in the container (old tune_logs/, JIT builds) and run again")


def _sequence(cmds: list[Cmd]) -> str:
    """One shell line running every Cmd in turn (each in a subshell); exit status = last failure."""
    parts = [f"( {render(c)} ) || rc=$?" for c in cmds]
    return "rc=0; " + "; ".join(parts) + "; exit $rc"


SAMPLE_MARK = "== tune-remote sample"   # one line before every benchmark run: `<mark> <arm> <n>`


def _sample(arm: str, n: int, cmds: list[Cmd], log: str | None = None) -> str:
    """One benchmark run of every call, announced by a marker line; appended to `log` when given."""
    body = f"echo {quote(f'{SAMPLE_MARK} {arm} {n}')}; " + announced(cmds, "|| rc=$?")  # C-19
    return f"{{ {body}; }} >> {quote(log)} 2>&1" if log else body


def _arm_env(ctx: Ctx, live: str, staging: str, live_exists: bool) -> tuple[dict, dict]:
    """Environment of the before and after benchmarks: the live table vs the staging table, each arm
    with its own private JIT dir (live modules are never built or replaced), one pinned GPU."""
    variant, remote = ctx.variant, ctx.job.remote
    configured = ({**(ctx.job.facts.env or {}), **ctx.target.container.env}.get(variant.config_env) or "")
    rest = [p for p in configured.split(":")[1:] if p]   # a:b lists merge at runtime: keep the others (C-21)
    gpu = str(hip_devices(ctx.job.facts, ctx.job.facts.tune_gpus[:1])[0])
    before: dict[str, str] = {"HIP_VISIBLE_DEVICES": gpu, "AITER_JIT_DIR": f"{remote.job_dir}/jit/before"}
    if live_exists:
        before[variant.config_env] = ":".join([live, *rest])
    after = {"HIP_VISIBLE_DEVICES": gpu, "AITER_JIT_DIR": f"{remote.job_dir}/jit/after",
             variant.config_env: ":".join([staging, *rest])}
    return before, after


def _seed_line(ctx: Ctx, live: str, before_env: dict, live_exists: bool) -> str:
    """Shell prefix of the before arm: the live modules that are current for the live table are copied
    (``cp -p``) into the arm's private JIT dir, so it measures what the server runs without building it
    again. Current = the ``.so`` was written after the live table's last inode change (its mtime is newer
    than the table's ctime, which ``cp -a``, ``touch`` or ``tar`` cannot set back: a table restored that way
    is not taken for the one the module was built from; docs/internals.md "JIT builds per job"); a stale or
    missing one is left out and built there as before. Not when the
    runtime merges several tables (its module comes from the merged copy) or the table does not exist.
    Every other live module (not fed by this table: module_aiter_enum, MoE 2-stage, other families) is
    copied as well: the job changes none of them."""
    from ..variants import table_modules
    modules = table_modules(ctx.variant.name, ctx.profile.name)
    configured = before_env.get(ctx.variant.config_env, "")
    live_dir = live_jit_dir(ctx)
    if not live_dir:
        return ""
    jit = before_env["AITER_JIT_DIR"]
    parts = [render(Cmd(("mkdir", "-p", jit))), _unchanged_modules(live_dir, modules, jit)]
    if live_exists and ":" not in configured:
        parts.extend(copy_if_current(live_dir, m, live, jit) for m in modules)
    return "; ".join(parts) + "; "


def copy_if_current(live_dir: str, module: str, table: str, jit: str) -> str:
    """Shell line: copy ``module`` into ``jit`` when it is current for ``table``: its mtime is newer than
    the table's ctime (the last change of the table's inode: content, rename, ``cp -a``, ``touch``)."""
    so = f"{live_dir}/{module}.so"
    newer = render(Cmd(("find", so, "-newermc", table)))
    return f"if [ -n \"$({newer} 2>/dev/null)\" ]; then {render(Cmd(('cp', '-p', so, jit + '/')))}; fi"


def _unchanged_modules(live_dir: str, fed: list[str], jit: str) -> str:
    """Shell loop copying every live module the job's table does not feed (nor the tuner's *_tune) into
    ``jit``: reused, never rebuilt (issue 26)."""
    skip = "|".join([*(quote(f"{m}.so") for m in fed), "*_tune.so"])
    copy = render(Cmd(("cp", "-p", "--", "$f", jit + "/"))).replace("'$f'", '"$f"')
    return (f"for f in {quote(live_dir)}/module_*.so; do case \"${{f##*/}}\" in {skip}) ;; "
            f"*) if [ -f \"$f\" ]; then {copy}; fi ;; esac; done")


def live_jit_dir(ctx: Ctx) -> str | None:
    """The live JIT dir as AITER finds it: AITER_JIT_DIR, else <package>/jit (aiter-formats.md §5.2)."""
    env = {**(ctx.job.facts.get("env") or {}), **ctx.target.container.env}
    pkg = ctx.job.facts.get("package_dir")
    return env.get("AITER_JIT_DIR") or (f"{pkg}/jit" if pkg else None)


def run(ctx: Ctx) -> None:
    variant, job = ctx.variant, ctx.job
    remote = job.remote
    root, job_dir = remote.aiter_root, remote.job_dir
    live = tuned_csv_path(ctx, variant)
    staging = f"{job_dir}/staging/{staging_name(live, variant)}"
    script = tune_script(ctx, variant)
    script_path = f"{remote.meta_root}/{script}"
    check_moe_quant(variant, job.shapes, ctx.profile.moe_quant_max)
    fhmoe_input.check_shapes(variant, job.shapes)
    mode = moetuners.mode_of(job.request)
    moetuners.check_shapes(mode, job.shapes)
    fly_staging = moetuners.flydsl_staging(staging) if mode == "both" else None
    calls = plan_bench(variant, job.shapes)
    calls, no_bench = run_config_gate(variant, calls, (job.facts.get("probes") or {}).get("tuner_help"))
    bench_scripts = sorted({call_path(c, remote) for c in calls})
    # ONE round trip: the untuned CSV the tuner reads (from job.shapes), what is there and how much room;
    # the backup of the live table, the staging copy the tuner tunes (same rows, so it skips what is tuned
    # already; only promotion changes the live table) and the bench scripts' argparse checks. The checks
    # below refuse the job after it: by then only the job dir holds new files (atomic copies of one table)
    checked = [c for c in calls if c.checked]
    # shapes whose rows the team's store offers (steps/shapes.py reused): not in the tuner's list; their rows
    # go into the staging table, so the benchmarks and the verdict treat them as the tuner's own (issue 39)
    held = reused_key_set(job, variant.key_columns)
    to_tune = [s for s in job.shapes if tuple(norm_key_value(s.get(c)) for c in variant.key_columns) not in held]
    offer = {"offer": {"key_columns": [c.lower() for c in variant.key_columns],
                       "rows": [r["row"] for r in reused(job) if r.get("row")]}} if held else {}
    untuned_text = write_untuned_csv(to_tune, variant.name) if variant.family != "fhmoe" else None
    if untuned_text is None:    # the FHMoE tuner's -i: the live table + an incumbent row per token it lacks
        untuned_text, notes = fhmoe_input.tuner_input(fhmoe_input.live_text(ctx.call(
            "manifest", {"paths": [live], "have": {live: None}, "inline_max": 16 << 20}), live), to_tune)
        for n in notes:
            job.note(n)
    answers = ctx.call_batch([
        ("write_files", {"files": [{"path": remote.untuned_csv, "backup_dir": None,
                                    "content": untuned_text}, *bench_inputs(calls, job.shapes, variant, remote)]}),
        ("manifest", {"paths": [script_path, *bench_scripts, live]}),
        ("disk_free", {"paths": [job_dir, live]}),
        ("backup", {"paths": [live], "backup_dir": f"{job_dir}/backup"}),
        ("stage", {"live": live, "staging": staging, **offer}),
        *([("stage", {"live": live, "staging": fly_staging, **offer})] if fly_staging else []),
        *prepare_ops(checked, root, f"{job_dir}/patched", missing_ok=True),
        # FHMoE: the staging table (its -o) starts as its -i, which a later tune_fhmoe.py requires of an -o
        # that exists (_validate_existing_output: each tuned row as in -i); the last op, after every answer read
        *([("write_files", {"files": [{"path": staging, "backup_dir": None, "content": untuned_text}]})]
          if variant.family == "fhmoe" else [])])
    files, free = answers[1]["files"], answers[2]
    if files.get(script_path) is None:
        raise JobError(f"tune script {script} not found under {remote.meta_root} "
                       f"(AITER {job.facts.version})",
                       hint="this AITER install has no csrc/; use a develop (source) install of aiter")
    check_space(ctx, live, (files.get(live) or {}).get("size") or 0, free["free"])
    backup = answers[3]["backups"].get(live)
    if held:
        kept = answers[4].get("kept") or 0
        job.note(f"{answers[4].get('offered') or 0} row(s) from the team's store staged as candidates"
                 + (f"; {kept} key(s) keep the row this node's table holds already" if kept else ""))
    prepared = dict(zip(map(id, checked), answers[6 if fly_staging else 5:]))
    remote.update({"live_csv": live, "tuned_csv": staging, "tuned_backup": backup})
    if variant.bench is not None and variant.bench.style == "run_config":    # steps/armargs.py RC_PROBED
        remote["bench_probed"] = tuneargs.probed_argv(variant.probed_flags,
                                                      (job.facts.get("probes") or {}).get("tuner_help"), [])
    ts = time.strftime("%Y%m%d_%H%M%S", time.localtime(job.created))
    logs = {step: f"{remote.logs_dir}/{variant.name}_{LOG_STEP_NAMES[step]}_{ts}.log"
            for step in LOG_STEP_NAMES}
    remote.logs = logs
    remote.report_md = f"{remote.logs_dir}/{variant.name}_report_{ts}.md"

    before_env, after_env = _arm_env(ctx, live, staging, bool(backup))
    bench_cmds: list[Cmd] = []
    after_cmds: list[Cmd] = []      # the same calls with the after arm's paths (steps/armargs.py)
    patched: list[str] = []
    for call in calls:
        path = call_path(call, remote)
        if files.get(path) is None:
            continue
        to_run = path
        if call.checked:
            prep = prepared[id(call)]
            if prep.get("patched"):
                to_run = prep["script"]
                patched.append(f"{call.script}: argparse choices of {', '.join(prep['removed_choices'])} "
                               f"reject values we need; ran a patched copy {to_run} (original untouched)")
        for cmds, arm, env in ((bench_cmds, "before", before_env), (after_cmds, "after", after_env)):
            args = arm_args(call.args, arm, remote)
            if args is not None:        # a call this arm has no table for is not run in it (steps/armargs.py)
                cmds.append(Cmd((ctx.target.container.python, to_run, *args), env=env, cwd=root))
        # the engaged-at-runtime check reuses it: a patched copy accepts any subset of these shapes
        remote.setdefault("bench_run_as", {})[call.script] = to_run
    for p in patched:
        job.note(p)
    if bench_cmds and variant.bench.style == "run_config":
        job.note(measured_by_note(variant))
    repeats = int(job.request.repeats or DEFAULT_REPEATS)
    steps: list[dict] = []
    if job.request.serve_cmd:   # the user's serving benchmark, before anything changes
        logs["serve_before"] = f"{remote.logs_dir}/{variant.name}_serve_before_{ts}.log"
        steps.append({"name": "serve_before", "log": logs["serve_before"],
                      "line": serving_check.runs_line(job.request, root), "marker": ""})
    seed = _seed_line(ctx, live, before_env, bool(backup))
    if bench_cmds:
        steps.append({"name": "baseline", "log": logs["baseline"],
                      "line": f"rc=0; {seed}{_sample('before', 1, bench_cmds)}; exit $rc", "marker": "*"})
    else:
        missing = variant.bench.script if variant.bench else "none"
        job.note(no_bench or f"no benchmark for {variant.name} on this AITER install (test script: {missing}); "
                             "tuning only, no before/after comparison")
    tcmd = tune_command(ctx, variant, remote.untuned_csv, staging, flydsl=mode == "flydsl")
    stall = stall_timeout_s(ctx)
    # the watchdog also checks the (staging) table after every exit of the tuner and repairs it from the
    # backup of the live table (the staging table started as its byte copy)
    table_opts = ["--keys", ",".join(("gfx", "cu_num", *variant.untuned_columns)), "--keep", f"{job_dir}/damaged"]
    if backup:
        table_opts = ["--backup", backup, *table_opts]
    tuners = [(tcmd, staging)]
    if fly_staging:     # --moe-tuners both: the flydsl path into its own staging table, then picked per shape
        fcmd = tune_command(ctx, variant, remote.untuned_csv, fly_staging, flydsl=True)
        tuners.append((fcmd, fly_staging))
        remote["moe_flydsl"] = {"staging": fly_staging, "tune_argv": list(fcmd.argv),
                                "jit": f"{job_dir}/jit/after_flydsl"}
    watched = [Cmd((ctx.target.container.python, ctx.target.helper.path, "_stall",
                    f"{stall:g}", str(STALL_RELAUNCHES), table, *table_opts, "--", render(cmd)))
               for cmd, table in tuners]
    line = _sequence(watched) if to_tune else \
        "echo " + quote("[tune-remote] no shape to tune: every row of this job comes from the team's store")
    steps.append({"name": "tune", "log": logs["tune"], "line": line, "marker": "Tuning not Finished"})
    remote.stall_timeout_s = stall
    if bench_cmds:
        # interleaved: after 1, before 2, after 2, ... (the first before ran ahead of tuning); the first
        # after call builds each module once from the staging table in the private JIT dir, emptied first
        # (a re-run of the step must not reuse a module built from an earlier staging table): no
        # AITER_REBUILD, which would rebuild every module in every call of the first sample (issue 26)
        first = again = after_cmds
        fly = []
        if fly_staging:     # the flydsl table's own after arm, in its own JIT dir, every sample (issue 30)
            fly_env = {**after_env, "AITER_JIT_DIR": remote["moe_flydsl"]["jit"],
                       variant.config_env: after_env[variant.config_env].replace(staging, fly_staging, 1)}
            fly = [Cmd(c.argv, env=fly_env, cwd=c.cwd) for c in bench_cmds]
        from ..variants import table_modules
        parts = []
        for env in [after_env, *([fly[0].env] if fly else [])]:
            parts += [render(Cmd(("rm", "-rf", env["AITER_JIT_DIR"]))), render(Cmd(("mkdir", "-p", env["AITER_JIT_DIR"])))]
            if live_jit_dir(ctx):   # the modules the staging table does not feed: reused from the live install
                parts.append(_unchanged_modules(live_jit_dir(ctx), table_modules(variant.name, ctx.profile.name),
                                                env["AITER_JIT_DIR"]))
        for n in range(1, repeats + 1):
            parts.append(_sample("after", n, first if n == 1 else again))
            if fly:
                parts.append(_sample(moetuners.ARM, n, fly))
            if n < repeats:
                parts.append(_sample("before", n + 1, bench_cmds, logs["baseline"]))
        steps.append({"name": "after", "log": logs["after"], "line": "rc=0; " + "; ".join(parts) + "; exit $rc",
                      "marker": "*"})
    remote.pipeline = steps
    remote.repeats = repeats
    remote.bench_gpu = before_env["HIP_VISIBLE_DEVICES"]
    remote.bench_env = {"before": before_env, "after": after_env}
    remote.bench_jit = ("private JIT dir per arm; before: live modules current for the live table copied in"
                        if seed else "private JIT dir per arm") + \
        "; after: each module built once from the staging table, no AITER_REBUILD"
    remote.tune_argv = list(tcmd.argv)
    remote.tune_env = {"HIP_VISIBLE_DEVICES": tcmd.env["HIP_VISIBLE_DEVICES"]}
    remote.bench_argv = [list(c.argv[1:]) for c in bench_cmds]
    # every call of each arm as it runs on the node (interpreter, env, cwd), for the report (C-18)
    remote.bench_display = {"before": [_shown(c) for c in bench_cmds],
                               "after": [_shown(c) for c in first] if bench_cmds else []}
    ctx.ui.event(f"live table {live}" + (f" (backup {backup})" if backup else " (does not exist yet)")
                 + f"; tuning into the staging table {staging}")


def _shown(cmd: Cmd) -> str:
    """A command as a user would paste it into a shell in the container (no ``exec``)."""
    return (f"cd {quote(cmd.cwd)} && " if cmd.cwd else "") + render(Cmd(cmd.argv, env=cmd.env))


def local_log_path(ctx: Ctx, node_path: str) -> Path:
    return ctx.job_dir / "logs" / os.path.basename(node_path)
