"""What a finished job's comparison.csv must say, computed independently from the sim's perf model.

The runtime truth is the tuned CSV (before: the backup; after: the fetched file): a benchmarked shape
is served by the first tuned row its lookup reaches (GEMM: exact M, then padded M; batched: exact;
MoE: exact key, none under the legacy fp8 block-scale bypass), else by the default kernel.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from orchestrator.parsing.csvtools import read_tuned_csv
from orchestrator.sim import perf_model
from orchestrator.outcome.compare import JUDGED_CSV_COLUMNS, norm_key_value
from orchestrator.outcome.verdict import MIN_GAIN_PCT
from orchestrator.moe_quant import moe_bypassed
from orchestrator.variants import get_variant, parse_version, profile_for


def tuned_keys(path: Path | None, variant, gfx: str, cu_num: int) -> set[tuple]:
    if path is None or not Path(path).is_file():
        return set()
    df = read_tuned_csv(str(path))
    cols = {c.lower(): c for c in df.columns}
    if "gfx" in cols:
        df = df[df[cols["gfx"]].astype(str) == gfx]
    if "cu_num" in cols:     # the MXFP8 BMM table has none (its key: gfx,b,m,n,k,w_scale_block)
        df = df[df[cols["cu_num"]].astype(str).map(norm_key_value) == int(cu_num)]
    keys = [c for c in variant.key_columns if c in cols]
    return {tuple(norm_key_value(r[cols[c]]) for c in keys) for _, r in df.iterrows()}


def served_by(variant, shape: dict, keys: set[tuple], profile) -> dict | None:
    """The key shape of the tuned row the runtime uses for ``shape``, or None (default kernel)."""
    cols = variant.key_columns
    if variant.family == "moe":
        if moe_bypassed(shape, profile):
            return None
        return shape if tuple(norm_key_value(shape[c]) for c in cols) in keys else None
    if variant.family == "batched":
        return shape if tuple(norm_key_value(shape[c]) for c in cols) in keys else None
    for pm in perf_model.padded_m_candidates(int(shape["m"]), int(shape["n"]), int(shape["k"])):
        cand = {**shape, "m": pm}
        if tuple(norm_key_value(cand[c]) for c in cols) in keys:
            return cand
    return None


def expected_rows(job_dir: Path, variant_name: str, version: str, gfx="gfx950", cu_num=256) -> list[dict]:
    profile = profile_for(parse_version(version))
    variant = get_variant(variant_name).resolve(profile)
    bench = variant.bench
    job_dir = Path(job_dir)
    tuned = job_dir / Path(variant.tuned_csv).name
    backups = list((job_dir / "backup").glob("*")) if (job_dir / "backup").is_dir() else []
    before_keys = tuned_keys(backups[0] if backups else None, variant, gfx, cu_num)
    after_keys = tuned_keys(tuned, variant, gfx, cu_num)
    import json
    shapes = json.loads((job_dir / "state.json").read_text())["shapes"]
    rows = []
    for s in shapes:
        b = perf_model.bench_value(variant.name, s, bench.metric, gfx, cu_num,
                                   tuned_from=served_by(variant, s, before_keys, profile))
        a = perf_model.bench_value(variant.name, s, bench.metric, gfx, cu_num,
                                   tuned_from=served_by(variant, s, after_keys, profile))
        if bench.higher_is_better:
            sp = (a / b - 1) * 100
        else:
            sp = (b / a - 1) * 100
        rows.append({**{c: s[c] for c in variant.key_columns}, "metric": bench.metric,
                     "before": b, "after": a, "speedup_pct": round(sp, 2)})
    return rows


def assert_comparison_matches_model(job_dir: Path, variant_name: str, version: str, **kw) -> pd.DataFrame:
    job_dir = Path(job_dir)
    variant = get_variant(variant_name)
    got = pd.read_csv(job_dir / "comparison.csv", keep_default_na=False, dtype=str)
    assert list(got.columns) == [*variant.resolve(profile_for(parse_version(version))).key_columns,
                                 "metric", "before", "after", "speedup_pct", *JUDGED_CSV_COLUMNS]
    want = expected_rows(job_dir, variant_name, version, **kw)
    assert len(got) == len(want), (len(got), len(want))
    key_cols = list(got.columns[:list(got.columns).index("metric")])
    by_key = {tuple(norm_key_value(r[c]) for c in key_cols): r for r in want}
    for _, row in got.iterrows():
        exp = by_key[tuple(norm_key_value(row[c]) for c in key_cols)]
        assert row["metric"] == exp["metric"]
        assert math.isclose(float(row["before"]), exp["before"], rel_tol=1e-9), (dict(row), exp)
        assert math.isclose(float(row["after"]), exp["after"], rel_tol=1e-9), (dict(row), exp)
        assert math.isclose(float(row["speedup_pct"]), exp["speedup_pct"], abs_tol=0.011), (dict(row), exp)
        # no noise in the sim here: every gain of 1 % or more is real, identical runs are within noise
        sp = exp["speedup_pct"]
        want_verdict = "improved" if sp >= MIN_GAIN_PCT else "regressed" if sp <= -MIN_GAIN_PCT else "within_noise"
        assert row["verdict"] == want_verdict, (dict(row), exp)
        assert row["promoted"] in ("true", "false")
    return got
