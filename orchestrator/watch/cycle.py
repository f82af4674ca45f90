"""One watch: re-attach what an earlier watch of the same NAME left running, then cycles. A cycle reads each
target's logs from where the last one stopped (one round trip per target), commits the new offsets and miss
counts (``offsets.json``, one rename), notes upgrades, and tunes the most-missed shapes not tuned yet."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConnectionLost, ObserverError, TuneRemoteError
from ..remote.transport import TransportError
from ..state import Status
from . import upgrade
from .launch import Launcher, Outcome
from .mine import WatchTarget, add_seen, candidates, read_target
from .served import served
from .store import WatchStore, shape_key


@dataclass
class WatchConfig:
    logs: list
    variants: list | None = None        # None: every variant the logs miss (auto)
    min_misses: int = 1
    retune: bool = False
    profiles: list = field(default_factory=list)   # --profile: traces in the container (files or directories)


@dataclass
class CycleResult:
    cycle: int
    outcomes: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    bytes: int = 0
    round_trips: int = 0
    seconds: float = 0.0
    new_shapes: int = 0

    @property
    def failed(self) -> bool:
        return failed(self.outcomes)


def failed(outcomes) -> bool:
    """A job left running (connection lost) or ended other than succeeded; a skip (no free GPU) is not."""
    return any(o.detached or (o.state != Status.SUCCEEDED and not o.retry) for o in outcomes)


class Watch:
    def __init__(self, store: WatchStore, targets: list[WatchTarget], config: WatchConfig, launcher: Launcher,
                 ui, recheck: Callable[[WatchTarget], dict] | None = None):
        self.store, self.targets, self.config, self.launcher, self.ui = store, targets, config, launcher, ui
        self.recheck = recheck
        self._open: dict[str, object] = {}     # label -> context.Target kept open between cycles

    # -- targets ---------------------------------------------------------------------------------
    def _target(self, wt: WatchTarget):
        t = self._open.get(wt.label)
        if t is None:
            t = self._open[wt.label] = wt.open()
            t.connect()
        return t

    def _read(self, wt: WatchTarget, previous: dict, variant: str | None):
        """One round trip; a connection kept open since the last cycle that went stale (sshd's idle timeout,
        a helper that idled out) is opened again once, at once, instead of losing the cycle."""
        for attempt in (1, 2):
            reused = wt.label in self._open
            try:
                return read_target(self._target(wt), wt.label, list(self.config.logs), previous, variant,
                                   profiles=list(self.config.profiles))
            except (TuneRemoteError, TransportError):
                self._drop(wt.label)
                if attempt == 2 or not reused:
                    raise
        raise AssertionError("unreachable")

    def _drop(self, label: str) -> None:
        t = self._open.pop(label, None)
        if t is not None:
            try:
                t.close()
            except (TuneRemoteError, TransportError, OSError):
                pass

    def close(self) -> None:
        for label in list(self._open):
            self._drop(label)

    def _by_label(self, labels) -> list[WatchTarget]:
        return [t for t in self.targets if t.label in set(labels)] or list(self.targets)

    # -- jobs ------------------------------------------------------------------------------------
    def reattach(self) -> list[Outcome]:
        """The jobs a stopped or killed watch of this NAME left open: carried to their end, none launched
        again (the workspace has them; a job whose start was recorded but never saved is started)."""
        out = []
        for e in self.store.open_jobs():
            self.ui.event(f"watch {self.store.name}: job {e['job_id']} was left running; re-attaching")
            out.append(self._drive(e["job_id"], e["variant"], e.get("shapes") or [],
                                   self._by_label(e.get("targets") or [])))
        return out

    def _drive(self, job_id: str, variant: str, shapes: list, targets: list[WatchTarget]) -> Outcome:
        try:
            out = self.launcher.drive(job_id, variant, shapes, targets)
        except (ConnectionLost, ObserverError) as exc:
            self.ui.event(f"watch: job {job_id} goes on on the node ({exc.one_line()}); the next cycle re-attaches")
            return Outcome(job_id, Status.RUNNING, [], error=exc.one_line(), detached=True)
        if out.detached:
            return out
        if out.retry:
            self.store.record("skipped", reason=out.error, job_id=job_id, variant=variant)
            self.store.record("job", job_id=job_id, state=out.state, variant=variant, tuned=[], error=out.error)
            return out
        # a job that failed before its shapes were settled: the shapes asked for count as tried (at most once
        # per watch; --retune); else the shapes it tuned (a --budget cut leaves the rest for the next cycle)
        tuned = out.tuned or ([] if out.state == Status.SUCCEEDED else list(shapes))
        self.store.record("job", job_id=job_id, state=out.state, variant=variant, tuned=tuned,
                          **({"error": out.error} if out.error else {}))
        if out.tables:
            data = self.store.load_offsets()
            for label, table in out.tables.items():
                data["targets"].setdefault(label, {}).setdefault("tables", {})[variant] = table
            self.store.save_offsets(data)
        if out.promoted:
            self.store.record("promoted", job_id=job_id, rows=out.promoted, variant=variant)
        return out

    # -- one cycle ---------------------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        t0 = time.monotonic()
        data = self.store.load_offsets()
        n = data["cycle"] + 1
        res = CycleResult(cycle=n)
        variants = self.config.variants
        one = variants[0] if variants and len(variants) == 1 else None
        reads, upgrades = [], []
        for wt in self.targets:
            prev = data["targets"].get(wt.label) or {}
            try:
                read = self._read(wt, prev.get("logs") or {}, one)
            except (TuneRemoteError, TransportError) as exc:
                reason = f"{wt.label}: {getattr(exc, 'message', exc)}"
                res.skipped.append(reason)
                self.store.record("skipped", reason=reason, cycle=n, target=wt.label)
                continue
            reads.append(read)
            res.bytes += read.bytes
            res.round_trips += read.round_trips
            diff = upgrade.changed(prev.get("facts"), read.facts)
            if diff:
                upgrades.append((wt.label, {"changed": diff, "before": prev.get("facts"), "after": read.facts}))
            data["targets"][wt.label] = {**prev, "logs": read.logs, "facts": read.facts or prev.get("facts") or {}}
        seen_now = []
        for read in reads:
            seen_now.extend(add_seen(data["seen"], read, n, variants))
            if read.profile_error:
                self.ui.event(f"watch: {read.label}: profile not read ({read.profile_error}); this cycle ranks its "
                              "shapes by misses")
        fresh: dict = {}      # the shares this cycle's profiles give (the largest over the targets) replace older
        for read in reads:
            for key, share in read.shares.items():
                fresh[key] = max(share, fresh.get(key, 0.0))
        if fresh:
            data["shares"] = {**(data.get("shares") or {}), **fresh}
        data["cycle"] = n
        pending = data.setdefault("recheck_pending", {})   # an upgrade whose recheck a killed watch never ended
        pending.update(upgrades)
        self.store.save_offsets(data)              # the cycle's reading is committed here, whole
        res.new_shapes = len(seen_now)
        self.store.record("cycle", cycle=n, targets=[r.label for r in reads], bytes=res.bytes,
                          round_trips=res.round_trips, rotated=[f"{r.label}:{p}" for r in reads for p in r.rotated],
                          missing=[f"{r.label}:{p}" for r in reads for p in r.missing])
        for s in seen_now:
            self.store.record("seen", cycle=n, **s)
        for label, up in list(pending.items()):
            wt = next((t for t in self.targets if t.label == label), None)
            if wt is not None:
                self._upgrade(wt, up["changed"], up["before"], up["after"])
        for r in reads:
            for p in r.missing:
                self.ui.event(f"watch: {r.label}: log {p} not found (read when it appears)")
            for p in r.rotated:
                self.ui.event(f"watch: {r.label}: log {p} was rotated or truncated; read from its start")
        self._launch(data, n, seen_now, res, [r.label for r in reads])
        res.seconds = round(time.monotonic() - t0, 3)
        return res

    def _upgrade(self, wt: WatchTarget, diff: dict, before: dict, after: dict) -> None:
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())
        self.ui.event(f"watch: {wt.label} was upgraded ({what}); rechecking its promoted rows")
        found = self.recheck(wt) if self.recheck is not None else {"recheck": "unavailable"}
        self.store.record("upgrade", target=wt.label, changed=diff, before=before, after=after, **found)
        if found.get("recheck") in ("unavailable", "failed", "none"):
            why = found.get("error") or found.get("reason")
            self.ui.event(f"watch: recheck of {wt.label} {found['recheck']}" + (f" ({why})" if why else "") +
                          "; the upgrade is in the ledger" +
                          ("; tried again next cycle" if found["recheck"] == "failed" else ""))
        if found.get("recheck") == "failed":
            return                                  # still pending: the next cycle tries again
        data = self.store.load_offsets()
        data.setdefault("recheck_pending", {}).pop(wt.label, None)
        self.store.save_offsets(data)

    def _launch(self, data: dict, n: int, seen_now: list, res: CycleResult, answered: list) -> None:
        busy = {shape_key(e["variant"], s) for e in self.store.open_jobs() for s in e.get("shapes") or []}
        retune_now = {shape_key(s["variant"], s["shape"]) for s in seen_now} if self.config.retune else None
        shares = data.get("shares") if self.config.profiles else None
        picked = candidates(data["seen"], self.store.tried(), busy, self.config.min_misses, retune_now, shares)
        if not picked:
            said = "no new miss lines" if not seen_now else "no shape to tune (all tuned already or seen fewer " \
                                                            f"than {self.config.min_misses} time(s))"
            self.ui.event(f"watch {self.store.name}: cycle {n}: {said}; nothing launched")
            return
        for variant, ents in picked.items():
            targets = [t for t in self.targets if t.label in answered]
            ents = self._not_served(data, variant, ents, targets)
            if not ents:
                continue
            job_id = self.launcher.job_id(n, variant)
            shapes = [e["shape"] for e in ents]
            labels = sorted({t for e in ents for t in e.get("targets") or []})
            share = (shares or {}).get(shape_key(variant, ents[0]["shape"]))
            first = (f"largest share of GPU time first ({100 * share:.1f} %)" if share else
                     f"most missed first ({ents[0]['count']} misses)")
            self.ui.event(f"watch {self.store.name}: cycle {n}: tuning {len(shapes)} {variant} shape(s), {first}, "
                          f"job {job_id}")
            self.store.record("job", job_id=job_id, state=Status.RUNNING.value, variant=variant, shapes=shapes,
                              targets=[t.label for t in targets], seen_on=labels, cycle=n)
            res.outcomes.append(self._drive(job_id, variant, shapes, targets))

    def _not_served(self, data: dict, variant: str, ents: list, targets: list[WatchTarget]) -> list:
        """``ents`` less the shapes a target's live table (known from this watch's jobs there) has rows for;
        those are recorded as ``skipped`` once and never asked about again."""
        shapes = [e["shape"] for e in ents]
        have: list = []
        for wt in targets:
            table = ((data["targets"].get(wt.label) or {}).get("tables") or {}).get(variant)
            if not table:
                continue
            try:
                have.extend(s for s in served(self._target(wt), variant, table, shapes) if s not in have)
            except (TuneRemoteError, TransportError) as exc:
                self.ui.event(f"watch: {wt.label}: live table not read ({getattr(exc, 'message', exc)}); "
                              "its shapes are tuned")
        if have:
            self.store.record("skipped", reason=f"a live table serves {len(have)} {variant} shape(s) already",
                              variant=variant, served=have)
            self.ui.event(f"watch {self.store.name}: {len(have)} {variant} shape(s) have a live row already; "
                          "not tuned")
        return [e for e in ents if e["shape"] not in have]
