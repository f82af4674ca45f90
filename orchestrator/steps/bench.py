"""Benchmark plan (one module for before and after): shapes -> op_test invocations -> results per shape.

The argument style comes from the variant's BenchSpec (aiter-formats.md §4); results are matched
back to the requested shapes so that every key column (q_dtype_w, MoE quant fields) is exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..outcome.keys import norm_key_value
from ..errors import UsageError
from ..remote.shell import quote, render
from ..moe_quant import dtype_family, moe_quant_index
from ..variants import BenchSpec, KernelVariant

MOE_GROUP = ("model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a", "q_dtype_w",
             "q_type", "use_g1u1", "doweight_stage1")


@dataclass(frozen=True)
class BenchCall:
    script: str                      # relative to the aiter root (in_meta: to the meta root, as tune scripts)
    args: tuple[str, ...]
    checked: dict                    # flag -> values passed (for the argparse `choices` check)
    shapes: tuple[dict, ...]         # the shapes this call measures
    in_meta: bool = False            # the script is a tune script (csrc/ lives under the meta root)


def call_path(call: BenchCall, remote) -> str:
    """The node path of a call's script: op_tests/ under the aiter root, csrc/ tune scripts under the meta root."""
    root = (remote.meta_root or remote.aiter_root) if call.in_meta else remote.aiter_root
    return f"{root}/{call.script}"


def _a8w8_q(shape: dict) -> str:
    return "fp8" if dtype_family(str(shape.get("q_dtype_w", "torch.int8"))) == "fp8" else "i8"


def _torch_short(dtype) -> str:
    """'torch.bfloat16' -> 'bf16' (the op_tests' dtypes.str2Dtype spelling)."""
    d = str(dtype).replace("torch.", "").strip("'\" ")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}.get(d, d)


def _group(shapes, key):
    groups: dict = {}
    for s in shapes:
        groups.setdefault(key(s), []).append(s)
    return groups


def check_moe_quant(variant: KernelVariant, shapes: list[dict], quant_max: int) -> None:
    """Refuse (one line) a MoE shape whose quant type the node's op_test cannot run: benchmarked without
    ``-q`` it would run every quant type and be matched on its dims only (issue 30)."""
    if variant.bench is None or variant.bench.style != "moe":
        return
    for s in shapes:
        q = moe_quant_index(str(s["q_type"]), str(s["q_dtype_a"]), str(s["q_dtype_w"]))
        if q is None or q > quant_max:
            what = f"{s['q_type']} {s['q_dtype_a']}/{s['q_dtype_w']}"
            raise UsageError(f"token={s['token']} dims {s['model_dim']}x{s['inter_dim']}: the node's "
                             f"op_tests/test_moe_2stage.py cannot benchmark {what} "
                             + (f"(its -q stops at {quant_max}, this is -q {q})" if q is not None
                                else "(no l_quant entry)"),
                             hint="drop the shape, or tune on an AITER whose MoE test has it "
                                  "(l_quant 8 a16wi4 and 9 MXFP8 are at HEAD, after v0.1.20)")


# What a real node charges (issue 26; sim/costs.py simulates the same): starting one op_test process
# (python + import torch + aiter + HIP init) vs measuring one more shape inside a running one (tensors,
# warm-up and timed iterations of a kernel of a few ms, the reference check)
PROCESS_START_S = 4.2
EXTRA_SHAPE_S = 0.3


BUILD_S = 57.9          # a cold build of a CK module of a tuned table (~27 instances, issue 26)


REBUILD_S = 12.0        # a module not generated from a tuned table (module_aiter_enum-like; sim/costs.py SMALL_MODULE_S)


def fixed_cost(variant: KernelVariant, shapes: list[dict], repeats: int, modules: int = 1) -> dict:
    """A job's fixed cost on a real node as the plan decides it: benchmark processes (calls per arm x runs x
    2 arms + the engaged-at-runtime check), the tuner's start, and the minimum of JIT builds (each module
    of the table once in the after arm, the tuner's *_tune module; the before arm reuses a current live
    module); ``minutes`` projects them at the costs above.

    Style ``run_config``: each call is a tuner process (python + torch + aiter + HIP init, as an op_test's):
    two per arm and run (without a CSV, then with the arm's table), the before arm's second only where the live
    table exists (not counted: this is the minimum), two in the engaged check. ``--run_config <CSV>`` sets
    AITER_REBUILD = 2 and rebuilds the operator's ``modules`` in each such process
    (base_tuner._set_config_env_for_run_config), not once per arm. With ``run_config_table`` False: one
    call per arm and run (no CSV: it reads the arm's AITER_CONFIG_*), one in the engaged check, no rebuild."""
    calls = len(plan_bench(variant, shapes))
    if variant.bench is not None and variant.bench.style == "run_config":
        # the after arm's table call(s); none where the no-CSV call reads the arm's table (run_config_table False)
        with_csv = calls - 1 if calls and variant.bench.run_config_table else 0
        processes = (calls + calls - with_csv) * repeats + calls + 1
        rebuilds = (with_csv * repeats + with_csv) * modules
        return {"processes": processes, "builds": rebuilds + 1, "calls_per_run": calls,
                "minutes": (processes * PROCESS_START_S + rebuilds * REBUILD_S + BUILD_S) / 60}
    processes = calls * 2 * repeats + (1 if calls else 0) + 1
    builds = (modules if calls else 0) + 1
    return {"processes": processes, "builds": builds, "calls_per_run": calls,
            "minutes": (processes * PROCESS_START_S + builds * BUILD_S) / 60}


def fixed_cost_line(variant: KernelVariant, shapes: list[dict], repeats: int, modules: int = 1) -> str:
    c = fixed_cost(variant, shapes, repeats, modules)
    if variant.bench is not None and variant.bench.style == "run_config" and not variant.bench.run_config_table:
        calls = (f"{c['calls_per_run']} tuner --run_config call(s) per arm and run x {repeats} run(s) x 2 arms, "
                 "without a CSV: each reads the arm's table")
    elif variant.bench is not None and variant.bench.style == "run_config":
        calls = (f"{c['calls_per_run']} tuner --run_config call(s) per arm and run x {repeats} run(s) x 2 arms (the "
                 "before arm's table call not counted: only where a live table exists)")
    else:
        calls = f"{c['calls_per_run']} op_test call(s) per arm and run x {repeats} run(s) x 2 arms"
    return (f"fixed cost: {c['processes']} process starts ({calls}, the tuner, the engaged check), {c['builds']} "
            f"JIT build(s) at least; ~{c['minutes']:.1f} min on a real node")


def one_process_is_cheaper(calls: int, nk_pairs: int, shapes: list[dict]) -> bool:
    """m_nk scripts cross every -m with every -nk: ONE call for all the shapes measures the pairs nobody
    asked for too (their rows are dropped: results are matched to the requested shapes). Worth it when
    those extra shapes cost less than the process starts they save."""
    ms = {int(s["m"]) for s in shapes}
    extra = len(ms) * nk_pairs - len(shapes)
    return extra * EXTRA_SHAPE_S < (calls - 1) * PROCESS_START_S


def plan_bench(variant: KernelVariant, shapes: list[dict]) -> list[BenchCall]:
    bench = variant.bench
    if bench is None or not shapes:
        return []
    extra = tuple(bench.extra_args)
    calls: list[BenchCall] = []
    if bench.style == "m_nk":
        # the script crosses every -m with every -nk: one call per set of (N,K) pairs sharing the same Ms,
        # so no combination nobody asked for is measured (review C-17)
        nk = lambda s: f"{s['n']},{s['k']}"  # noqa: E731
        ms_of: dict[str, set] = {}
        for s in shapes:
            ms_of.setdefault(nk(s), set()).add(int(s["m"]))
        by_ms: dict[tuple, list[str]] = {}
        for pair, ms_set in ms_of.items():
            by_ms.setdefault(tuple(sorted(ms_set)), []).append(pair)
        if len(by_ms) > 1 and one_process_is_cheaper(len(by_ms), len(ms_of), shapes):
            by_ms = {tuple(sorted({int(s["m"]) for s in shapes})): list(ms_of)}
        for ms, nks in by_ms.items():
            args = ("-m", *map(str, ms), "-nk", *nks, *extra)
            group = tuple(s for s in shapes if nk(s) in nks)
            calls.append(BenchCall(bench.script, args, {"-m": [str(m) for m in ms]}, group))
    elif bench.style == "mnk":
        quant = "quantDtype" in bench.key_columns
        for q, group in _group(shapes, _a8w8_q if quant else (lambda s: None)).items():
            mnk = [f"{s['m']},{s['n']},{s['k']}" for s in group]
            args = ("-mnk", *mnk, *(("-q", q) if quant else ()), *extra)
            calls.append(BenchCall(bench.script, args, {}, tuple(group)))
    elif bench.style == "mnk_typed":
        # one call per (dtype, outdtype, bias): `-d D -o O [-b]`; the script's tgemm call has no scale or
        # preshuffled weight, so scaleAB/bpreshuffle shapes are tuned but not benchmarked
        plain = [s for s in shapes if str(s.get("scaleab")) != "True" and str(s.get("bpreshuffle")) != "True"]
        typed = lambda s: (_torch_short(s["dtype"]), _torch_short(s["outdtype"]), str(s["bias"]) == "True")  # noqa: E731
        for (d, o, bias), group in _group(plain, typed).items():
            mnk = [f"{s['m']},{s['n']},{s['k']}" for s in group]
            args = ("-mnk", *mnk, "-d", d, "-o", o, *(("-b",) if bias else ()), *extra)
            calls.append(BenchCall(bench.script, args, {}, tuple(group)))
    elif bench.style == "s_mnk":
        for b, group in _group(shapes, lambda s: int(s["b"])).items():
            mnk = [f"{s['m']},{s['n']},{s['k']}" for s in group]
            args = ("-b", str(b), "-s", *mnk, *extra)
            calls.append(BenchCall(bench.script, args, {"-b": [str(b)]}, tuple(group)))
    elif bench.style == "moe":
        for cfg, group in _group(shapes, lambda s: tuple(str(s[k]) for k in MOE_GROUP)).items():
            s0 = group[0]
            q = moe_quant_index(str(s0["q_type"]), str(s0["q_dtype_a"]), str(s0["q_dtype_w"]))
            tokens = sorted({int(s["token"]) for s in group})
            act = str(s0["act_type"]).split(".")[-1].lower()
            args = ("-t", *map(str, tokens), "-dim", f"{s0['model_dim']},{s0['inter_dim']}",
                    "-e", str(s0["expert"]), "-k", str(s0["topk"]),
                    *(("-q", str(q)) if q is not None else ()),
                    "-a", act, "-s", "t" if int(s0["doweight_stage1"]) else "f", "-p", "f", *extra)
            calls.append(BenchCall(bench.script, args, {"-t": [str(t) for t in tokens]}, tuple(group)))
    elif bench.style == "run_config":       # the tuner's own --run_config (steps/armargs.py paths)
        # two calls per arm: without a CSV (the tuner's default kernel for every shape of -i), then with the
        # arm's table (its rows through the production operator), whose values win per shape (measured_by_call)
        # run_config_table False: the no-CSV call alone, it reads the arm's AITER_CONFIG_* (prepare's _arm_env)
        # the tuner's probed flags its --help lists (RC_PROBED, prepare), as its tune command has them
        from .armargs import RC_PROBED, RC_SCRATCH, RC_SHAPES, RC_TABLE
        head = ("-i", RC_SHAPES, "-o", RC_SCRATCH, *((RC_PROBED,) if variant.probed_flags else ()), "--run_config")
        for args in ((*head, *extra), (*head, RC_TABLE, *extra))[:2 if bench.run_config_table else 1]:
            calls.append(BenchCall(bench.script, args, {}, tuple(shapes), in_meta=True))
    elif bench.style == "fhmoe_baseline":   # the FHMoE tuner's --baseline-only, one call (steps/fhmoe_input.py)
        from .fhmoe_input import bench_args
        calls.append(BenchCall(bench.script, bench_args(shapes), {}, tuple(shapes)))
    else:  # pragma: no cover - registry is data; a new style must be added here once
        raise ValueError(f"unknown bench style {bench.style!r}")
    return calls


# style "run_config" (aiter/utility/base_tuner.py run(), from v0.1.13; the tuners' run_config overrides, e.g.
# csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py 610d1e8e, csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py 59663079)
RUN_CONFIG_MEASURED_BY = (
    "{name}: before and after are measured by the tuner itself (--run_config: its E2E(us) of the production "
    "operator), not by an op_test. Each arm runs it twice: without a CSV (the tuner's default kernel for every "
    "shape), then with the arm's table (before: the live table where it exists, after: the staging table; "
    "AITER_CONFIG_* is set to that one file, so tables AITER would merge with it are left out, and every row of "
    "it is timed): a shape the table has its exact row for takes that row's time, any other the default "
    "kernel's (the runtime's padded-shape or bucket fallback rows are not used)")
# run_config_table False (the MXFP8 BMM tuner: csrc/opus_gemm/opus_bmm_mxscale_tune.py OpusBmmMxscaleTuner.run_config,
# _default_benchmark -> aiter/ops/batched_gemm_op_a8w8.py batched_gemm_a8w8_mxscale_bpreshuffle; ROCm/aiter index
# ids 70216553721, 70397090998)
RUN_CONFIG_DISPATCH_MEASURED_BY = (
    "{name}: before and after are measured by the tuner itself (--run_config without a CSV: its E2E(us) of the "
    "production operator, which looks each shape up in the table AITER_CONFIG_* names, padded M included, as the "
    "server does), not by an op_test. Each arm runs it once with its own AITER_CONFIG_* (before: the live "
    "table, after: the staging table, with the other entries of a configured list; tables the runtime merges "
    "only when it is unset, model_configs/, are left out): a shape the table has no row for takes the "
    "operator's default kernel. Its --run_config <CSV> is not run: it times each row's kernel through the raw "
    "launcher, not the dispatch")


def measured_by_note(variant: KernelVariant) -> str:
    """The job's note on what a run_config benchmark measures (prepare), chosen by the BenchSpec."""
    text = RUN_CONFIG_MEASURED_BY if variant.bench.run_config_table else RUN_CONFIG_DISPATCH_MEASURED_BY
    return text.format(name=variant.name)


def run_config_gate(variant: KernelVariant, calls: list[BenchCall], help_text: str | None) -> tuple[list, str]:
    """(calls, why none): no --run_config call where the node's tuner --help (probed) lists no --run_config
    (base_tuner before v0.1.13: its argparse would refuse every call with exit 2)."""
    if calls and variant.bench.style == "run_config" and help_text and "--run_config" not in help_text:
        return [], (f"{variant.name}: the node's tuner has no --run_config (its --help lists none): tuning only, "
                    "no before/after comparison")
    return calls, ""


def bench_inputs(calls: list[BenchCall], shapes: list[dict], variant: KernelVariant, remote) -> list[dict]:
    """``write_files`` entries the calls read: --run_config's -i, every shape of the job (the store's too)."""
    from ..parsing.untuned import write_untuned_csv
    from .armargs import RC_SHAPES, arm_args
    if not any(RC_SHAPES in c.args for c in calls):
        return []
    return [{"path": arm_args((RC_SHAPES,), "before", remote)[0], "backup_dir": None,
             "content": write_untuned_csv(shapes, variant.name)}]


def match_results(bench: BenchSpec, shapes: list[dict], results: list[dict]) -> list[dict]:
    """Attach each parsed result to the requested shape it measures.

    ``results`` come from parsing.bench.bench_results: [{"key": {...}, "value": float|None}].
    Returns [{"key": full shape, "value": float|None}] for requested shapes that were measured.
    """
    out = []
    for r in results:
        rkey = {k: norm_key_value(v) for k, v in r["key"].items()}
        for s in shapes:
            if all(k not in s or norm_key_value(s[k]) == v for k, v in rkey.items() if k != "q_dtype_w") and (
                "q_dtype_w" not in rkey or "q_dtype_w" not in s
                or dtype_family(str(s["q_dtype_w"])) == dtype_family(rkey["q_dtype_w"])
            ):
                out.append({"key": dict(s), "value": r["value"]})
                break
    return out


# Output columns that tell apart rows measuring the same dims under another quant config (test_moe_2stage
# prints AQDType/WQDType, aiter-formats.md §4.6). They are not comparison keys, but one bench log holds
# the tables of every call of a job, so e.g. QuantType.No (bf16) and per_1x128 (fp8) rows at the same
# token/dims must not collapse into one key.
_ROW_DTYPE_COLUMNS = {"AQDType": "q_dtype_a", "WQDType": "q_dtype_w"}


def measured(bench: BenchSpec, shapes: list[dict], rows: list[dict]) -> list[dict]:
    """``bench_results`` + ``match_results`` over parsed output rows, per quant-dtype partition."""
    from ..parsing.bench import bench_results

    parts: dict[tuple, list[dict]] = {}
    for row in rows:
        tag = tuple(dtype_family(str(row[c])) if row.get(c) is not None else None for c in _ROW_DTYPE_COLUMNS)
        parts.setdefault(tag, []).append(row)
    out = []
    for tag, part in parts.items():
        wanted = [s for s in shapes
                  if all(t is None or col not in s or dtype_family(str(s[col])) == t
                         for t, col in zip(tag, _ROW_DTYPE_COLUMNS.values()))]
        out.extend(match_results(bench, wanted, bench_results(part, bench)))
    return out


CALL_MARK = "== tune-remote call"   # one line before each benchmark call's output: `<mark> <i>` (C-19)
_CALL_LINE = re.compile(rf"^{re.escape(CALL_MARK)} (\d+)\s*$", re.M)


def prepare_ops(calls: list[BenchCall], root: str, patched_dir: str,
                missing_ok: bool = False) -> list[tuple[str, dict]]:
    """The helper's ``bench_prepare`` op per call whose argparse is checked (patched copy if it refuses);
    ``missing_ok``: a script that is not there answers ``missing`` instead of failing the batch."""
    return [("bench_prepare", {"script": f"{root}/{c.script}", "args": c.checked, "patched_dir": patched_dir,
                               **({"missing_ok": True} if missing_ok else {})}) for c in calls]


def announced(cmds: list, tail: str) -> str:
    """Every benchmark command in one shell line, each after its call mark; ``tail`` follows each ( ... )."""
    return "; ".join(f"echo {quote(f'{CALL_MARK} {i}')}; ( {render(c)} ) {tail}" for i, c in enumerate(cmds))


def measured_by_call(bench: BenchSpec, shapes: list[dict], text: str,
                     call_shapes: list | None = None) -> list[dict]:
    """``measured`` per benchmark call: ``text`` is cut at ``CALL_MARK`` lines and section ``i`` is matched
    only against ``call_shapes[i]`` (the shapes call i measures), so two MoE configs with the same dims but
    another activation, weighting, g1u1 or quant type (other calls) keep their own results (review C-19).
    A log without call markers (an older job) is matched as one section against ``shapes``."""
    from ..parsing.bench import parse_bench_log

    found = list(_CALL_LINE.finditer(text))
    if not found:
        return measured(bench, shapes, parse_bench_log(text, bench))
    out: dict[tuple, dict] = {}
    for j, m in enumerate(found):
        section = text[m.end():found[j + 1].start() if j + 1 < len(found) else len(text)]
        i = int(m.group(1))
        group = list(call_shapes[i]) if call_shapes is not None and i < len(call_shapes) else shapes
        # a shape two calls of one sample measure (run_config: default kernel, then the arm's table): the later
        # call's value is the sample's; no other style measures a shape twice in one sample
        for r in measured(bench, group, parse_bench_log(section, bench)):
            out[tuple(sorted((c, str(v)) for c, v in r["key"].items()))] = r
    return list(out.values())
