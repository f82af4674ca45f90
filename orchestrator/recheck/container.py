"""One recheck on one connected container: discover (what runs there now, a free GPU, no tuning job of the
variant running), then per (variant, live table) the benchmark and the verdicts, then ``--demote``."""

from __future__ import annotations

import time
from pathlib import Path

from ..context import owner
from ..records import Facts
from ..session import NodeSession
from ..state import Workspace, atomic_write
from ..moe_quant import objective_of
from ..outcome.keys import norm_key_value
from ..variants import get_variant
from .judge import counts, judge_rows, objective_notes
from .rows import Promoted


def facts_summary(f: Facts) -> dict:
    return {"version": f.version, "version_raw": f.get("version_raw"), "rocm": f.get("rocm_version"),
            "gfx": f.gfx, "gpu": f.get("gpu_name"), "cu_num": f.cu_num}


class Recheck:
    """The recheck ``rid`` of ``rows`` on one container, over a node session (no job: nothing of it is left
    running on the node when the laptop goes; a lost connection says to run the command again)."""

    def __init__(self, ws: Workspace, target, settings, ui, *, rid: str, node: str, container: str, repeats: int,
                 team: bool = False):
        self.ws, self.target, self.settings, self.ui = ws, target, settings, ui
        self.rid, self.node, self.container, self.repeats = rid, node, container, repeats
        self.team = team       # with the team's store: the rows not in the live table are listed (``missing``)
        self.session = NodeSession(target, settings, ui, node=node)

    def discover(self, variants: list[str]) -> Facts:
        from ..errors import JobError
        from . import NoFreeGpu
        s = self.session
        f = s.discover(s.discover_request(gpus=True, lock={"variant": variants[0], "job_id": self.rid,
                                                           "owner": owner(workspace=self.ws)}), timeout=300)
        if not f.aiter_root:
            raise JobError(f"no aiter installation found in {self.node}/{self.container}",
                           hint="set aiter_path for this container in inventory.yaml")
        if not f.free_gpus:
            busy = "; ".join(f"GPU {p}: {', '.join(g.get('busy') or [])}" for p, g in (f.gpus or {}).items())
            raise NoFreeGpu(f"no free GPU on {self.node} for {self.container}" + (f" ({busy})" if busy else ""),
                            hint="run the recheck when a GPU is idle (a recheck measures, it needs one GPU alone)")
        return f

    def run(self, rows: list[Promoted], *, demote: bool, path: Path) -> dict:
        from ..steps.prepare import hip_devices
        from .demote import backup_dir
        from .demote import demote as demote_rows
        from .measure import measure
        self.target.connect()
        self.ui.event(f"recheck {self.rid}: {len(rows)} promoted row(s) on {self.node}/{self.container}")
        facts = self.discover(sorted({r.variant for r in rows}))
        gpu_phys = int(facts.free_gpus[0])
        gpu = str(hip_devices(facts, [gpu_phys])[0])
        node_dir = f"{facts.workdir or f'{facts.aiter_root}/tune_logs'}/.tune-remote/{self.rid}"
        rows, elsewhere = self.resolve(rows)
        groups: dict[tuple, list[Promoted]] = {}
        for r in rows:
            groups.setdefault((r.variant, r.live), []).append(r)
        records, notes, demotion, metrics, bench_env = [], [], {"tables": []}, {}, {}
        for r, why in elsewhere:
            records.append({**self.record(r), "why": why})
        for (variant, live), group in groups.items():
            self.ui.event(f"{variant}: {len(group)} row(s) of {live}, {self.repeats} run(s) per arm "
                          f"on GPU {gpu_phys}")
            m = measure(self.session, variant, group, live=live, node_dir=node_dir, gpu=gpu, repeats=self.repeats)
            if m.log:
                atomic_write(path / f"bench-{variant}.log", m.log.encode())
                bench_env[variant] = m.env
            bench = self.session.variant(variant).bench
            hib = bool(bench.higher_is_better) if bench else False
            if bench:
                metrics[variant] = f"{bench.metric} ({'higher' if hib else 'lower'} is better)"
            judged = judge_rows({k: (v["with"], v["without"]) for k, v in m.samples.items()}, hib)
            for r in group:
                j = judged.get(r.ident()) or {}
                rec = {**self.record(r), "kernelName": m.kernels.get(r.ident()), **j}
                if r in m.not_live:
                    rec["why"] = "not in the live table now"
                elif not j.get("verdict"):
                    rec["why"] = "not measured"
                records.append(rec)
            mine = [r for r in m.not_live if not r.table]
            if mine:
                notes.append(f"{len(mine)} row(s) the workspace's jobs promoted into {live} are not in it "
                             "now (replaced or removed since): not rechecked")
            theirs: dict[tuple, int] = {}
            for r in m.not_live:
                if r.table:
                    theirs[(r.job_id, r.origin)] = theirs.get((r.job_id, r.origin), 0) + 1
            for (job_id, origin), n in theirs.items():
                notes.append(f"{n} row(s) the team's store says job {job_id} ({origin}) promoted into {live} are "
                             "not in it now (the container recreated, the rows replaced or removed): not rechecked "
                             "(listed under `missing` in recheck.json)")
            slower = [r for r in group if (judged.get(r.ident()) or {}).get("verdict") == "slower_now"]
            if demote and slower:
                bdir = backup_dir(node_dir, variant, sum(t["variant"] == variant for t in demotion["tables"]))
                res = demote_rows(self.session, variant, slower, judged, live=live, bdir=bdir, gpu=gpu, scripts=m.scripts,
                                  paths=m.paths)
                demotion["tables"].append({"variant": variant, "live": live, "backup": res.get("backup"),
                                           "backup_dir": bdir, "demoted": res.get("demoted"),
                                           "modules": res.get("modules"), "engaged": res.get("engaged"),
                                           "already": res.get("already")})
                self.ui.event(f"demoted {len(res.get('demoted') or [])} slower_now row(s) from {live} "
                              f"(backup {res.get('backup')})")
        apart: dict[tuple, int] = {}
        for r, why in elsewhere:
            apart[(r.job_id, r.origin, r.table, why)] = apart.get((r.job_id, r.origin, r.table, why), 0) + 1
        for (job_id, origin, table, why), n in apart.items():
            notes.append(f"{n} row(s) the team's store says job {job_id} ({origin}) promoted into {table}: {why}, "
                         "not rechecked")
        then, lines = objective_notes(rows, self.moe_objective(rows, facts), lambda v: get_variant(v).family)
        for rec in records:      # MoE rows tuned under another objective (issue 36): their us is never compared
            key = (rec["variant"], rec["live"], tuple(norm_key_value(v) for v in rec["key"].values()))
            if key in then:
                rec["objective_then"] = then[key]
        notes += lines
        at_promotion = {r.job_id: r.facts for r in rows + [r for r, _ in elsewhere]}
        doc = {"id": self.rid, "node": self.node, "container": self.container, "gpu": gpu_phys,
               "repeats": self.repeats, "time": time.time(), "node_dir": node_dir,
               "metrics": metrics, "bench_env": bench_env, "now": facts_summary(facts),
               "at_promotion": at_promotion, "rows": records,
               "counts": counts([r.get("verdict") for r in records]), "notes": notes}
        missing = [{k: v for k, v in rec.items() if k in MISSING_KEYS} for rec in records
                   if rec.get("why") and rec.get("why") != "not measured"]
        if missing and self.team:
            doc["missing"] = missing
        if demote:
            demotion["undo"] = (f"tune-remote recheck --node {self.node} --container {self.container} "
                                f"--undo {self.rid}")
            doc["demotion"] = demotion
        return doc

    def record(self, r: Promoted) -> dict:
        """A row's record: what it is and where it came from (the laptop: ``origin``, the store's job uid)."""
        rec = {"variant": r.variant, "live": r.live or r.table, "key": r.key, "job_id": r.job_id, "promoted_at": r.at}
        if r.origin:
            rec["origin"] = r.origin
        if r.table:
            rec["source"] = "store"
        if r.job_uid and r.origin:
            rec["job_uid"] = r.job_uid
        return rec

    def resolve(self, rows: list[Promoted]) -> tuple[list[Promoted], list[tuple[Promoted, str]]]:
        """The store's rows (promoted by another laptop: no live path known here) get the live table their
        variant has on this container now (its ``AITER_CONFIG_*`` first path, else the default table); a row
        whose table is not that one comes back apart, with why."""
        from dataclasses import replace
        env = {**(self.session.facts.env or {}), **self.target.container.env}
        root = self.session.facts.aiter_root
        out, apart = [], []
        for r in rows:
            if r.live:
                out.append(r)
                continue
            variant = self.session.variant(r.variant)
            first = (env.get(variant.config_env) or "").split(":")[0]
            live = (first if first.startswith("/") else f"{root}/{first}") if first else f"{root}/{variant.tuned_csv}"
            if Path(live).name == r.table:
                out.append(replace(r, live=live))
            else:
                apart.append((r, f"its table is not the live table of {r.variant} here ({live})"))
        return out, apart

    def moe_objective(self, rows: list[Promoted], facts: Facts) -> str | None:
        """The node's fused-MoE tuner's objective now (its source, one probe round trip; only with MoE rows)."""
        moe = [r for r in rows if get_variant(r.variant).family == "moe"]
        if not moe:
            return None
        script = f"{facts.meta_root or facts.aiter_root}/{get_variant(moe[0].variant).tune_script}"
        got = self.session.call("probe", {"moe_tuner_src": script}).get("moe_objective")
        return got or objective_of(facts)


MISSING_KEYS = ("variant", "live", "key", "job_id", "origin", "promoted_at", "source", "why")


def restore(target, settings, ui, tables: list[dict]) -> list[dict]:
    """The node's ``rollback`` op on every demotion record: the live table byte for byte, the module back."""
    session = NodeSession(target, settings, ui)
    out = []
    for t in tables:
        res = session.call("rollback", {"backup_dir": t["backup_dir"]})
        res.pop("ok", None)
        out.append({"live": res.get("live"), "backup": res.get("backup"), "already": bool(res.get("already"))})
        ui.event(f"restored {res.get('live')} from {res.get('backup')}" if not res.get("already")
                 else f"{res.get('live')}: already restored")
    return out
