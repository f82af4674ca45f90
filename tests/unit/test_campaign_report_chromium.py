"""`demo --nodes 3`: the campaign's report.html, opened in headless Chromium, is a complete report of the job:
every (N,K) pair tuned on any target is in it, the per-shape table has a node column, and the campaign's own
sections (targets, promotion) follow. Chromium as in test_report_chromium.py (skipped locally without it)."""

from __future__ import annotations

import csv
import re

import pytest

from orchestrator.cli import main

from .test_report_chromium import _browser, _chromium


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    chromium = _chromium()
    ws = tmp_path_factory.mktemp("demo3") / "ws"
    mp = pytest.MonkeyPatch()
    mp.setenv("TUNE_REMOTE_POLL_S", "0.05")
    try:
        assert main(["--workspace", str(ws), "demo", "--nodes", "3"]) == 0
    finally:
        mp.undo()
    [job] = [d for d in ws.iterdir() if (d / "state.json").is_file()]
    return job, chromium


def test_campaign_report_in_chromium_has_every_nk_pair_and_a_node_column(campaign, tmp_path):
    job, chromium = campaign
    tuned = set()
    for sub in (job / "targets").iterdir():
        if (sub / "comparison.csv").is_file():
            with open(sub / "comparison.csv", newline="") as f:
                tuned |= {(r["n"], r["k"]) for r in csv.DictReader(f)}
    assert tuned
    cp = _browser(chromium, tmp_path, "--dump-dom", (job / "report.html").as_uri())
    assert cp.returncode == 0, cp.stderr[-2000:]
    dom = cp.stdout
    groups = set(re.findall(r'<svg class="mchart" data-group="[^"]*?n=(\d+) k=(\d+)"', dom))
    assert tuned <= groups, sorted(tuned - groups)
    md = (job / "report.md").read_text()
    for n, k in tuned:
        assert re.search(rf"\|\s*{n}\s*\|\s*{k}\s*\|", md), (n, k)
    table = re.search(r'id="shapes-results".*?<tr>(.*?)</tr>', dom, re.S)
    assert table and re.search(r"<th[^>]*>node</th>", table.group(1)), "per-shape table has no node column"
    for section in ("Targets", "Promotion across each GPU kind"):
        assert section in dom, section
    assert "| node | container |" in md and "## Summary" in md
