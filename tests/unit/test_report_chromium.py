"""The demo's report.html opened in a real browser (headless Chromium): it renders, and its chart shows.

Chromium is Debian's ``chromium`` package (.ci/run installs it). Without it the test is skipped locally
and FAILS under CI=true, so a CI run never passes by not looking at the report.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.cli import main

WIDTH, HEIGHT = 1400, 4000
IMPROVED, REGRESSED, BAND = (0x2E, 0x9E, 0x4F), (0xD0, 0x44, 0x3A), (0xEC, 0xEF, 0xF3)   # report.html.j2 CSS


def _chromium() -> str:
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)", pytrace=False)
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _browser(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", "--force-device-scale-factor=1", f"--user-data-dir={tmp / 'profile'}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory) -> tuple[Path, dict]:
    chromium = _chromium()
    ws = tmp_path_factory.mktemp("demo") / "ws"
    mp = pytest.MonkeyPatch()
    mp.setenv("TUNE_REMOTE_POLL_S", "0.05")
    try:
        assert main(["--workspace", str(ws), "demo"]) == 0
    finally:
        mp.undo()
    [job] = [d for d in ws.iterdir() if (d / "state.json").is_file()]
    return job, {"chromium": chromium}


def test_report_html_renders_in_headless_chromium_with_its_chart(demo_report, tmp_path):
    from PIL import Image

    job, env = demo_report
    html = job / "report.html"
    shot = tmp_path / "report.png"
    cp = _browser(env["chromium"], tmp_path, f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                  html.as_uri())
    assert cp.returncode == 0 and shot.is_file(), cp.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (WIDTH, HEIGHT)
    colours = Counter({c: n for n, c in img.getcolors(maxcolors=WIDTH * HEIGHT)})
    # not blank: a white page has one colour; the report has text, tables, cards and the chart
    assert len(colours) > 200 and colours.most_common(1)[0][1] < 0.9 * WIDTH * HEIGHT
    # the chart is drawn: green bars (improved), red bars (regressed), the grey verdict band
    comp = json.loads((job / "comparison.json").read_text())
    verdicts = Counter(r["verdict"] for r in comp["rows"])
    assert verdicts["improved"] and verdicts["regressed"]
    assert colours[IMPROVED] > 40 * verdicts["improved"], colours[IMPROVED]
    assert colours[REGRESSED] > 10 * verdicts["regressed"], colours[REGRESSED]
    assert colours[BAND] > 500


def test_report_dom_after_parsing_has_one_chart_bar_per_compared_shape(demo_report, tmp_path):
    job, env = demo_report
    cp = _browser(env["chromium"], tmp_path, "--dump-dom", (job / "report.html").as_uri())
    assert cp.returncode == 0, cp.stderr[-2000:]
    dom = cp.stdout
    comp = json.loads((job / "comparison.json").read_text())
    status = Counter(r["status"] for r in comp["rows"])
    svg = re.search(r'<svg class="chart".*?</svg>', dom, re.S)
    assert svg, "no chart in the parsed DOM"
    bars = Counter(re.findall(r'<rect class="(improved|regressed|unchanged)"', svg.group(0)))
    assert bars == {k: status[k] for k in ("improved", "regressed", "unchanged") if status[k]}
    # one before/after chart per (n, k), with one after dot per shape coloured by its verdict
    groups: dict[str, Counter] = {}
    for r in comp["rows"]:
        groups.setdefault(f"n={r['n']} k={r['k']}", Counter())[r["verdict"]] += 1
    found = {m.group(1): m.group(0) for m in re.finditer(r'<svg class="mchart" data-group="([^"]+)".*?</svg>', dom, re.S)}
    assert set(found) == set(groups), (sorted(found), sorted(groups))
    for label, svg_text in found.items():
        dots = Counter(re.findall(r'<circle class="after (\w+)"', svg_text))
        assert dots == groups[label], label
        assert '<polygon class="mband"' in svg_text and '<polyline class="after"' in svg_text
    for section in ("summary", "chart", "group-charts", "promotion", "engaged", "serving", "jit"):
        assert f'id="{section}"' in dom, section
