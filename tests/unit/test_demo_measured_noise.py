"""`demo --noise-model measured` (issue 37): the real GPU's noise on the test bed, judged by the new rule."""

import json
from pathlib import Path

import pandas as pd

from orchestrator.cli import main
from orchestrator.outcome.compare import norm_key_value
from tests.expect import expected_rows


def _job(ws: Path) -> Path:
    [job] = [d for d in ws.iterdir() if (d / "state.json").is_file()]
    return job


def _run(tmp_path, monkeypatch, seed):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.05")
    ws = tmp_path / f"ws{seed}"
    assert main(["-q", "--workspace", str(ws), "demo", "--noise-model", "measured", "--noise-seed", str(seed),
                 "--repeats", "5"]) == 0
    job = _job(ws)
    got = pd.read_csv(job / "comparison.csv", keep_default_na=False, dtype=str)
    return job, got


def test_measured_noise_is_deterministic_per_seed_and_never_promotes_a_slower_row(tmp_path, monkeypatch, capsys):
    job, got = _run(tmp_path, monkeypatch, 7)
    _, again = _run(tmp_path, monkeypatch, 7 + 1000)
    assert list(got["before"]) != list(again["before"])          # another seed, other numbers
    (tmp_path / "same").mkdir()
    _, same = _run(tmp_path / "same", monkeypatch, 7)
    assert list(got["after"]) == list(same["after"]) and list(got["before"]) == list(same["before"])
    st = json.loads((job / "state.json").read_text())
    assert (got["before_n"] == "5").all()
    # the new columns, appended after the old ones, and an interval that holds its median gain
    assert list(got.columns)[-4:] == ["gain_hl_pct", "gain_lo_pct", "gain_hi_pct", "gain_conf_pct"]
    iv = got[got["gain_lo_pct"] != ""]
    assert len(iv) and (iv["gain_lo_pct"].astype(float) <= iv["gain_hi_pct"].astype(float)).all()
    assert (iv["gain_conf_pct"].astype(float) >= 95.0).all()
    truth = {tuple(norm_key_value(w[c]) for c in ("m", "n", "k")): w["speedup_pct"]
             for w in expected_rows(job, "a8w8_blockscale", st["facts"]["version"])}
    promoted = {tuple(norm_key_value(r[c]) for c in ("m", "n", "k")) for _, r in got.iterrows()
                if r["promoted"] == "true"}
    assert promoted and all(truth[k] > 0 for k in promoted)
    md = (job / "report.md").read_text()
    assert "Verdicts rest on 5 before and 5 after runs per shape" in md and "How sure:" in md
