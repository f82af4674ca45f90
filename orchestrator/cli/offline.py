"""Offline commands (no node): shapes, csv diff/merge."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from ..errors import UsageError
from ..variants import get_variant
from .audit import tuned_table
from .base import cli


@cli.command()
@click.argument("logs", nargs=-1)
@click.option("--variant", default=None, help="only this variant")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), help="write one variant's untuned CSV")
@click.option("--json", "as_json", is_flag=True, help="print {variant: [shape, ...]}")
@click.option("--model", type=click.Path(dir_okay=False, exists=True), help="a model's config.json")
@click.option("--tp", type=click.IntRange(1), default=1, show_default=True, help="tensor-parallel size")
@click.option("--m-preset", default=None, help="with --csv: sweep M (pow2, cudagraph, logged, list)")
@click.option("--gfx", default=None, metavar="GFX",
              help="with --model: the serving GPU (gfx942 = MI300X/MI325X/MI308X uses the fnuz FP8 types, "
                   "gfx950 the OCP ones); default gfx950")
@click.option("--ep", is_flag=True, help="with --model: expert parallelism (experts split over --tp ranks: AITER looks the MoE up "
                   "with the rank's expert count and topk-1, #3999)")
@click.option("--fuse-shared-experts", is_flag=True, help="with --model: shared experts fused into the MoE")
@click.option("--gemm-variant", default=None, metavar="VARIANT",
              help="with --model: the GEMM variant the server dispatches FP8 linears to "
                   "(e.g. a8w8_blockscale_bpreshuffle)")
@click.option("--node", default=None, metavar="NODE",
              help="with --model: ask this inventory node's container for its gfx (one round trip) instead of --gfx")
@click.option("--container", default=None, metavar="NAME", help="with --node: the container (if it has several)")
@click.option("--profile", "profiles", multiple=True, metavar="PATH",
              help="a server profile (torch.profiler trace .json/.json.gz with record_shapes, rocprofv3 kernel-trace "
                   "CSV, or a directory of them; local:PATH): shapes with their GPU time (gpu_us, time_share)")
@click.pass_obj
def shapes(env, logs, variant, csv_out, as_json, model, tp, m_preset, gfx, ep, fuse_shared_experts, gemm_variant,
           node, container, profiles=()):
    """Untuned shapes from server logs (or from a model config), as JSON or AITER CSV; no node needed."""
    from ..shapelib import shapelog
    if variant:
        variant = get_variant(variant).name     # an alias (bf16) names its variant (a16w16)
    if not logs and not model and not profiles:
        raise UsageError("give log files or --model config.json", hint="tune-remote shapes server.log --json")
    from ..steps.shape_sources import check_m_preset
    check_m_preset(m_preset)
    found: dict[str, list[dict]] = {}
    counts: dict[str, list[int]] = {}
    warnings: list[str] = []
    if logs:
        for path in logs:
            if not (Path(path).is_file() or Path(path).is_dir()):
                raise UsageError(f"log file {path} not found",
                                 hint="a server log, AITER's capture CSV (*_untuned_*.csv) or a directory of them")
        res = shapelog.parse_files(list(logs), variant)
        found = {k: v for k, v in res.shapes.items()}
        counts = {k: list(v) for k, v in res.counts.items()}
        warnings = list(res.warnings)
        from ..steps.shape_sources import leave_out_refused
        for v, refused in res.unsupported.items():     # aiter#3202: AITER's own tuner could not tune them
            kept, msg = leave_out_refused(found.get(v) or [], refused, v)
            if msg:
                keep = [i for i, s in enumerate(found.get(v) or []) if s in kept]
                found[v] = kept
                counts[v] = [counts[v][i] for i in keep if i < len(counts.get(v) or [])]
                warnings.append(msg)
        gate = get_variant(variant).log_gate_env if variant else None
        if gate and not (res.misses.get(variant) or res.hits.get(variant)):   # e.g. A6W6 (after-v0.1.20 §3)
            warnings.append(f"the logs have no {variant} lookup lines: AITER prints them only with {gate}=1 in "
                            "the server's environment")
    if model:
        from ..parsing.modelshapes import check_model, read_model, shapes_from_model
        from ..steps.shape_sources import sweep_preset
        cfg = read_model(model)
        if node and gfx:
            raise UsageError("give --gfx or --node, not both", hint="--node asks the node for its gfx")
        if node:
            gfx = _gfx_of(env, node, container)
        if gfx is not None and not re.fullmatch(r"gfx\w+", gfx):
            raise UsageError(f"--gfx {gfx!r} is not a gfx name", hint="e.g. --gfx gfx942 (MI300X) or gfx950 (MI355X)")
        if gemm_variant:
            get_variant(gemm_variant)
        kw = dict(gfx=gfx, ep=ep, fuse_shared_experts=fuse_shared_experts, gemm_variant=gemm_variant)
        check_model(cfg, tp, model, **kw)
        for v, rows in shapes_from_model(cfg, tp, m_preset=sweep_preset(m_preset), **kw).items():
            if variant is None or v == variant:
                found.setdefault(v, []).extend(rows)
    elif node:
        raise UsageError("--node applies to --model (it discovers the gfx)", hint="add --model config.json")
    if profiles:
        from ..parsing.profile import add_profile_shapes
        add_profile_shapes(list(profiles), variant, found, counts, warnings)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if csv_out:
        chosen = variant or (next(iter(found)) if len(found) == 1 else None)
        if chosen is None:
            raise UsageError("--csv writes one variant's CSV", hint="add --variant V")
        rows = [{c: x for c, x in r.items() if c not in ("gpu_us", "time_share")} for r in found.get(chosen, [])]
        from ..steps.shape_rules import runtime_lookups
        from ..steps.shape_sources import expand
        family = get_variant(chosen).family
        if m_preset:
            rows = expand(rows, family, m_preset)
        rows, notes = runtime_lookups(rows, family)    # MoE tokens: the power-of-two buckets AITER looks up
        for n in notes:
            click.echo(f"note: {n}", err=True)
        Path(csv_out).write_text(_untuned_text(rows, chosen))
        if not env.quiet:
            click.echo(_csv_note(rows, found.get(chosen, []), chosen, family, csv_out, m_preset, bool(logs)), err=True)
    if as_json or getattr(env, "json", False) or (not csv_out and not sys.stdout.isatty()):
        if found.get("a16w16"):      # earlier releases listed these under "bf16": scripts reading that key still work
            found = {**found, "bf16": found["a16w16"]}
        click.echo(json.dumps(found, indent=None if as_json or getattr(env, "json", False) else 2))
    elif not csv_out:                 # a terminal: words, with how often the logs missed each shape
        _shapes_words(found, counts)


def _csv_note(rows: list[dict], mined: list[dict], variant: str, family: str, path: str, m_preset, from_logs) -> str:
    """How many rows --csv wrote, and why `run` on the same input tunes more (it sweeps M)."""
    note = f"wrote {len(rows)} {variant} shape(s) to {path}"
    if from_logs and not m_preset and family != "moe":
        from ..steps.shape_sources import expand
        swept = len(expand(mined, family, "pow2"))
        if swept != len(rows):
            note += (f": the M values the logs hold; `run` sweeps M (pow2, its default for {family}) and would tune "
                     f"{swept} (--m-preset pow2 writes those)")
    return note


def _shapes_words(found: dict, counts: dict) -> None:
    from ..ui import SHOWN_GROUPS, Ui, shape_groups
    ui = Ui(stream=sys.stdout, tty=True)
    if not found:
        ui.console.print("no untuned shapes in the input")
    for v, rows in found.items():
        miss = counts.get(v) or []
        variant = get_variant(v)
        groups = shape_groups(variant, rows, miss)
        ui.console.print(f"[bold]{v}[/]: {len(rows)} untuned shape(s)" + (f", {sum(miss)} miss(es)" if miss else ""))
        for label, n, m_range, missed in groups[:SHOWN_GROUPS]:
            ui.console.print(f"  {label}: {n} shape(s), M {m_range}" + (f", {missed} miss(es)" if miss else ""))
        if len(groups) > SHOWN_GROUPS:
            ui.console.print(f"  ... and {len(groups) - SHOWN_GROUPS} more group(s) (--json lists every shape)")


def _untuned_text(rows: list[dict], variant: str) -> str:
    """The untuned CSV; ``q_dtype_w`` only where the log gives it: a log of an AITER before v0.1.10 (a8w8
    without it) gives that AITER's ``M,N,K`` form."""
    from ..parsing.untuned import write_untuned_csv
    chosen = variant
    v = get_variant(variant)
    if "q_dtype_w" in v.key_columns and rows and not any("q_dtype_w" in r for r in rows):
        import dataclasses
        chosen = dataclasses.replace(v, untuned_columns=tuple(c for c in v.untuned_columns if c != "q_dtype_w"))
    try:
        return write_untuned_csv(rows, chosen)
    except ValueError as exc:
        raise UsageError(f"--csv: {exc}", hint="the logs mix AITER versions (some lines without q_dtype_w): "
                                               "give one version's logs") from None


def _gfx_of(env, node: str, container: str | None) -> str:
    """The gfx of an inventory node's container: one discover round trip (its errors keep their exit codes)."""
    from ..errors import JobError
    from .audit import node_ctx
    with node_ctx(env, node, container) as (ctx, ref):
        gfx = ctx.call("discover", {"aiter_path": ctx.target.container.aiter_path}).get("gfx")
    if not gfx:
        raise JobError(f"{ref.label} shows no gfx (rocminfo found no GPU agent)", hint="give --gfx gfx942 or gfx950")
    click.echo(f"{ref.label}: {gfx}", err=True)
    return gfx


@cli.group()
def csv():
    """Tuned-CSV tools: diff and merge (best valid row per key)."""


@csv.command("diff")
@click.argument("a", type=click.Path(dir_okay=False, exists=True))
@click.argument("b", type=click.Path(dir_okay=False, exists=True))
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), help="write the whole diff as CSV")
@click.option("--all", "show_all", is_flag=True, help="list every key, not only the rows that differ (at most 40)")
@click.pass_obj
def csv_diff(env, a, b, csv_out, show_all):
    """Per key: us and speedup of B against A (positive = B faster): a summary, then the rows that differ."""
    from ..parsing.csvtools import diff_tuned
    df = diff_tuned(tuned_table(a), tuned_table(b))
    if csv_out:
        df.to_csv(csv_out, index=False)
    counts = {s: int((df["status"] == s).sum()) for s in ("only_b", "only_a", "changed", "same")}
    if getattr(env, "json", False):
        click.echo(df.to_json(orient="records"))
        return
    click.echo(f"{a} -> {b}: {len(df)} key(s): {counts['only_b']} added, {counts['only_a']} removed, "
               f"{counts['changed']} changed (kernel or config), {counts['same']} the same")
    rows = df if show_all else df[df["status"] != "same"]
    if rows.empty:
        return
    shown = rows.drop(columns=["kernelName_a", "kernelName_b"]).head(40)
    shown = shown.assign(status=shown["status"].map({"only_a": "removed", "only_b": "added"}).fillna(shown["status"]))
    click.echo(shown.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.4g}"))
    if len(rows) > 40:
        click.echo(f"... and {len(rows) - 40} more (--csv FILE writes them all, with the kernel names)")


@csv.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="merged CSV to write")
@click.pass_obj
def csv_merge(env, inputs, output):
    """Merge tuned CSVs keeping the best valid row per key (never us=-1; never duplicate keys)."""
    from ..parsing.csvtools import merge_tuned_report
    from ..state import atomic_write
    df, report = merge_tuned_report([tuned_table(p) for p in inputs])
    atomic_write(Path(output), df.to_csv(index=False).encode())
    if getattr(env, "json", False):
        click.echo(json.dumps({"output": output, "rows": len(df), **report}, default=int))
        return
    click.echo(f"wrote {len(df)} rows to {output} (from {report['input_rows']}: {report['duplicates']} "
               f"duplicate(s) resolved, {report['invalid_us']} with invalid us and {report['err_too_high']} "
               "with errRatio over the bound dropped)")
