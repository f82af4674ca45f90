"""``run``'s inputs checked on this machine before anything remote (a wrong one: one line, exit 2): where to tune,
the variants, the shape sources, the flags that go to the tuner; and the request they make (records.py)."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from ..inventory import Inventory
from ..variants import ALIASES, VARIANTS, get_variant


def required_inputs(variant, node, slurm, logs, shapes_csv, nk, model) -> None:
    """Every required input that is missing, in one message (was: one error at a time)."""
    missing = [what for what, given in (("--variant VARIANT", variant), ("where to tune (--node NODE or --slurm "
                                                                         "CLUSTER)", node or slurm),
                                        ("a shape source (--log PATH, --shapes-csv FILE, --nk N,K or --model "
                                         "config.json)", logs or shapes_csv or nk or model)) if not given]
    if variant is None or len(missing) > 1:   # one of the others alone: its own message below, as before
        raise UsageError("run needs " + "; ".join(missing),
                         hint="e.g. tune-remote run --node NODE --variant a8w8_blockscale --log /path/server.log "
                              "(tune-remote run --help lists them)")


def variant_names(variant: str) -> list[str]:
    """``--variant``'s comma-separated names, aliases resolved."""
    variants = [ALIASES.get(v.strip(), v.strip()) for v in variant.split(",") if v.strip()]
    if not variants:
        raise UsageError(f"--variant {variant!r} names no variant",
                         hint="e.g. --variant a8w8_blockscale, several as a8w8_blockscale,moe_2stages, or auto")
    return variants


def padded_m_applies(variants: list[str], padded_m: bool) -> None:
    """``--padded-m`` names a variant whose runtime pads M (``padded_m_lookup``): for none of the named ones it
    would change nothing, which is said at once instead of being ignored (``auto``: whichever the logs show)."""
    if not padded_m or "auto" in variants:
        return
    named = [get_variant(v) for v in variants]
    if not any(v.padded_m_lookup for v in named):
        with_it = ", ".join(n for n, v in VARIANTS.items() if v.padded_m_lookup)
        raise UsageError(f"--padded-m changes nothing for {', '.join(v.name for v in named)}: its runtime does not "
                         "look M up on AITER's padded-M grid", hint=f"drop --padded-m (it applies to {with_it})")


def where(nodes: list[str], slurm: str | None, slurm_nodes: int | None, dry_run: bool, detach: bool) -> int:
    """Where to tune is said, and the flags that go with it; returns the number of Slurm nodes."""
    if not nodes and not slurm:
        raise UsageError("say where to tune", hint="--node NODE (or a group, or all), or --slurm CLUSTER")
    if slurm_nodes is not None and not slurm:
        raise UsageError("--slurm-nodes applies to --slurm", hint="add --slurm CLUSTER, or leave --slurm-nodes out")
    if dry_run and detach:
        raise UsageError("--detach launches nothing with --dry-run", hint="leave out one of them")
    return slurm_nodes or 1


def several(inv: Inventory, nodes: list[str], variants: list[str]) -> bool:
    """Anything but a single node named as a node and a single named variant: a campaign."""
    return len(nodes) != 1 or nodes[0] not in inv.nodes or len(variants) != 1 or variants == ["auto"]


def campaign_inputs(inv: Inventory, nodes, container, variants, logs, shapes_csv, nk, slurm=None) -> None:
    from .targets import InventorySource
    if slurm:
        inv.cluster(slurm)
        if nodes:
            raise UsageError("--slurm takes its nodes from Slurm", hint="leave out --node (use --slurm-nodes N)")
    else:
        InventorySource(inv, nodes, container).targets()     # unknown node/group, missing --container: exit 2
    if "auto" in variants and len(variants) > 1:
        raise UsageError("--variant auto cannot be combined with named variants",
                         hint="use --variant auto, or list the variants: --variant a8w8_blockscale,moe_2stages")
    for v in variants:
        if v != "auto":
            get_variant(v)
    if "auto" in variants and not logs:
        raise UsageError("--variant auto finds the variants in server logs", hint="add --log PATH")
    if shapes_csv and len(variants) != 1:
        raise UsageError("--shapes-csv holds one variant's shapes", hint="name that one variant with --variant")


def one_container(inv: Inventory, node: str, container: str | None):
    """The node and its container (the one it has, when none is named)."""
    node_spec = inv.node(node)
    if container is None and len(node_spec.containers) == 1:
        container = next(iter(node_spec.containers))
    if container is None:
        raise UsageError(f"node {node!r} has {len(node_spec.containers)} containers; say which",
                         hint="add --container NAME" + (" (one of: " + ", ".join(node_spec.containers) + ")"
                                                        if node_spec.containers else ""))
    return node_spec, node_spec.container(container)


def local_profiles(variant_name: str, profiles) -> None:
    """--profile's local:PATH traces are read here before anything remote: a bad one is one line, exit 2."""
    if not profiles:
        return
    from ..parsing.profile import read_local, split_profile_sources
    local = split_profile_sources(list(profiles))["local"]
    if local:
        read_local(local, get_variant(variant_name).name)


def local_logs(logs) -> None:
    """Every ``local:PATH`` of ``--log`` is on this machine (refused before anything connects, ``auto`` too)."""
    from ..steps.shape_sources import split_log_sources
    for path in split_log_sources(list(logs or ()))["local"]:
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise UsageError(f"log file {path} not found on this machine",
                             hint="local:PATH reads this machine; PATH alone is read inside the container")


def local_inputs(variant_name: str, logs, shapes_csv, nk, model=None, m_preset=None, check_logs=None) -> None:
    from ..steps.shape_sources import check_m_preset, parse_nk
    variant = get_variant(variant_name)
    check_m_preset(m_preset)
    if nk and variant.family != "gemm":
        raise UsageError(f"--nk applies to dense GEMM variants, not {variant.name}",
                         hint="use --shapes-csv or --log for batched and MoE variants")
    local_logs(logs if check_logs is None else check_logs)
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


def parse_gpus(gpus: str | None):
    if not gpus:
        return None
    try:
        out = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3") from None
    if not out or any(g < 0 for g in out):
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3")
    return out


def request_options(variants: list[str], *, logs, profiles, shapes_csv, nk, model, tp, m_preset, max_m, budget,
                    table_from_log, padded_m, gpus, force_cu_num, batch, timeout, tune_arg, splitk, libtype,
                    err_ratio, moe_tuners, q_dtype_w, stall_timeout, repeats, promote_mode, serve_cmd,
                    detach, max_repeats=None, serve_repeats=1, accuracy_cmd=None, max_accuracy_drop=1.0,
                    on_serving_regression="rollback") -> dict:
    """The flags read and checked (a model's config, the GPUs, the budget, the tuner's flags), as
    ``JobRequest.of_run`` takes them."""
    model_cfg = None
    if model:                     # read and checked once, before anything remote (whatever the variants)
        from ..parsing.modelshapes import check_model, read_model
        model_cfg = read_model(model)
        check_model(model_cfg, tp, model)
    gpu_list = parse_gpus(gpus)
    if budget is not None:
        from ..outcome.budget import parse_duration
        parse_duration(budget)            # a bad duration: one line, exit 2, before anything remote
    from ..steps.tuneargs import compose, normalize_q_dtype_w
    tune_args = compose(tune_arg, splitk=splitk, libtype=libtype, err_ratio=err_ratio)
    from ..steps.moetuners import check_request
    check_request(moe_tuners, variants)
    if accuracy_cmd and not serve_cmd:
        raise UsageError("--accuracy-cmd runs beside the serving benchmark", hint="add --serve-cmd CMD")
    if repeats is not None and max_repeats is not None and max_repeats < repeats:
        raise UsageError(f"--max-repeats {max_repeats} is below --repeats {repeats}",
                         hint="--max-repeats bounds the runs the sequential design adds: at least --repeats")
    extra = outcome_options(repeats, max_repeats, serve_cmd, serve_repeats, accuracy_cmd, max_accuracy_drop,
                            on_serving_regression)
    return dict(**extra, logs=list(logs), profiles=list(profiles),
                shapes_csv=os.path.abspath(shapes_csv) if shapes_csv else None,
                nk=list(nk), m_preset=m_preset, gpus=gpu_list, batch=batch, timeout=timeout,
                stall_timeout=stall_timeout, detach=detach, repeats=repeats or SEQUENTIAL_START, promote=promote_mode,
                serve_cmd=serve_cmd, tune_args=tune_args,
                q_dtype_w=normalize_q_dtype_w(q_dtype_w, variants) if q_dtype_w else None, moe_tuners=moe_tuners,
                max_m=max_m, budget=budget, padded_m=padded_m, table_from_log=table_from_log,
                force_cu_num=force_cu_num, model=model_cfg, tp=tp)


SEQUENTIAL_START, SEQUENTIAL_MAX = 5, 30    # issue 37: 5 + 5 .. 30 meets 19/20 A/A jobs clean, 90 % of 5 % gains


def outcome_options(repeats, max_repeats, serve_cmd, serve_repeats, accuracy_cmd, max_accuracy_drop,
                    on_serving_regression) -> dict:
    """The request keys of the sequential design and the serving check, only where they are not off (a fixed
    --repeats, one serve run): so a job asking for neither writes exactly the keys it always did."""
    out: dict = {}
    if repeats is None or max_repeats is not None:      # not given: 5, then more for the undecided
        most = max_repeats if max_repeats is not None else SEQUENTIAL_MAX
        if most > (repeats or SEQUENTIAL_START):
            out["max_repeats"] = most
    if serve_cmd:
        if serve_repeats and serve_repeats != 1:
            out["serve_repeats"] = serve_repeats
        if accuracy_cmd:
            out["accuracy_cmd"], out["max_accuracy_drop"] = accuracy_cmd, max_accuracy_drop
        if on_serving_regression != "rollback":
            out["on_serving_regression"] = on_serving_regression
    return out
