"""The recheck benchmark: each promoted shape with the live table ("with" arm) and with the same table without
the rows under recheck ("without" arm: AITER serves a padded-M row or its default kernel), interleaved
(with 1, without 1, with 2, ...) on one pinned GPU, each arm in a private JIT dir that starts empty (each
module is built once per arm from that arm's table; the live JIT dir is never touched). One round trip
writes the "without" table and checks the op_test scripts' argparse, one more runs every sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from ..errors import JobError
from ..outcome.keys import norm_key_value
from ..remote.shell import Cmd, quote, render
from ..session import NodeSession
from ..steps.bench import announced, bench_inputs, call_path, measured_by_call, plan_bench, prepare_ops
from ..steps.compare import split_samples
from ..steps.prepare import SAMPLE_MARK
from ..steps.armargs import arm_args
from .rows import Promoted

ARMS = ("with", "without")
RUN_TIMEOUT_S = 3 * 3600


@dataclass
class Measured:
    """One (variant, live table) group's samples: ident -> {"with": [..], "without": [..]}."""
    samples: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)        # ident -> kernelName of the live row
    not_live: list = field(default_factory=list)       # rows the workspace promoted that the table lacks now
    without_table: str | None = None
    env: dict = field(default_factory=dict)            # arm -> the env its benchmark ran with
    scripts: dict = field(default_factory=dict)        # bench script -> what ran (a patched copy if argparse refused)
    log: str = ""
    paths: object = None                               # the per-arm paths of a tuner benchmark (steps/armargs.py)


ARM_PATHS = {"with": "live", "without": "after"}     # recheck arm -> the steps/armargs.py arm whose paths it takes


def arm_paths(session: NodeSession, variant: str, live: str, without: str, node_dir: str,
              probed: list | None = None) -> SimpleNamespace:
    """The paths steps/armargs.py substitutes, for a recheck: "live" = the live table, "after" = the table
    without the rows under recheck; the shapes CSV and scratch files under the recheck's node dir; ``probed``:
    the tuner's probed flags its --help lists (RC_PROBED), as a job's benchmark has them."""
    facts = session.facts
    return SimpleNamespace(job_dir=f"{node_dir}/{variant}", live_csv=live, tuned_csv=without, tuned_backup=live,
                           untuned_csv=None, aiter_root=facts.aiter_root, meta_root=facts.meta_root,
                           bench_probed=list(probed or ()))


def probed_flags(session: NodeSession, variant) -> list:
    """A --run_config tuner's probed flags on this node (its --help, one probe: cached node-side), e.g. the
    MXFP8 BMM tuner's --w_scale_block, without which its run_config drops the 1x32 rows of -i as its tuning
    does; none for a variant without probed flags (no round trip)."""
    if variant.bench is None or variant.bench.style != "run_config" or not variant.probed_flags:
        return []
    from ..steps.capabilities import HELP_TIMEOUT_S
    from ..steps.tuneargs import probed_argv
    facts = session.facts
    req = {"tune_script": f"{facts.meta_root or facts.aiter_root}/{variant.tune_script}",
           "python": session.target.container.python, "aiter_root": facts.aiter_root, "help_timeout": HELP_TIMEOUT_S}
    return probed_argv(variant.probed_flags, session.call("probe", req, timeout=HELP_TIMEOUT_S + 60).get("tuner_help"), [])


def _arm_env(session: NodeSession, variant, live: str, without: str, gpu: str, node_dir: str) -> dict:
    configured = ({**(session.facts.env or {}), **session.target.container.env}.get(variant.config_env) or "")
    rest = [p for p in configured.split(":")[1:] if p]   # tables AITER merges with the live one stay
    return {arm: {"HIP_VISIBLE_DEVICES": gpu, "AITER_JIT_DIR": f"{node_dir}/jit/{arm}/{variant.name}",
                  variant.config_env: ":".join([table, *rest])}
            for arm, table in (("with", live), ("without", without))}


def measure(session: NodeSession, variant_name: str, rows: list[Promoted], *, live: str, node_dir: str, gpu: str,
            repeats: int) -> Measured:
    """Benchmark ``rows`` (one variant, one live table) ``repeats`` times per arm, interleaved, on the container
    ``session`` discovered."""
    variant, root = session.variant(variant_name), session.facts.aiter_root
    out = Measured(without_table=f"{node_dir}/without/{variant.name}/{live.rsplit('/', 1)[-1]}")
    out.paths = arm_paths(session, variant.name, live, out.without_table, node_dir, probed_flags(session, variant))
    calls = plan_bench(variant, [r.shape for r in rows])
    checked = [c for c in calls if c.checked]
    inputs = bench_inputs(calls, [r.shape for r in rows], variant, out.paths)    # --run_config's -i
    answers = session.call_batch([
        ("recheck_tables", {"live": live, "without": out.without_table, "keys": [r.node_key() for r in rows]}),
        *prepare_ops(checked, root, f"{node_dir}/patched", missing_ok=True),
        *([("write_files", {"files": inputs})] if inputs else [])])
    found = answers[0].get("found") or {}
    prepared = dict(zip(map(id, checked), answers[1:]))
    live_rows = []
    for i, r in enumerate(rows):
        if str(i) in found:
            out.kernels[r.ident()] = found[str(i)]
            live_rows.append(r)
        else:
            out.not_live.append(r)
    # FHMoE (steps/fhmoe_input.py): its benchmark is its tuner, which raises on a table without the row, as the
    # runtime does: the "without" arm cannot be measured, so it is rechecked like a variant without a benchmark
    if not live_rows or variant.bench is None or variant.family == "fhmoe":
        return out
    calls = plan_bench(variant, [r.shape for r in live_rows])
    scripts = {p.script: prepared.get(id(p)) or {} for p in checked}
    if any(s.get("missing") for s in scripts.values()):
        raise JobError(f"the op_test of {variant.name} is missing on the node ({variant.bench.script})",
                       hint="recheck benchmarks with AITER's op_tests: use a develop (source) install")
    out.env = _arm_env(session, variant, live, out.without_table, gpu, node_dir)
    out.scripts = {name: s["script"] for name, s in scripts.items() if s.get("script")}
    python = session.target.container.python
    # a tuner's --run_config (steps/armargs.py): "with" reads the live table, "without" the table without the
    # rows under recheck, each after its default-kernel call (the shapes that table lacks run the default)
    cmds = {arm: [Cmd((python, out.scripts.get(c.script) or call_path(c, out.paths), *args), env=out.env[arm],
                      cwd=root) for c in calls if (args := arm_args(c.args, ARM_PATHS[arm], out.paths)) is not None]
            for arm in ARMS}
    parts = [render(Cmd(("rm", "-rf", *(out.env[a]["AITER_JIT_DIR"] for a in ARMS)))),
             render(Cmd(("mkdir", "-p", *(out.env[a]["AITER_JIT_DIR"] for a in ARMS))))]
    for n in range(1, repeats + 1):
        for arm in ARMS:
            parts.append(f"echo {quote(f'{SAMPLE_MARK} {arm} {n}')}; " + announced(cmds[arm], "2>&1 || rc=$?"))
    # the modules each arm built are not kept (a real one is tens of MB); the "without" table is, for the report
    parts.append(render(Cmd(("rm", "-rf", *(out.env[a]["AITER_JIT_DIR"] for a in ARMS)))))
    ran = session.call("run", {"argv": ["sh", "-c", "rc=0; " + "; ".join(parts) + "; exit $rc"],
                           "timeout_s": RUN_TIMEOUT_S}, timeout=RUN_TIMEOUT_S + 60)
    if ran.get("timed_out"):
        raise JobError(f"the recheck benchmark of {variant.name} did not finish within {RUN_TIMEOUT_S} s (killed)",
                       hint="recheck fewer rows at a time (--variant) or with fewer --repeats")
    text = (ran.get("stdout") or "") + ("\n" + ran["stderr"] if ran.get("stderr") else "")
    out.log = text
    cols = list(variant.key_columns)
    idents = {tuple(norm_key_value(r.key[c]) for c in cols): r.ident() for r in live_rows}
    for r in live_rows:
        out.samples[r.ident()] = {"with": [], "without": []}
    for arm in ARMS:
        for section in split_samples(text, arm):
            for m in measured_by_call(variant.bench, [r.shape for r in live_rows], section,
                                      [c.shapes for c in calls]):
                ident = idents.get(tuple(norm_key_value(m["key"][c]) for c in cols))
                if ident is not None and m["value"] is not None:
                    out.samples[ident][arm].append(float(m["value"]))
    return out
