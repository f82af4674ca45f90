"""The export's PR summary (issue 27): geomean of the exported rows, the rows left out and why, serving
before/after, and what the runs showed instead of the floor-bound p of a 3-vs-3 exact test."""

from __future__ import annotations

import json

import pandas as pd

from orchestrator.steps.export import observed
from tests.unit.test_outcome_later import _cli, _demo, ws  # noqa: F401 - the fixture


def test_the_summary_says_geomean_left_out_serving_and_what_was_observed(ws, capsys):  # noqa: F811
    job = _demo(ws, capsys, "--repeats", "3")
    rc, out, err = _cli(ws, capsys, "export", job.name, "--model-config", "dsv3")
    assert rc == 0, err
    md = open(json.loads(out)["summary"]).read()
    cmp = pd.read_csv(job / "comparison.csv", dtype=str)
    regressed = int((cmp["verdict"] == "regressed").sum())
    assert regressed > 0, "the demo should have regressed rows to leave out"
    assert f"Not exported (not proven faster): {regressed} regressed row(s)" in md
    assert "Geomean speedup of the" in md and "| observed |" in md and "| p |" not in md
    assert "3/3 after runs faster than every before run" in md
    assert "Serving benchmark" in md and "Request throughput" in md


def test_observed_words():
    assert observed({"before_n": 3, "after_n": 3, "p_value": 0.05}) == "3/3 after runs faster than every before run"
    assert "p=0.0079" in observed({"before_n": 5, "after_n": 5, "p_value": 0.0079})
    assert "single-run" in observed({"before_n": 1, "after_n": 1, "p_value": None})
