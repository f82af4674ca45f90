"""The serving check that can say no (issue 37): ``--serve-cmd`` run ``--serve-repeats`` times before tuning
and again after promotion, each metric judged with the benchmarks' statistics (medians, the practical bar on
the run-to-run noise, the exact Mann-Whitney test: ``outcome/verdict.py``), an optional ``--accuracy-cmd``
score before and after, and a promotion whose serving is proven slower, or whose accuracy drops beyond
``--max-accuracy-drop`` %, rolled back (``--on-serving-regression rollback``, the default) or kept and said.

A run that fails or prints no figures is a failed measurement, named in one line, never a zero. serving.csv
keeps its columns (metric,before,after,change_pct: medians of the runs); serving_runs.csv has every run.
The before runs are the pipeline's first step (the node's live configuration, nothing changed yet), the after
runs follow the promotion: serving cannot interleave the two (a server loads one table), so a drift of the
node between them is in the change; the report says how many runs each side has.
"""

from __future__ import annotations

import re
import statistics

from ..context import Ctx
from ..remote.shell import Cmd, quote, render
from ..state import atomic_write
from .. import serving

RUN_MARK = "== tune-remote serve run"          # before each run of the serve command: `<mark> <n>`
ACCURACY_MARK = "== tune-remote accuracy run"
PRIMARY = ("Output token throughput (tok/s)", "Total Token throughput (tok/s)", "Request throughput (req/s)")
_SCORE = re.compile(r"(?i)\b(?:exact_match|accuracy|acc|score)\b[^0-9\n]*?(\d+(?:\.\d+)?)")


def repeats(request) -> int:
    try:
        return max(1, int(request.get("serve_repeats") or 1))
    except (TypeError, ValueError):
        return 1


def serve_line(cmd: str, root: str) -> str:
    """The user's --serve-cmd (a shell line by contract) in the aiter root; its failure is reported, not
    fatal: the exit status is written to the log and the step always succeeds."""
    return f"( {render(Cmd(('sh', '-c', cmd), cwd=root))} ); echo \"[tune-remote] serve command exit status $?\""


_EXIT_STATUS = re.compile(r"serve command exit status (\d+)")


def exit_status(text: str) -> str | None:
    """The exit status ``serve_line`` wrote into a serve run's output (its first), else None."""
    m = _EXIT_STATUS.search(text)
    return m.group(1) if m else None


def before_line(request, root: str) -> str:
    """The pipeline's serve_before step: every run of the serve command, then the accuracy command, each
    after its marker line (a failure of one is reported, never fatal)."""
    parts = [f"echo {quote(f'{RUN_MARK} {n}')}; {serve_line(request.serve_cmd, root)}"
             for n in range(1, repeats(request) + 1)]
    if request.get("accuracy_cmd"):
        parts.append(f"echo {quote(f'{ACCURACY_MARK} 1')}; {serve_line(request['accuracy_cmd'], root)}")
    return "; ".join(parts)


def runs_line(request, root: str) -> str:
    """The shell line of one side's runs (the pipeline's serve_before step, and after promotion): one run
    exactly as before issue 37; with --serve-repeats or --accuracy-cmd every run after its marker."""
    if repeats(request) == 1 and not request.get("accuracy_cmd"):
        return serve_line(request.serve_cmd, root)
    return before_line(request, root)


def split(text: str) -> tuple[list[str], str | None]:
    """The serve runs of a log and its accuracy run (a log without markers, from an older job, is one run)."""
    marks = list(re.finditer(rf"^(?:{re.escape(RUN_MARK)}|{re.escape(ACCURACY_MARK)}) \d+\s*$", text, re.M))
    if not marks:
        return [text], None
    runs, acc = [], None
    for i, m in enumerate(marks):
        body = text[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        if m.group(0).startswith(ACCURACY_MARK):
            acc = body
        else:
            runs.append(body)
    return runs, acc


def score(text: str | None) -> float | None:
    """An accuracy command's score: the last number after exact_match / accuracy / acc / score (lm-eval's
    table row ``|gsm8k|...|exact_match|↑|0.9492|±|0.006|`` gives 0.9492), else None."""
    if not text:
        return None
    found = _SCORE.findall(text)
    return float(found[-1]) if found else None


def judge(before: list[dict], after: list[dict]) -> list[dict]:
    """Per metric: medians, change, and with two runs or more a side the benchmarks' verdict."""
    from ..outcome.verdict import judge_all
    metrics = [*before[0]] if before else []
    for run in [*before, *after]:
        metrics += [m for m in run if m not in metrics]
    rows = []
    for m in metrics:
        b = [r[m] for r in before if m in r]
        a = [r[m] for r in after if m in r]
        row = {"metric": m, "before": statistics.median(b) if b else None, "after": statistics.median(a) if a else None,
               "before_n": len(b), "after_n": len(a), "verdict": None}
        row["change_pct"] = (round((row["after"] / row["before"] - 1) * 100, 2)
                             if row["before"] and row["after"] is not None else None)
        if len(b) >= 2 and len(a) >= 2:
            higher = not (m.endswith("(ms)") or m.endswith("(s)"))
            row["verdict"] = judge_all({m: (b, a)}, higher)[0][m]["verdict"]
        rows.append(row)
    return rows


def primary(rows: list[dict]) -> dict | None:
    by = {r["metric"]: r for r in rows}
    return next((by[m] for m in PRIMARY if m in by), rows[0] if rows else None)


def _figures(texts: list[str], side: str, failed: list[str]) -> list[dict]:
    out = []
    for n, text in enumerate(texts, 1):
        got = serving.parse(text)
        if got:
            out.append(got)
        else:
            st = exit_status(text)
            failed.append(f"{side} run {n}: " + (f"exit status {st}" if st not in (None, "0")
                                                  else "no recognised figures"))
    return out


def after(ctx: Ctx, rollback) -> None:
    """After promotion: the serve runs (and accuracy) again, serving.csv, the verdict, and ``rollback(ctx)``
    when the promotion made serving proven slower or accuracy worse (``--on-serving-regression``)."""
    job = ctx.job
    req = job.request
    if not req.serve_cmd:
        return
    n = repeats(req)
    ctx.ui.event(f"serving benchmark after promotion (--serve-cmd, {n} run(s))")
    res = ctx.target.ctr.run(Cmd(("sh", "-c", runs_line(req, job.remote.aiter_root))), timeout=6 * 3600 * n,
                             check=False)
    after_text = res.text + "\n" + res.err_text
    atomic_write(ctx.job_dir / "serve_after.log", after_text.encode())   # beside logs/, which mirrors the node
    before_log = (job.remote.logs or {}).get("serve_before")
    before_local = ctx.job_dir / "logs" / before_log.rsplit("/", 1)[-1] if before_log else None
    before_text = before_local.read_text(errors="replace") if before_local and before_local.is_file() else ""
    (b_runs, b_acc), (a_runs, a_acc) = split(before_text), split(after_text)
    failed: list[str] = []
    b, a = _figures(b_runs, "before", failed), _figures(a_runs, "after", failed)
    for f in failed:
        job.note(f"serving measurement failed: {f} of --serve-cmd (left out, never counted as zero)")
    if not b or not a:
        status = [f"{side}: exit status {st}" for side, text in (("before", before_text), ("after", after_text))
                  for st in [exit_status(text)] if st is not None]
        job.note("serving comparison missing: the --serve-cmd printed no recognised figures "
                 f"({'before' if not b else 'after'} run; {', '.join(status) or 'no exit status'}); "
                 "expected vLLM/SGLang serving-benchmark lines like 'Request throughput (req/s): N'")
        return
    rows = judge(b, a)
    atomic_write(ctx.job_dir / "serving.csv", serving.csv_text(
        [{k: r[k] for k in ("metric", "before", "after", "change_pct")} for r in rows]).encode())
    atomic_write(ctx.job_dir / "serving_runs.csv", ("metric,arm,run,value\n" + "".join(
        f"{m},{side},{i},{v:g}\n" for side, runs in (("before", b), ("after", a))
        for i, run in enumerate(runs, 1) for m, v in run.items())).encode())
    info = job.step_state("promote").info
    info["serving"] = [{k: r[k] for k in ("metric", "before", "after", "change_pct")} for r in rows]
    for r in rows:
        if r["change_pct"] is not None:
            job.note(f"serving {r['metric']}: {r['before']:g} -> {r['after']:g} ({r['change_pct']:+.2f} %, "
                     f"{'better' if serving.better(r['metric'], r['change_pct']) else 'not better'})")
    _decide(ctx, rows, score(b_acc), score(a_acc), info, rollback)


def _decide(ctx: Ctx, rows: list[dict], acc_before, acc_after, info: dict, rollback) -> None:
    job, req = ctx.job, ctx.job.request
    main = primary(rows)
    verdict = {"metric": main["metric"], "verdict": main["verdict"], "runs": [main["before_n"], main["after_n"]],
               "change_pct": main["change_pct"]}
    why = []
    if main["verdict"] == "regressed":
        why.append(f"serving {main['metric']} proven slower ({main['change_pct']:+.2f} %, {main['before_n']} vs "
                   f"{main['after_n']} runs)")
    elif main["verdict"] is None:
        job.note(f"serving change not judged: {main['before_n']} run(s) before, {main['after_n']} after "
                 "(--serve-repeats 3 or more to judge it)")
    if req.get("accuracy_cmd"):
        bound = float(req.get("max_accuracy_drop") or 1.0)
        verdict.update(accuracy_before=acc_before, accuracy_after=acc_after, accuracy_bound_pct=bound)
        if acc_before is None or acc_after is None:
            job.note("accuracy measurement failed: the --accuracy-cmd printed no score "
                     f"({'before' if acc_before is None else 'after'}; expected e.g. 'exact_match ... 0.95')")
        elif acc_before > 0 and (acc_before - acc_after) / acc_before * 100 > bound:
            why.append(f"accuracy {acc_before:g} -> {acc_after:g} (more than {bound:g} % lower)")
    verdict["regression"] = why
    mode = req.get("on_serving_regression") or "rollback"
    if why and (job.remote.promotion or {}).get("promoted"):
        if mode == "rollback":
            rollback(ctx)
            verdict["rolled_back"] = True
            job.note("promotion rolled back: " + "; ".join(why) + " (--on-serving-regression rollback)")
        else:
            job.note("promotion kept although " + "; ".join(why) + " (--on-serving-regression keep)")
    info["serving_verdict"] = verdict
