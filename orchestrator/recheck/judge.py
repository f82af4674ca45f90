"""Recheck verdicts: ``run``'s noise-aware rules (outcome/verdict.py) with the live table's row as the "after"
arm and the same table without that row (what AITER serves then) as the "before" arm.

* ``still_faster``      the row still wins: ``run`` would call it ``improved``;
* ``slower_now``        the row loses to what AITER serves without it: ``regressed``;
* ``no_longer_faster``  in between (``within_noise``): the row is no longer proven faster.

A row with no sample in an arm gets no verdict (it is listed as not measured, never guessed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..outcome.verdict import judge_all

VERDICTS = ("still_faster", "no_longer_faster", "slower_now")
FROM_RUN = {"improved": "still_faster", "within_noise": "no_longer_faster", "regressed": "slower_now"}


def judge_rows(samples: Mapping[Any, tuple[Sequence[float], Sequence[float]]],
               higher_is_better: bool) -> dict[Any, dict]:
    """``{key: (with-row samples, without-row samples)}`` -> ``{key: {"verdict", "with_row", "without_row",
    "speedup_pct", "threshold_pct", "p_value", "with_n", "without_n"}}``; ``verdict`` None when an arm has
    no sample. ``speedup_pct`` is positive when the row is faster than what AITER serves without it."""
    judged, _ = judge_all({k: (without, with_) for k, (with_, without) in samples.items()}, higher_is_better)
    out = {}
    for k, j in judged.items():
        out[k] = {"verdict": FROM_RUN.get(j["verdict"]), "with_row": j["after"], "without_row": j["before"],
                  "speedup_pct": j["gain_pct"], "threshold_pct": j["threshold_pct"], "p_value": j["p_value"],
                  "with_n": j["after_n"], "without_n": j["before_n"]}
    return out


def counts(verdicts: Sequence[str | None]) -> dict[str, int]:
    """verdict -> n, every verdict present (0 when none); rows without a verdict under ``not_measured``."""
    out = {v: 0 for v in VERDICTS}
    for v in verdicts:
        key = v if v in out else "not_measured"
        out[key] = out.get(key, 0) + 1
    return out


def objective_notes(rows, now: str | None, family_of) -> tuple[dict, list[str]]:
    """The MoE ``us`` rule (issue 36): a promoted MoE row whose tuner had another objective than the node's
    tuner now (``now``, probed) keeps its ``us`` out of every comparison; the verdict above is the end-to-end
    benchmark of both arms now, never the table's ``us``. Returns ({ident: the objective at promotion} of
    those rows, one line per promoting job)."""
    from ..moe_quant import comparable, skip_line
    then: dict = {}
    by_job: dict = {}
    for r in rows:
        obj = (r.facts or {}).get("moe_objective")
        if family_of(r.variant) != "moe" or comparable(obj, now):
            continue
        then[r.ident()] = obj
        by_job.setdefault((r.job_id, obj), []).append(r)
    lines = [skip_line(f"{len(rs)} MoE row(s) promoted by job {job}", obj, now)
             for (job, obj), rs in sorted(by_job.items())]
    return then, lines
