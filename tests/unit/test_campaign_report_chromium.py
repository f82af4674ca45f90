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
    groups = re.findall(r'<svg class="mchart" data-group="([^"]*)"', dom)
    pairs = [tuple(re.fullmatch(r"n=(\d+) k=(\d+)", g).groups()) for g in groups]   # no node= in a group
    assert tuned <= set(pairs), sorted(tuned - set(pairs))
    assert len(pairs) == len(set(pairs)), pairs          # one chart per (N,K) over all targets, not per node
    md = (job / "report.md").read_text()
    for n, k in tuned:
        assert re.search(rf"\|\s*{n}\s*\|\s*{k}\s*\|", md), (n, k)
    table = re.search(r'id="shapes-results".*?<tr>(.*?)</tr>', dom, re.S)
    assert table and re.search(r"<th[^>]*>node</th>", table.group(1)), "per-shape table has no node column"
    for section in ("Targets", "Promotion across each GPU kind"):
        assert section in dom, section
    assert "| node | container |" in md and "## Summary" in md


def test_campaign_report_copies_the_verdicts_of_the_merged_comparison(campaign):
    """The counts in report.md are those of comparison.csv's verdict column (each target judged its own
    samples; a shape measured again after the promotion across its kind carries that verdict)."""
    job, _ = campaign
    with open(job / "comparison.csv", newline="") as f:
        verdicts = [r["verdict"] for r in csv.DictReader(f)]
    md = (job / "report.md").read_text()
    for name, label in (("improved", "improved"), ("regressed", "regressed"), ("within_noise", "within noise")):
        m = re.search(rf"\|\s*{label} \(verdict\)\s*\|\s*(\d+)\s*\|", md)
        assert m and int(m.group(1)) == verdicts.count(name), (name, m and m.group(0), verdicts.count(name))
