"""The benchmark samples of both arms of a job, per shape, from its bench logs: the same cut (one section per
run, one per call) and the same parser as the compare step, so the store holds every value the verdicts
were judged on."""

from __future__ import annotations

from pathlib import Path

from .keys import row_key


def bench_samples(job, jd: Path, keys) -> list[tuple[int, tuple[str, list[float]]]]:
    """``[(arm, (row_key, [value of run 0, run 1, ...])), ...]``, arm 0 before and 1 after; [] without logs."""
    from ..aiter_profiles import profile_from_facts
    from ..steps.bench import measured_by_call, plan_bench
    from ..steps.compare import split_samples
    from ..variants import get_variant
    logs = job.remote.logs or {}
    try:
        variant = get_variant(job.variant).resolve(profile_from_facts(job.facts))
    except Exception:     # a variant this code does not know: no samples, the rest is stored
        return []
    if variant.bench is None or not job.shapes:
        return []
    by_args = {c.args: c.shapes for c in plan_bench(variant, job.shapes)}
    call_shapes = [by_args.get(tuple(a[1:]), job.shapes) for a in job.remote.bench_argv or []]
    out = []
    for arm, (side, name) in enumerate((("before", "baseline"), ("after", "after"))):
        path = jd / "logs" / Path(logs.get(name) or "-").name
        if not path.is_file():
            continue
        per: dict[str, list[float]] = {}
        for text in split_samples(path.read_text(encoding="utf-8", errors="replace"), side):
            for m in measured_by_call(variant.bench, job.shapes, text, call_shapes):
                if isinstance(m.get("value"), (int, float)):
                    per.setdefault(row_key(m["key"], keys), []).append(float(m["value"]))
        out += [(arm, item) for item in per.items()]
    return out
