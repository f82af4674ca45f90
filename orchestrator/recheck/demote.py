"""``recheck --demote``: the ``slower_now`` rows leave the live table with promotion's guarantees (node op
``demote``: a backup of the live table, a complete new file renamed over it, the stale live JIT module
moved aside), then the engaged check: a fresh process with the live configuration only (the container's
own environment, no private JIT dir; it builds the live module from the new table) benchmarks the demoted
shapes on the pinned GPU, and each must now run at the time of the "without" arm, not of its old row.
The node keeps the demotion in ``<backup_dir>/promotion.json`` in the promotion record's form: the
``rollback`` op restores the live table byte for byte and puts the set-aside module back.
"""

from __future__ import annotations

from ..outcome.keys import norm_key_value
from ..remote.shell import Cmd
from ..session import NodeSession
from ..steps.armargs import arm_args
from ..steps.bench import announced, call_path, measured_by_call, plan_bench
from ..variants import jit_modules
from .rows import Promoted


def backup_dir(node_dir: str, variant: str, n: int = 0) -> str:
    """The demotion record's dir on the node: one per variant and live table (``n``: the variant's n-th table)."""
    return f"{node_dir}/demotion/{variant}" + (f"-{n}" if n else "")


def demote(session: NodeSession, variant_name: str, rows: list[Promoted], judged: dict, *, live: str, bdir: str,
           gpu: str, scripts: dict | None = None, paths=None) -> dict:
    """Remove ``rows`` (one variant, one live table) from the live table; the node's record + ``engaged``."""
    variant, facts = session.variant(variant_name), session.facts
    env = {**(facts.env or {}), **session.target.container.env}
    res = session.call("demote", {"live": live, "backup_dir": bdir,
                              "keys": [r.node_key() for r in rows], "modules": jit_modules(variant.name),
                              "package_dir": facts.package_dir, "jit_dir_env": env.get("AITER_JIT_DIR")})
    res.pop("ok", None)
    if res.get("nothing") or variant.bench is None:
        return res
    res["engaged"] = check(session, variant, rows, judged, gpu=gpu, scripts=scripts or {}, paths=paths)
    return res


def check(session: NodeSession, variant, rows: list[Promoted], judged: dict, *, gpu: str,
          scripts: dict, paths=None) -> dict:
    """Each demoted shape in a fresh process on the live configuration: served as the "without" arm was
    (its time nearer that arm's median than its old row's)?"""
    root = session.facts.aiter_root
    calls = plan_bench(variant, [r.shape for r in rows])
    env = {"HIP_VISIBLE_DEVICES": gpu}
    # a tuner's --run_config (steps/armargs.py, measure.arm_paths): the live table as demoted ("live" arm)
    cmds = [Cmd((session.target.container.python, scripts.get(c.script)
                 or (call_path(c, paths) if paths is not None else f"{root}/{c.script}"), *args),
                env=env, cwd=root) for c in calls
            if (args := c.args if paths is None else arm_args(c.args, "live", paths)) is not None]
    ran = session.call("run", {"argv": ["sh", "-c", announced(cmds, "2>&1")], "timeout_s": 3600}, timeout=3700)
    text = (ran.get("stdout") or "") + ("\n" + ran["stderr"] if ran.get("stderr") else "")
    cols = list(variant.key_columns)
    values = {tuple(norm_key_value(m["key"][c]) for c in cols): m["value"]
              for m in measured_by_call(variant.bench, [r.shape for r in rows], text, [c.shapes for c in calls])}
    out = {"engaged": 0, "total": len(rows), "shapes": []}
    for r in rows:
        now = values.get(tuple(norm_key_value(r.key[c]) for c in cols))
        j = judged.get(r.ident()) or {}
        w, wo = j.get("with_row"), j.get("without_row")
        ok = now is not None and w is not None and wo is not None and abs(now - wo) <= abs(now - w)
        out["engaged"] += int(ok)
        out["shapes"].append({"key": r.key, "value": now, "with_row": w, "without_row": wo, "engaged": ok})
    return out
