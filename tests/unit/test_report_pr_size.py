"""report.md fits a pull-request comment (issue 27): under 60,000 characters for a 500-shape job, no
absolute paths of the node, the method note once (not on every row), one shape table, links to
comparison.csv and report.html; report.html keeps everything."""

from __future__ import annotations

import re

from orchestrator.report import render_report
from orchestrator.outcome.compare import compare
from tests.unit.test_report import full_ctx

NKS = [(n, k) for n in (512, 1536, 2112, 3072, 4096, 7168, 24576) for k in (256, 1536, 7168)]


def _judged_500():
    before, after = [], []
    shapes = [(m, n, k) for n, k in NKS for m in range(1, 25)][:500]
    assert len(shapes) == 500
    for i, (m, n, k) in enumerate(shapes):
        for run in range(3):
            before.append({"key": {"m": m, "n": n, "k": k}, "value": 100.0 + run * 0.1})
            after.append({"key": {"m": m, "n": n, "k": k},
                          "value": (100.0 + run * 0.1) * (1.2 if i % 7 else 0.8)})
    return compare(before, after, key_columns=("m", "n", "k"), metric="ck TFLOPS", higher_is_better=True,
                   judge=True), shapes


def test_report_md_of_500_shapes_fits_a_pr_comment():
    cmp, shapes = _judged_500()
    ctx = full_ctx(cmp)
    ctx["shapes"] = {"source": "/workspace/logs/vllm.log", "list": [{"m": m, "n": n, "k": k} for m, n, k in shapes]}
    ctx["environment"]["aiter_root"] = "/opt/aiter"
    md, html = render_report(ctx)
    assert len(md) < 60_000, len(md)
    assert "/opt/aiter" not in md and "/opt/aiter" in html
    assert "median of 3" not in md and "median of 3" in html      # the method note: above the table, once
    assert len(re.findall(r"^## Per-shape results", md, re.M)) == 1 and "## Input shapes" not in md
    assert "(comparison.csv)" in md and "(report.html)" in md and "export/NAME_" in md
    assert md.count("\n| ") > 500      # every shape still has its row


def test_a_demo_report_labels_its_jit_seconds_simulated():
    ctx = full_ctx()
    ctx["jit_profile"] = {"modules": [{"phase": "after", "module": "module_x", "cost_s": 244.0, "wall_s": 240.0}]}
    assert "Simulated" not in render_report(ctx)[0]
    ctx["simulated"] = True
    md, html = render_report(ctx)
    assert "Simulated (demo node)" in md and "Simulated (demo node)" in html
