"""Which shapes first, and how long they take (review P-07; issue 12 "a budget tunes the most-missed first").

Pure except ``seconds_per_shape``, which reads earlier jobs of the workspace:

- ``rank``: shapes ordered by how often the server's log missed them: the exact lookup first, then the
  misses of the shape's family (same key but M / token: a swept M of a much-missed (N,K) comes before
  a rarely missed (N,K)), then the cheaper shape. Shapes no log named (``--nk``, ``--shapes-csv``,
  ``--model``) count 0 and keep their order behind.
- ``estimate``: tuning time = sum of ``shape_cost`` x seconds per unit of cost on one GPU / GPUs.
- ``seconds_per_shape``: that rate measured from the finished jobs of the same variant and GPU kind in
  the workspace (their tune step's wall time x GPUs / cost), else ``ASSUMED_S`` (said so in the plan).
- ``within``: the ranked shapes whose cumulative estimate fits ``--budget``; ``within_by_share`` with a
  profile: the shapes with the most GPU time per tuning second that fit.
"""

from __future__ import annotations

import re

from ..errors import UsageError
from ..state import Status

ASSUMED_S = {"gemm": 90.0, "moe": 240.0}      # per shape of cost 1 on one GPU when nothing was measured
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])", re.I)
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """'2h', '90m', '1h30m', '45s', '3600' (seconds) -> seconds."""
    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        secs = float(t)
    else:
        parts = _DURATION.findall(t)
        if not parts or _DURATION.sub("", t).strip():
            raise UsageError(f"--budget {text!r} is not a duration", hint="write it as 2h, 90m, 1h30m or 45s")
        secs = sum(float(n) * _UNIT[u] for n, u in parts)
    if secs <= 0:
        raise UsageError(f"--budget {text!r} must be more than zero", hint="e.g. --budget 2h")
    return secs


def fmt_duration(secs: float) -> str:
    secs = int(round(secs))
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def shape_cost(shape: dict) -> float:
    """Relative tuning time of one shape: a fixed part (candidates compiled and launched) plus a part
    growing with the work per launch. Only the ratios matter."""
    def num(key, default=1):
        try:
            return max(1, int(shape.get(key, default)))
        except (TypeError, ValueError):
            return default
    if "token" in shape:
        work = num("token") * num("model_dim") * num("inter_dim") * num("topk")
    else:
        work = num("b") * num("m") * num("n") * num("k")
    return 1.0 + work / float(2 ** 34)


def _dim(shape: dict) -> str:
    return "token" if "token" in shape else "m"


def exact_key(shape: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in shape.items() if not k.startswith("_")))


def family_key(shape: dict) -> tuple:
    dim = _dim(shape)
    return tuple(sorted((k, str(v)) for k, v in shape.items() if k != dim and not k.startswith("_")))


def miss_counts(pairs) -> tuple[dict, dict]:
    """(shape as the runtime looks it up, times it was missed) -> ({exact key: n}, {family key: n})."""
    exact: dict = {}
    family: dict = {}
    for shape, n in pairs:
        exact[exact_key(shape)] = exact.get(exact_key(shape), 0) + n
        family[family_key(shape)] = family.get(family_key(shape), 0) + n
    return exact, family


def rank(shapes: list[dict], exact: dict, family: dict, time: dict | None = None) -> tuple[list[dict], list[int]]:
    """The shapes, most missed first (stable), and each one's exact miss count; with ``time`` (exact key ->
    share of the profile's GPU time, issue 38) the largest share first, then the most missed."""
    time = time or {}
    order = sorted(range(len(shapes)), key=lambda i: (-time.get(exact_key(shapes[i]), 0.0),
                                                      -exact.get(exact_key(shapes[i]), 0),
                                                      -family.get(family_key(shapes[i]), 0),
                                                      shape_cost(shapes[i]), i))
    return [shapes[i] for i in order], [exact.get(exact_key(shapes[i]), 0) for i in order]


def estimate(shapes: list[dict], gpus: int, per_shape_s: float) -> float:
    return sum(shape_cost(s) for s in shapes) * per_shape_s / max(1, gpus)


def within(shapes: list[dict], budget_s: float, gpus: int, per_shape_s: float) -> tuple[list[dict], list[dict]]:
    """The leading shapes whose cumulative estimate fits the budget (at least one), and the rest."""
    spent, keep = 0.0, 0
    for s in shapes:
        cost = shape_cost(s) * per_shape_s / max(1, gpus)
        if keep and spent + cost > budget_s:
            break
        spent += cost
        keep += 1
    return shapes[:keep], shapes[keep:]


def within_by_share(shapes: list[dict], budget_s: float, gpus: int, per_shape_s: float,
                    share: dict) -> tuple[list[dict], list[dict]]:
    """With a profile (issue 38): the shapes holding the most GPU time per second of tuning that fit the budget
    (greedy by share / cost, a shape that does not fit skipped for the next), in their given order (largest
    share first). Taking the largest shares first fills a budget with a few large prefill shapes whose
    tuning costs most: ``benchmarks/profile_budget.py`` measures both."""
    order = sorted(range(len(shapes)), key=lambda i: (-share.get(exact_key(shapes[i]), 0.0) / shape_cost(shapes[i]), i))
    spent, keep = 0.0, set()
    for i in order:
        cost = shape_cost(shapes[i]) * per_shape_s / max(1, gpus)
        if keep and spent + cost > budget_s:
            continue
        spent += cost
        keep.add(i)
    return [s for i, s in enumerate(shapes) if i in keep], [s for i, s in enumerate(shapes) if i not in keep]


def seconds_per_shape(workspace, variant: str, family: str, gfx: str | None) -> tuple[float, str]:
    """Seconds one GPU spends on a shape of cost 1: measured from earlier finished jobs of this variant
    on this GPU kind (tune step wall time x GPUs / total cost), else assumed."""
    rates, demos = [], 0
    try:
        jobs = workspace.jobs() if workspace is not None else []
    except Exception:   # noqa: BLE001 - an unreadable earlier job never stops a plan
        jobs = []
    for j in jobs:
        if j.variant != variant or j.state != Status.SUCCEEDED or not j.shapes or (gfx and j.facts.gfx != gfx):
            continue
        if j.request.demo_dir or j.request.demo_nodes:
            demos += 1
            continue    # a simulated node's seconds say nothing of a real GPU's (a user found demos skewing --budget)
        sub = (j.steps.get("remote").info.get("sub") or {}) if j.steps.get("remote") else {}
        start = (sub.get("tune") or {}).get("started")
        end = (sub.get("after") or {}).get("started")
        gpus = len(j.facts.tune_gpus or j.facts.free_gpus or []) or 1
        held = [r.get("key") or {} for r in ((j.steps["shapes"].info.get("reused") or [])
                                             if "shapes" in j.steps else [])]    # rows from the team's store
        keyed = {tuple(sorted((c, str(v)) for c, v in k.items())) for k in held}
        tuned = [s for s in j.shapes
                 if tuple(sorted((c, str(s.get(c))) for c in held[0])) not in keyed] if held else j.shapes
        if start and end and end > start and tuned:
            rates.append((end - start) * gpus / sum(shape_cost(s) for s in tuned))
    if rates:
        rates.sort()
        return rates[len(rates) // 2], f"measured: median of {len(rates)} earlier {variant} job(s) here"
    return ASSUMED_S.get(family, ASSUMED_S["gemm"]), f"assumed {ASSUMED_S.get(family, 90):.0f} s per shape-GPU " \
        f"for the smallest shapes, more for larger ones (cost grows with M*N*K): no finished {variant} job on a " \
        f"real {gfx or 'GPU'} in this workspace to measure it from" + (
            f" ({demos} demo job(s) here ran on a simulated node, whose seconds say nothing of a GPU's)" if demos else "")
