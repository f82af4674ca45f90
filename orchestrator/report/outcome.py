"""The report's outcome sections (issue 7): how verdicts were reached, what was promoted, and whether a
fresh process now uses the promoted rows ("engaged at runtime"). Pure: context dict in, view dict out.

Context keys read (all optional)::

    promotion: {"mode": "proven"|"all"|"none", "live", "backup", "promoted": [[key text]], "added",
                "replaced", "skipped_duplicates": [[...]], "modules": {so: moved-to or None},
                "rolled_back": bool, "rolled_back_at": epoch s,
                "rounds": [{"mode", "time", "promoted", "added", "replaced", "backup"}] (a later promote adds one)}
    outcome_changes: [{"command", "at": epoch s, "what"}]   commands run after the job that changed its outcome
    engaged:   {"engaged": int, "total": int, "log": path,
                "shapes": [{"key": {...}, "engaged": bool, "reason": str, "hit": bool|None,
                            "value", "before", "after"}]}
    serving:   {"command": str, "rows": [{"metric", "before", "after", "change_pct"}] or None}
               (rows None: the figures are missing; the notes say why)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..outcome.verdict import ALPHA, MIN_GAIN_PCT, SINGLE_SAMPLE_PCT
from .fmt import fmt_time


def verdict_method(summary: Mapping[str, Any]) -> str:
    samples = summary.get("samples") or {}
    noise = summary.get("pooled_noise_pct")
    noise_txt = "not measurable (one run per arm)" if noise is None else f"{noise:g}% (relative sd, pooled)"
    return (f"Verdicts rest on {samples.get('before', '?')} before and {samples.get('after', '?')} after runs per "
            f"shape (interleaved, one pinned GPU); before/after are medians. Node noise: {noise_txt}. "
            f"improved/regressed = the median gain is at least max({MIN_GAIN_PCT:g}%, "
            f"{summary.get('verdict_k') or 3.75:g} x noise x sqrt(1/runs before + 1/runs after)) -- a bar that "
            f"shrinks as runs are added and grows with the job's shape count -- "
            f"(or {SINGLE_SAMPLE_PCT:g}% with one run) and a one-sided exact Mann-Whitney U test "
            f"says so (p <= {ALPHA:g}, or the smallest p the run count allows); the rest is within_noise. "
            + how_sure(summary) + expected_gain(summary))


def expected_gain(summary: Mapping[str, Any]) -> str:
    """With ``run --profile`` (issue 38): what the rows proven faster should bring end to end (Amdahl)."""
    share, gain = summary.get("profiled_time_share"), summary.get("expected_e2e_gain_pct")
    if share is None or gain is None:
        return ""
    return (f" Expected end-to-end gain: these shapes are {100 * share:.1f} % of the profiled GPU time; the rows "
            f"proven faster should cut the server's GPU time by about {gain:.2f} % (Amdahl: the sum of each "
            "shape's time_share x the fraction of its time saved).")


def how_sure(summary: Mapping[str, Any]) -> str:
    """The job's confidence in plain words (issue 37): noise, runs, expected false verdicts."""
    exp = summary.get("expected_false_verdicts")
    if exp is None:
        return ""
    shapes = summary.get("compared") or summary.get("shapes") or 0
    odds = f"about 1 job in {round(1 / exp):,}" if 0 < exp < 0.5 else f"about {exp:.2g} per job"
    return (f"How sure: with this node's noise and these runs, a job of {shapes} shapes where nothing changed "
            f"would report a false improved or regressed row in {odds} "
            f"(expected false verdicts {exp:.3g}, an upper estimate); each row's gain_lo_pct..gain_hi_pct is "
            "its Hodges-Lehmann gain interval (gain_conf_pct % confidence, exact, distribution-free).")


def _label(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in key.items())


def outcome_view(ctx: Mapping[str, Any], table_cls) -> dict[str, Any]:
    """``promotion_lines``, ``engaged_headline``, ``engaged`` (a report Table) for the templates."""
    v: dict[str, Any] = {"has_promotion": False, "promotion_lines": [], "engaged_headline": "",
                         "engaged": None}
    promo = dict(ctx.get("promotion") or {})
    if not promo:
        return v
    v["has_promotion"] = True
    mode = promo.get("mode") or "proven"
    lines = []
    if mode == "none" and not promo.get("promoted"):
        lines.append("--promote none: the live table and the live JIT modules were left untouched; "
                     "`tune-remote promote JOB` promotes the proven rows later.")
    if promo.get("rolled_back"):
        lines.append(f"Rolled back at {fmt_time(promo.get('rolled_back_at'))}: the live table "
                     f"{promo.get('live') or '?'} and its JIT module are as before the job's first promotion; none "
                     "of the rows below is in the live table now.")
    rounds = promo.get("rounds") or ([promo] if promo.get("promoted") else [])
    if mode != "none" or rounds:
        n = len(promo.get("promoted") or [])
        lines.append((f"Mode {(rounds[0].get('mode') if len(rounds) == 1 else None) or mode}: " if len(rounds) < 2
                      else "")
                     + f"{n} row(s) merged into the live table {promo.get('live') or '?'} "
                     f"({promo.get('added', 0)} added, {promo.get('replaced', 0)} replaced"
                     + (f", in {len(rounds)} promotions" if len(rounds) > 1 else "")
                     + "); rows judged regressed or within_noise are never promoted in mode proven.")
        if len(rounds) > 1:
            for i, r in enumerate(rounds, 1):
                lines.append(f"Promotion {i} ({r.get('mode') or mode}, {fmt_time(r.get('time'))}): "
                             f"{len(r.get('promoted') or [])} row(s), {r.get('added', 0)} added, "
                             f"{r.get('replaced', 0)} "
                             f"replaced; backup of the live table before it: {r.get('backup') or 'none (no table)'}.")
        if promo.get("backup"):
            lines.append(f"Backup of the live table before {'the first ' if len(rounds) > 1 else ''}promotion: "
                         f"{promo['backup']} (`tune-remote rollback JOB` restores it byte for byte"
                         + (", undoing every promotion of the job)." if len(rounds) > 1 else ")."))
        for so, moved in (promo.get("modules") or {}).items():
            lines.append(f"Live JIT module {so}: " + (f"moved aside to {moved} (renamed, never rewritten: a "
                         "running server keeps its mapped copy and needs a restart to use the new rows)"
                         if moved else "was not built yet"))
        for k in promo.get("skipped_duplicates") or []:
            lines.append(f"Not promoted, key already in another table AITER merges: {', '.join(map(str, k))}")
    v["promotion_lines"] = lines
    eng = dict(ctx.get("engaged") or {})
    if eng.get("unchecked"):        # no benchmark could run again (steps/engage.unplanned)
        v["engaged_headline"] = f"Engaged at runtime: not checked: {eng['unchecked']}."
    elif eng:
        v["engaged_headline"] = (("Before the rollback: " if promo.get("rolled_back") else "")
                                 + f"Engaged at runtime: {eng.get('engaged', 0)}/{eng.get('total', 0)} promoted "
                                 "shapes hit their tuned row in a fresh process (live configuration, "
                                 "AITER_LOG_TUNED_CONFIG=1, no tune-remote environment).")
        t = table_cls(["shape", "engaged", "lookup hit", "fresh process", "before", "after", "reason"],
                      [False, False, False, True, True, True, False])
        for s in eng.get("shapes") or []:
            hit = "" if s.get("hit") is None else ("yes" if s["hit"] else "no")
            if s.get("hit") and (s.get("module") or "").endswith("_cktile"):
                hit += f" ({s['module']})"    # served through the table's sibling module (issue 26)
            t.add([_label(s.get("key") or {}), "yes" if s.get("engaged") else "no", hit,
                   _num(s.get("value")), _num(s.get("before")), _num(s.get("after")), s.get("reason") or ""],
                  row_class="improved" if s.get("engaged") else "regressed")
        v["engaged"] = t
    return v


def changes_view(ctx: Mapping[str, Any]) -> list[str]:
    """``outcome_changes``: one line per command run after the job that changed its outcome (promote, rollback),
    for the report's first lines."""
    return [f"{fmt_time(c.get('at'))}: `{c.get('command')}`: {c.get('what')}"
            for c in ctx.get("outcome_changes") or []]


def serving_view(ctx: Mapping[str, Any], table_cls) -> dict[str, Any]:
    """``serving_line`` and ``serving`` (a Table of serving.csv) for the templates."""
    from .. import serving
    from .fmt import fmt_value
    srv = dict(ctx.get("serving") or {})
    v: dict[str, Any] = {"has_serving": bool(srv.get("command")), "serving_line": "", "serving": None}
    if not v["has_serving"]:
        return v
    rows = srv.get("rows")
    if not rows:
        v["serving_line"] = ("--serve-cmd ran before tuning and after promotion, but the comparison is missing "
                             "(see the notes for why): {}".format(srv["command"]))
        return v
    v["serving_line"] = ("Your serving benchmark (--serve-cmd), run in the container before tuning and again "
                         f"after promotion (a fresh server on the live table and module): {srv['command']}")
    t = table_cls(["metric", "before", "after", "change", "better"], [False, True, True, True, False])
    for r in rows:
        ch = r.get("change_pct")
        good = None if ch is None else serving.better(r["metric"], ch)
        t.add([r["metric"], fmt_value(r.get("before")), fmt_value(r.get("after")), "—" if ch is None else f"{ch:+.2f}%",
               "" if good is None else ("yes" if good else "no")],
              row_class="" if good is None or ch == 0 else ("improved" if good else "regressed"))
    v["serving"] = t
    v["serving_line"] += serving_judged(srv)
    return v


def serving_judged(srv: Mapping[str, Any]) -> str:
    """The serving check's verdict (issue 37) and, with a profile, the measured change beside the expected gain
    (issue 38): the GPU time per token the promotion cut, 1 - before/after of the throughput."""
    out, verdict = "", srv.get("verdict") or {}
    if verdict:
        runs = verdict.get("runs") or [0, 0]
        judged = ("proven slower" if verdict.get("verdict") == "regressed" else
                  "proven faster" if verdict.get("verdict") == "improved" else
                  "within its noise" if verdict.get("verdict") else "not judged (one run a side)")
        out += (f" {verdict.get('metric')}: {judged} over {runs[0]} run(s) before and {runs[1]} after (medians, "
                "the benchmarks' rule).")
        if verdict.get("accuracy_before") is not None or verdict.get("accuracy_after") is not None:
            out += (f" Accuracy (--accuracy-cmd): {_num(verdict.get('accuracy_before'))} before, "
                    f"{_num(verdict.get('accuracy_after'))} after (bound {verdict.get('accuracy_bound_pct'):g} %).")
        if verdict.get("regression"):
            out += (" The promotion was rolled back: " if verdict.get("rolled_back") else
                    " The promotion was kept (--on-serving-regression keep) although: ") + "; ".join(
                verdict["regression"]) + "."
    expected = srv.get("expected_gain_pct")
    tok = next((r for r in srv.get("rows") or [] if r["metric"] == "Output token throughput (tok/s)"
                and r.get("before") and r.get("after")), None)
    if expected is not None and tok:
        measured = 100.0 * (1.0 - float(tok["before"]) / float(tok["after"]))
        out += (f" Expected from the profile: {expected:.2f} % less GPU time per token; measured: {measured:.2f} % "
                "(1 - before/after of the output token throughput).")
    return out


def sequential_line(seq: Mapping[str, Any] | None) -> str:
    """What the sequential design did (issue 37), for the method line."""
    if not seq:
        return ""
    return (f" Sequential design: {seq['start']} run(s) per arm first, then {seq['step']} more at a time for the "
            f"undecided shapes only, up to {seq['max']}: {seq['rounds']} round(s) added {seq['runs_added']} run(s) "
            f"per arm in all; the bar covers all {seq['looks']} looks.")


def _num(x: Any) -> str:
    return "—" if x is None else f"{float(x):.4g}"
