"""Figures for issues 7 and 37: verdicts under noise, old rule against new, and what --repeats costs.

    python benchmarks/outcome_noise.py [--jobs 20] [--shapes 100] [--repeats 3,5,10]     # the noise model
    python benchmarks/outcome_noise.py --demo-runs 20 [--noise-model measured]           # + the test bed

Model (issue 37, fast, no node): jobs of ``--shapes`` GEMM shapes (M 1..8192 x four (N,K) pairs) whose
benchmark processes draw their noise from the simulator's measured-noise model (orchestrator/sim/noise_model.py,
from ../shared/reference/real-gpu-noise.md), before/after processes interleaved as tune-remote runs them;
both verdict rules (``judge_all(..., legacy=True)``: max(1 %, 3 x noise); the new one: K x noise x
sqrt(1/nb + 1/na), job-wide K) judge: an A/A job (nothing changed), true gains of 2/5/10 %, and a true 2 %
slowdown. Printed side by side: false verdicts per job, jobs with one or more, A/A jobs clean (nothing
promoted, no regressed row), power, slower rows promoted.

Test bed (issue 7, with ``--demo-runs``): `tune-remote demo` (a8w8_blockscale, the local simulated node)
several times, each job's promoted rows against the perf model's truth (the sim without noise): slower rows
promoted (must be 0), clearly faster rows (>= 5 %, shapes with a tuned row of their own) not promoted.
Then the demo's wall time at --repeats 3 against --repeats 5.
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
    ap.add_argument("--jobs", type=int, default=20, help="model: jobs per rule and run count")
    ap.add_argument("--shapes", type=int, default=100, help="model: shapes per job")
    ap.add_argument("--repeats", default="3,5,10", help="model: runs per arm, comma-separated")
    ap.add_argument("--sequential", default="5,5,30", help="model: START,STEP,MAX runs of the sequential design "
                    "('' for none)")
    ap.add_argument("--demo-runs", "--runs", dest="runs", type=int, default=0, help="test-bed demo jobs (0: none)")
    ap.add_argument("--noise", type=float, default=1.5, help="demo: uniform noise +-PCT (--noise-model uniform)")
    ap.add_argument("--noise-model", choices=("uniform", "measured"), default="measured")
    ap.add_argument("--demo-aa", type=int, default=0, help="test bed: A/A demo jobs (tuning changes nothing) and "
                    "real-gain jobs per design: fixed 3, fixed 5, sequential 5 + 5 .. 30 (0: none)")
    ap.add_argument("--designs", default="fixed 3,fixed 5,sequential 5+5..30",
                    help="--demo-aa: which designs (comma-separated names)")
    ap.add_argument("--model", dest="model", action=argparse.BooleanOptionalAction, default=True,
                    help="the model half (--no-model: the test bed only)")
    a = ap.parse_args()
    from outcome_noise_model import print_model   # noqa: PLC0415 - the model half lives beside this script
    seq = tuple(int(x) for x in a.sequential.split(",")) if a.sequential else None
    if a.model:
        print_model(a.jobs, a.shapes, [int(r) for r in a.repeats.split(",") if r], seq)
    if a.runs:
        demo_figures(a)
    if a.demo_aa:
        demo_aa(a.demo_aa, [d.strip() for d in a.designs.split(",")])


DESIGNS = (("fixed 3", ["--repeats", "3"]), ("fixed 5", ["--repeats", "5"]),
           ("sequential 5+5..30", ["--repeats", "5", "--max-repeats", "30"]))


def demo_aa(runs: int, designs: list[str] | None = None) -> None:
    """Issue 37's done-when on the test bed: A/A jobs (measured noise, tuning changes nothing) clean, and on
    real gains no slower row promoted and >= 90 % of the >= 5 % faster rows promoted; wall time per job."""
    print(f"\ntest bed: measured noise, a8w8_blockscale demo, {runs} A/A jobs and {runs} real-gain jobs per design")
    print(f"{'design':<20} {'A/A clean':>9} {'A/A false':>9} {'mean runs':>9} {'slower prom.':>12} "
          f"{'>=5% promoted':>14} {'wall/job s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in DESIGNS:
            if designs and name not in designs:
                continue
            clean = false = 0
            runs_used, walls, slower, f5, f5_not = [], [], 0, 0, 0
            for i in range(runs):
                ws = Path(tmp) / f"{name}-{i}".replace(" ", "_").replace("+", "p")
                job, wall = demo(ws, "--noise-model", "measured", "--noise-seed", str(i + 1), "--aa", *args)
                walls.append(wall)
                got = json.loads((job / "state.json").read_text())["steps"]["compare"]["info"]["summary"]
                wrong = int(got.get("improved") or 0) + int(got.get("regressed") or 0)
                false += wrong
                clean += wrong == 0
                import pandas as pd
                cmp = pd.read_csv(job / "comparison.csv", keep_default_na=False, dtype=str)
                runs_used.append(cmp["before_n"].astype(int).mean())
                job, wall = demo(ws / "gain", "--noise-model", "measured", "--noise-seed", str(i + 1), *args)
                walls.append(wall)
                r = judge_run(job)
                slower, f5, f5_not = slower + r["slower_promoted"], f5 + r["faster5"], f5_not + r["faster5_not_promoted"]
            print(f"{name:<20} {clean:>6}/{runs:<2} {false / runs:>9.2f} {sum(runs_used) / len(runs_used):>9.1f} "
                  f"{slower:>12} {100.0 * (f5 - f5_not) / max(1, f5):>13.1f}% {sum(walls) / len(walls):>10.1f}")


def demo_figures(a) -> None:
    noise = (["--noise-model", "measured"] if a.noise_model == "measured" else ["--noise", str(a.noise)])
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        print(f"\ntest bed: {a.noise_model} noise" + ("" if a.noise_model == "measured" else f" +-{a.noise}%")
              + f", --repeats 3, a8w8_blockscale demo, {a.runs} runs (the new rule)")
        print(f"{'run':>3} {'shapes':>6} {'promoted':>8} {'slower promoted':>15} {'flat(<1%) prom.':>15} "
              f"{'>=5% faster':>11} {'>=5% not prom.':>14}  verdicts")
        totals = {"slower_promoted": 0, "faster5": 0, "faster5_not_promoted": 0}
        for i in range(a.runs):
            extra = ["--noise-seed", str(i + 1)] if a.noise_model == "measured" else []
            job, _ = demo(ws, *noise, *extra)
            r = judge_run(job)
            print(f"{i + 1:>3} {r['shapes']:>6} {r['promoted']:>8} {r['slower_promoted']:>15} "
                  f"{r['flat_promoted']:>15} {r['faster5']:>11} {r['faster5_not_promoted']:>14}  {r['verdicts']}")
            for k in totals:
                totals[k] += r[k]
        f5 = totals["faster5"]
        print(f"total: slower rows promoted {totals['slower_promoted']}; rows >= 5 % faster promoted "
              f"{f5 - totals['faster5_not_promoted']}/{f5} ({100.0 * (f5 - totals['faster5_not_promoted']) / max(1, f5):.1f} %)")
        walls = {}
        for rep in (3, 5):
            _, walls[rep] = demo(ws, "--repeats", str(rep), *noise)
        print(f"demo wall time: --repeats 3 {walls[3]:.1f} s | --repeats 5 {walls[5]:.1f} s "
              f"| extra {walls[5] - walls[3]:+.1f} s")


if __name__ == "__main__":
    main()
