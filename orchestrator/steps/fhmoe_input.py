"""The FHMoE tuner's way into the job (variants_fhmoe.py): the node and shape refusals, its ``-i`` (the live
table plus an incumbent row per requested token), its command line, and its ``--baseline-only`` benchmark per
arm. Facts: op_tests/tuners/tune_fhmoe.py and aiter/fhmoe.py at ROCm/aiter eb326e45.

The tuner needs, for every ``--tokens`` value, exactly one row of its contract in ``-i`` (it starts its search
from that row's kernels and ``block_m``, and raises "missing HY4 FHMoE rows for tokens" without one). A token
the live table has no row for (the runtime raised for it) gets one: a copy of the contract's row of the nearest
token (the lower one on a tie), its ``token`` replaced. The copy is the incumbent: the tuner keeps it unless a
candidate beats it, so a promoted row is at worst the nearest bucket's kernels, which the runtime then serves
instead of raising.
"""

from __future__ import annotations

import base64
import csv
import io
import math

from ..errors import UsageError
from ..remote.shell import Cmd
from .armargs import FHMOE_SCRATCH as SCRATCH, FHMOE_TABLE as TABLE   # the benchmark's -i / -o, per arm
from ..shapelib.shapefhmoe import CONTRACT_EXTRA, CONTRACTS, TUNABLE, contract_of, padded_m, required_buckets

# tune_fhmoe.py CSV_FIELDS (eb326e45): the header -i must have exactly
FIELDS = ("gfx", "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "shared_expert_id", "act_type",
          "dtype", "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1", "hidden_pad",
          "intermediate_pad", "gate_mode", "block_m", "ksplit", "kernelName1", "kernelName2")
GFX, CU_NUM = "gfx950", 256          # get_gfx_runtime() / get_cu_num() it requires
HINT_NODE = "tune_fhmoe.py tunes on gfx950 with 256 CUs only (an MI355X/MI350X in SPX mode)"


def refuse_node(variant, facts) -> None:
    """Before anything runs: a node the tuner raises on (it checks gfx and CUs only after importing torch)."""
    if variant.family != "fhmoe":
        return
    gfx, cu = facts.get("gfx"), facts.get("cu_num")
    if gfx != GFX or (cu is not None and int(cu) != CU_NUM):
        raise UsageError(f"{variant.name} cannot be tuned on this node ({gfx}, cu_num={cu}): the tuner requires "
                         f"{GFX} with {CU_NUM} CUs", hint=HINT_NODE)


def check_shapes(variant, shapes: list[dict]) -> None:
    """Every shape must be the tuner's contract (HY4 MXFP8) at a token bucket the runtime looks up."""
    if variant.family != "fhmoe":
        return
    for s in shapes:
        name = contract_of(s)
        if name != TUNABLE:
            what = f"the {name} contract" if name else "no FHMoE contract"
            raise UsageError(f"fhmoe token={s.get('token')} dims {s.get('model_dim')}x{s.get('inter_dim')} "
                             f"e{s.get('expert')} topk {s.get('topk')}: {what}; tune_fhmoe.py (ROCm/aiter "
                             "eb326e45) tunes the HY4 MXFP8 contract only", hint="drop the shape: its rows "
                             "cannot be tuned by this AITER (6144x256, 257 experts, topk 9, MXFP8 weights only)")
        t = int(s["token"])
        if padded_m(t) != t:
            raise UsageError(f"fhmoe token={t} is not a bucket the runtime looks up (M={t} reads the row of "
                             f"token {padded_m(t)})", hint=f"ask for token {padded_m(t)}")


def _rows(text: str) -> tuple[list[str], list[dict]]:
    reader = csv.DictReader(io.StringIO(text))
    return list(reader.fieldnames or []), list(reader)


def _is_contract(row: dict) -> bool:
    want = {**{k: str(v) for k, v in CONTRACTS[TUNABLE].items()}, **CONTRACT_EXTRA[TUNABLE]}
    return all(str(row.get(k, "")).strip() == v for k, v in want.items())


def tuner_input(live_text: str | None, shapes: list[dict]) -> tuple[str, list[str]]:
    """(the tuner's -i, notes): the live table with one incumbent row per requested token it lacks."""
    if not live_text:
        raise UsageError("fhmoe: the node has no FHMoE table to start from (tune_fhmoe.py needs an incumbent "
                         "HY4 MXFP8 row per token)", hint="set AITER_CONFIG_FHMOE to a tuned_fhmoe.csv with "
                         "HY4 MXFP8 rows (AITER ships them from eb326e45 on)")
    fields, rows = _rows(live_text)
    if tuple(fields) != FIELDS:
        raise UsageError(f"fhmoe: the live table's columns are not the 22 tune_fhmoe.py reads ({','.join(fields)})",
                         hint="the tuner raises 'unexpected FHMoE columns' on it: point AITER_CONFIG_FHMOE at a "
                              "tuned_fhmoe.csv of this AITER")
    mine = [r for r in rows if _is_contract(r)]
    if not mine:
        raise UsageError("fhmoe: the live table has no HY4 MXFP8 row to start the search from",
                         hint="the tuner tunes existing rows only; use the table this AITER ships")
    have: dict[int, list[dict]] = {}
    for r in mine:
        have.setdefault(int(r["token"]), []).append(r)
    notes, added = [], []
    tokens = sorted({int(s["token"]) for s in shapes})
    for t in tokens:
        if len(have.get(t, [])) > 1:
            raise UsageError(f"fhmoe: the live table holds {len(have[t])} HY4 MXFP8 rows for token {t}",
                             hint="the tuner raises on them ('multiple HY4 FHMoE rows'); remove the duplicate")
        if t in have:
            continue
        donor = min(have, key=lambda h: (abs(math.log2(h) - math.log2(t)), h))
        row = dict(have[donor][0], token=str(t))
        added.append(row)
        notes.append(f"fhmoe token {t}: the live table has no row (the runtime raises for it); the tuner "
                     f"starts from a copy of token {donor}'s row (block_m {row['block_m']}, "
                     f"{row['kernelName1']}, {row['kernelName2']}), the incumbent it must beat")
    notes.append(MEASURED_BY)
    covered = set(have) | set(tokens)
    lower = sorted({b for t in tokens for b in required_buckets(t)} - covered)
    if lower:
        notes.append(f"fhmoe: the runtime also requires token bucket(s) {','.join(map(str, lower))} below the "
                     "tuned ones and the live table lacks them: it keeps raising until they are tuned too "
                     f"(--shapes-csv with those tokens)")
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(FIELDS), lineterminator="\n")
    w.writeheader()
    w.writerows([*rows, *added])
    return out.getvalue(), notes


def live_text(answer: dict, live: str) -> str | None:
    """The live table's text from a ``manifest`` answer asked with ``have={live: None}``."""
    f = (answer.get("files") or {}).get(live) or {}
    data = f.get("data_b64")
    return base64.b64decode(data).decode("utf-8", "replace") if data else None


def tune_command(python: str, script: str, untuned: str, tuned: str, shapes: list[dict], gpus: list[int],
                 cwd: str, extra: list[str]) -> Cmd:
    """``-i`` the prepared table, ``-o`` the staging table (never the live one), ``--tokens``, ``--mp 1``: its
    only flags tune-remote passes (no --batch, --timeout or -k: its argparse has none)."""
    tokens = ",".join(str(t) for t in sorted({int(s["token"]) for s in shapes}))
    argv = (python, script, "-i", untuned, "-o", tuned, "--tokens", tokens, "--mp", "1", *extra)
    return Cmd(argv, env={"HIP_VISIBLE_DEVICES": str(gpus[0])}, cwd=cwd)


def bench_args(shapes: list[dict]) -> tuple[str, ...]:
    """The --baseline-only benchmark of the shapes: the arm's table as -i, a scratch file as -o."""
    tokens = ",".join(str(t) for t in sorted({int(s["token"]) for s in shapes}))
    return ("--baseline-only", "-i", TABLE, "-o", SCRATCH, "--tokens", tokens, "--mp", "1")


MEASURED_BY = ("fhmoe: before and after are measured by the tuner itself (tune_fhmoe.py --baseline-only on the "
               "arm's table: its triton do_bench of the whole two-stage call, ms), not by an independent op_test; "
               "before = the live rows, or the incumbent copy where the live table has none (the runtime raises there)")


def tuner_search(ctx) -> list[dict]:
    """compare: the tuner's own `M=..: X ms -> Y ms` lines of this job's tune log (parsing/fhmoe.py), each said in
    one note and kept in the compare step's info (ms: never set beside a us)."""
    from pathlib import Path

    from ..parsing.fhmoe import tuned_lines
    if ctx.variant.family != "fhmoe":
        return []
    log = ctx.job_dir / "logs" / Path((ctx.job.remote.logs or {}).get("tune", "-")).name
    found = tuned_lines(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else []
    for r in found:
        what = (f"-> ({', '.join(r['winner'])})" if r["changed"]
                else "(no candidate beat the incumbent by --min-improvement-pct: row kept)")
        ctx.job.note(f"fhmoe token {r['token']}: the tuner's own search (measured by the tuner, ms) "
                     f"{r['before_ms']} ms -> {r['after_ms']} ms {what}")
    return found
