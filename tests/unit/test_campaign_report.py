"""A campaign's report.md and report.html come from the job report's templates (campaign.md.j2 / campaign.html.j2
include report.md.j2 / the body of report.html.j2 once per variant): every part of the campaign's own facts is in
both files, one job report per variant with ``node`` as the first key column, node text escaped in the page."""

from __future__ import annotations

import pandas as pd

from orchestrator.report.campaign import campaign_report

from .test_report import results


def _facts(**over) -> dict:
    facts = {"job_id": "camp1", "state": "failed", "error": "a target failed: `tune-remote logs camp1`",
             "variants": "a8w8,a8w8_blockscale", "target_count": 2,
             "later": [{"at": 0, "command": "tune-remote promote --rows all", "lines": ["n1: 3 row(s) <now>"]}],
             "targets": [{"node": "n1", "container": "c", "variant": "a8w8", "shapes": 4, "kind": "gfx950/256/x",
                          "state": "succeeded", "error": None, "report": "targets/s1/report.md"},
                         {"node": "n2", "container": "c", "variant": "a8w8", "shapes": 2, "kind": None,
                          "state": "lost", "error": "gone", "report": None}],
             "lost": ["n2/c a8w8 was lost: its untuned shapes went to n1/c (succeeded)"],
             "results": [{"variant": "a8w8", "path": "a8w8/comparison.csv", "shapes": 4, "faster": 3,
                          "slower": 1, "median": 2.5, "verdicts": {"improved": 3, "regressed": 1}}],
             "spread": ["a8w8: 3 proven row(s) of n1 promoted on n3 (gfx950/256/x)"],
             "again": ["a8w8: n3 m=1 n=2 k=3: after 1 -> 2"], "plan": ["n1/c: 4 shapes", "n2/c: 2 shapes <x>"]}
    return {**facts, **over}


def _comparisons(tmp_path) -> dict:
    out = {}
    for variant, node in (("a8w8", "n1"), ("a8w8_blockscale", "n2")):
        path = results().to_csv(tmp_path / f"{variant}.csv")
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        df["node"] = node
        df.to_csv(path, index=False)
        out[variant] = path
    return out


def test_every_part_of_a_campaign_is_in_both_files(tmp_path):
    md, html = campaign_report(_facts(), _comparisons(tmp_path))
    assert md.startswith("# Campaign camp1\n\nGenerated ") and " UTC. **State:** failed (a target failed" in md
    assert "\n\n\n" not in md
    for part in ("**The outcome changed after the campaign**", "`tune-remote promote --rows all`: n1: 3 row(s)",
                 "## tune-remote report: a8w8\n", "## tune-remote report: a8w8_blockscale\n", "## Targets",
                 "| n1 | c | a8w8 | gfx950/256/x | 4 | succeeded | targets/s1/report.md |",
                 "| n2 | c | a8w8 | - | 2 | lost (gone) | - |", "\n\nn2/c a8w8 was lost: its untuned",
                 "- **a8w8**: 4 shapes compared (a8w8/comparison.csv); faster > 1 %: 3, slower < -1 %: 1, median "
                 "speedup 2.5 %; verdicts improved 3, regressed 1", "## Promotion across each GPU kind",
                 "## After the promotion across each GPU kind", "`after` in comparison.csv is that value:",
                 "- a8w8: n3 m=1 n=2 k=3", "## Plan\n\n```\nn1/c: 4 shapes\nn2/c: 2 shapes <x>\n```"):
        assert part in md, part
    assert md.index("## tune-remote report: a8w8\n") < md.index("## tune-remote report: a8w8_blockscale") \
        < md.index("## Targets") < md.index("## Plan")
    assert html.lstrip().lower().startswith("<!doctype html") and "<title>Campaign camp1</title>" in html
    assert html.count("<header>") == 2 and html.count('id="shapes-results"') == 2
    for part in ("<h1>Campaign camp1</h1>", "(a target failed: <code>tune-remote logs camp1</code>)",
                 "<code>tune-remote promote --rows all</code>: n1: 3 row(s) &lt;now&gt;", "<h2>Targets</h2>",
                 "<td>lost (gone)</td>", "<p>n2/c a8w8 was lost", "<strong>a8w8</strong>: 4 shapes compared",
                 "<h2>Promotion across each GPU kind</h2>", "<code>after</code> in comparison.csv",
                 "<pre>n1/c: 4 shapes\nn2/c: 2 shapes &lt;x&gt;</pre>", "</body>\n</html>\n"):
        assert part in html, part
    assert "<now>" not in html and "<x>" not in html


def test_a_campaign_without_a_comparison_says_so(tmp_path):
    md, html = campaign_report(_facts(later=[], lost=[], results=[], spread=[], again=[], plan=[], error=None), {})
    assert "- no comparison (no target finished its benchmarks)" in md and "tune-remote report:" not in md
    assert "<li>no comparison (no target finished its benchmarks)</li>" in html and "<header>" not in html
    for gone in ("changed after the campaign", "## Plan", "## Promotion across", "was lost", "(None)"):
        assert gone not in md, gone
    assert "**State:** failed\n" in md
