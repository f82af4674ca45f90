"""The merged ``after`` is what the GPU kind serves (issue 28): measured again after the promotion across a kind.

A target's ``after`` was measured with its own staging table, before other targets of its kind promoted their
rows onto its live table (spread.py). Two kinds of its shapes may be served otherwise once the campaign is
over: a shape its own tuner found no kernel for (the runtime now finds a padded-M row another target tuned,
or the row it falls back to), and a shape whose key another target promoted too (its row replaced). For
each target that received rows from another target, those shapes are benchmarked once more as a fresh
process with the live configuration (the engaged check's request: one op_test process per call, in one
round trip per target), and the merged comparison.csv takes that value as ``after``. A shape that could not
be measured again keeps its ``after`` and its verdict says why in words.
"""

from __future__ import annotations

from ..context import Ctx, Settings
from ..errors import TuneRemoteError
from ..outcome.compare_values import speedup_pct
from ..outcome.keys import norm_key_value
from ..state import JobState, Status, Workspace
from ..ui import Ui
from .targets import Runner, TargetRef


def _key(shape: dict, cols: list[str]) -> tuple:
    return tuple(norm_key_value(shape[c]) for c in cols)


def _peers(sub: JobState) -> list[dict]:
    return [p for p in sub.remote.peer_promotions or [] if p.get("promoted") and not p.get("rolled_back")]


def received(sub: JobState) -> bool:
    """Rows of another target of its kind are in its live table now (a rollback took them out: its own
    ``after`` is what it serves again)."""
    return bool(_peers(sub))


def wanted(sub: JobState, cols: list[str]) -> dict[tuple, str]:
    """{key: why} for the shapes of ``sub`` whose served row may differ from the one its ``after`` measured:
    empty unless another target of its kind promoted rows onto it."""
    peers = _peers(sub)
    if not peers:
        return {}
    n = len(cols)
    replaced = {tuple(norm_key_value(v) for v in k[-n:]) for p in peers for k in p.get("promoted") or []}
    no_kernel = {_key(s, cols) for s in (sub.step_state("compare").info.get("tuned") or {}).get("no_kernel") or []
                 if all(c in s for c in cols)}
    out = {}
    for s in sub.shapes:
        k = _key(s, cols)
        if k in replaced:
            out[k] = "its row replaced by another target's"
        elif k in no_kernel:
            out[k] = "no kernel found on its own target"
    return out


def remeasure(job: JobState, subws: Workspace, runner: Runner, subs: list[JobState], ui) -> dict:
    """``{sub job id: [{"key": {...}, "why", "value" | "not_measured", "served"}]}``, saved in the campaign's
    state by the caller (once: a resumed campaign does not measure again)."""
    from ..steps import engage
    from ..steps.bench import measured_by_call, plan_bench
    out: dict[str, list] = {}
    for sub in subs:
        if sub.state != Status.SUCCEEDED or not sub.remote.live_csv:
            continue
        target = None
        try:
            ctx = Ctx(job=sub, workspace=subws, target=None, settings=Settings(), ui=Ui(quiet=True))
            cols = list(ctx.variant.key_columns)
            want = wanted(sub, cols)
            if not want:
                continue
            rows = [{"key": {c: s[c] for c in cols}, "why": want[_key(s, cols)]}
                    for s in sub.shapes if _key(s, cols) in want]
            out[sub.job_id] = rows
            keys = [list(r["key"].values()) for r in rows]
            target = ctx.target = runner.open(TargetRef(sub.node, sub.container))
            req = engage.run_request(ctx, keys)
            if req is None:
                raise _NotMeasured("no benchmark of these shapes could run on its node")
            ran = ctx.call("run", req, timeout=3700)
            text = (ran.get("stdout") or "") + ("\n" + ran["stderr"] if ran.get("stderr") else "")
            (subws.job_dir(sub.job_id) / "after_promotion_across_kind.log").write_text(text, encoding="utf-8")
            shapes = [r["key"] for r in rows]
            calls = plan_bench(ctx.variant, shapes)
            values = {_key(r["key"], cols): r["value"]
                      for r in measured_by_call(ctx.variant.bench, shapes, text, [c.shapes for c in calls])}
            hits = engage.lookup_hits(text)
            for r in rows:
                value = values.get(_key(r["key"], cols))
                if value is None:
                    r["not_measured"] = "the fresh process printed no value for it"
                    continue
                r["value"] = value
                h = hits.get(engage.lookup_key(ctx.variant, r["key"]) or ())
                r["served"] = served(h, int(r["key"]["m"]) if "m" in r["key"] else None)   # MoE: token, no hit
        except (TuneRemoteError, _NotMeasured) as exc:
            why = exc.one_line() if isinstance(exc, TuneRemoteError) else str(exc)
            for r in out.get(sub.job_id) or []:
                r.setdefault("not_measured", why)
        finally:
            if target is not None:
                target.close()
        for r in out.get(sub.job_id) or []:
            ui.event(f"{sub.node}/{sub.container} {sub.variant} "
                     + " ".join(f"{c}={v}" for c, v in r["key"].items()) + " after the promotion across its kind: "
                     + (f"{r['value']} ({r['served']})" if "value" in r else f"not measured again: {r['not_measured']}"))
    return out


class _NotMeasured(Exception):
    pass


def served(h: dict | None, m: int | None) -> str:
    """What served a shape in the fresh process, from its lookup line (``engage.lookup_hits``)."""
    if not h:
        return "the live table"
    if not h["hit"]:
        return "the default kernel (no tuned row matched)"
    if h.get("row"):            # an MX asm GEMM's padded match (M/N to 256, K to 128): the row it names
        return "the padded row M:%d N:%d K:%d" % tuple(h["row"])
    return "its own row" if h["padded_m"] in (None, m) else f"the padded-M row M={h['padded_m']}"


def apply(df, node: str, rows: list[dict], higher_is_better: bool) -> list[str]:
    """The merged comparison frame (str columns) with ``after``, ``speedup_pct`` and ``verdict`` of ``rows`` on
    ``node`` replaced; one line per shape for the report."""
    lines = []
    for r in rows:
        mask = df["node"] == node
        for c, v in r["key"].items():
            if c in df:
                mask &= df[c].map(norm_key_value) == norm_key_value(v)
        if not mask.any():
            continue
        i = df.index[mask][0]
        what = " ".join(f"{c}={v}" for c, v in r["key"].items())
        if "value" not in r:
            df.loc[i, "verdict"] = (f"not measured again after the promotion across its GPU kind "
                                    f"({r['why']}): {r['not_measured']}")
            lines.append(f"{node} {what}: {r['why']}; not measured again ({r['not_measured']}), `after` as "
                         "measured on its own target")
            continue
        old = df.loc[i, "after"]
        before = _num(df.loc[i, "before"])
        sp = speedup_pct(before, r["value"], higher_is_better)
        df.loc[i, "after"] = str(r["value"])
        df.loc[i, "speedup_pct"] = "" if sp is None else str(sp)
        if "after_n" in df:
            df.loc[i, "after_n"] = "1"
        if "p_value" in df:           # the samples it tested are not what is served now
            df.loc[i, "p_value"] = ""
        if "verdict" in df:
            thr = _num(df.loc[i, "threshold_pct"]) if "threshold_pct" in df else None
            thr = 1.0 if thr is None else thr
            df.loc[i, "verdict"] = ("missing" if sp is None else "improved" if sp > thr
                                    else "regressed" if sp < -thr else "within_noise")
        lines.append(f"{node} {what}: {r['why']}; served by {r['served']}: after {old or '-'} -> {r['value']} "
                     f"(measured again after the promotion across its kind)")
    return lines


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
