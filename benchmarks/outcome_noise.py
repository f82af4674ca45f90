"""Figures for issue 7: verdicts under simulated noise, and what --repeats costs.

    python benchmarks/outcome_noise.py [--runs 5] [--noise 1.5]

Runs `tune-remote demo --noise PCT` (a8w8_blockscale, the local simulated node) several times and
compares each job's promoted rows with the perf model's truth (the sim without noise): slower rows
promoted (must be 0), clearly faster rows (>= 5 %, shapes with a tuned row of their own) not promoted. Then times the demo with --repeats 1
against --repeats 3 (no noise), printed side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.outcome.compare import norm_key_value  # noqa: E402
from tests.expect import expected_rows  # noqa: E402


def demo(ws: Path, *args: str) -> tuple[Path, float]:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "orchestrator", "-q", "--workspace", str(ws), "demo", *args],
                   check=True, cwd=REPO)
    wall = time.monotonic() - t0
    jobs = sorted(d for d in ws.iterdir() if (d / "state.json").is_file())
    return jobs[-1], wall


def judge_run(job: Path) -> dict:
    import pandas as pd
    st = json.loads((job / "state.json").read_text())
    truth = {tuple(norm_key_value(w[c]) for c in ("m", "n", "k")): w["speedup_pct"]
             for w in expected_rows(job, "a8w8_blockscale", st["facts"]["version"])}
    got = pd.read_csv(job / "comparison.csv", keep_default_na=False, dtype=str)
    promoted = {tuple(norm_key_value(r[c]) for c in ("m", "n", "k")) for _, r in got.iterrows()
                if r["promoted"] == "true"}
    # shapes the tuner found no kernel for have no row of their own (a gain there comes from a padded-M row)
    no_row = {tuple(norm_key_value(s[c]) for c in ("m", "n", "k"))
              for s in st["steps"]["compare"]["info"]["tuned"]["no_kernel"]}
    truth = {k: sp for k, sp in truth.items() if k not in no_row}
    return {"shapes": len(truth) + len(no_row), "promoted": len(promoted),
            "slower_promoted": sum(1 for k in promoted if truth[k] < 0),
            "flat_promoted": sum(1 for k in promoted if 0 <= truth[k] < 1.0),
            "faster5": sum(1 for sp in truth.values() if sp >= 5.0),
            "faster5_not_promoted": sum(1 for k, sp in truth.items() if sp >= 5.0 and k not in promoted),
            "verdicts": got["verdict"].value_counts().to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--noise", type=float, default=1.5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        print(f"noise +-{a.noise}% (uniform per run), --repeats 3, a8w8_blockscale demo, {a.runs} runs")
        print(f"{'run':>3} {'shapes':>6} {'promoted':>8} {'slower promoted':>15} {'flat(<1%) prom.':>15} "
              f"{'>=5% faster':>11} {'>=5% not prom.':>14}  verdicts")
        for i in range(a.runs):
            job, _ = demo(ws, "--noise", str(a.noise))
            r = judge_run(job)
            print(f"{i + 1:>3} {r['shapes']:>6} {r['promoted']:>8} {r['slower_promoted']:>15} "
                  f"{r['flat_promoted']:>15} {r['faster5']:>11} {r['faster5_not_promoted']:>14}  {r['verdicts']}")
        walls = {}
        for rep in (1, 3):
            _, walls[rep] = demo(ws, "--repeats", str(rep))
        print(f"demo wall time: --repeats 1 {walls[1]:.1f} s | --repeats 3 {walls[3]:.1f} s "
              f"| extra {walls[3] - walls[1]:+.1f} s")


if __name__ == "__main__":
    main()
