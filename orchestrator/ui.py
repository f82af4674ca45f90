"""What the user sees: a live rich view on a TTY, plain one-line events otherwise (machine-friendly)."""

from __future__ import annotations

import sys
import time

from .state import Status
from .workflow import REMOTE_STEPS

# rich is imported when something is drawn, not when the CLI starts (`status --json` never draws)


def Table(*args, grid: bool = False, **kwargs):  # noqa: N802 - rich's Table (grid=True: Table.grid)
    from rich.table import Table as _Table
    return _Table.grid(**kwargs) if grid else _Table(*args, **kwargs)


def Live(*args, **kwargs):  # noqa: N802
    from rich.live import Live as _Live
    return _Live(*args, **kwargs)


def _fmt_age(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Ui:
    def __init__(self, *, tty: bool | None = None, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.quiet = quiet
        self._console = None
        self._console_args = dict(file=self.stream, force_terminal=self.tty, highlight=False,
                                  soft_wrap=not self.tty)
        self._live = None
        self._last_line = ""
        self._eta_base: tuple[float, float] | None = None
        self._results_shown = 0      # per-shape tuning results printed so far

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console
            self._console = Console(**self._console_args)
        return self._console

    # -- events --------------------------------------------------------------------------------
    def event(self, text: str) -> None:
        if self.quiet:
            return
        if self.tty:
            self.console.print(f"[bold cyan]•[/] {text}")
        else:
            print(f"tune-remote: {text}", file=self.stream, flush=True)

    def step(self, name: str) -> None:
        self.event(f"step {name}")

    def show_shapes(self, variant, shapes: list[dict], described: list[str], misses=None,
                    full_list: str | None = None) -> None:
        """The shapes to tune, summarised: counts per (N,K) (the key without its M), the first few rows in
        tuning order, where the whole list is. ``misses``: how often the log missed each."""
        if self.quiet:
            return
        for d in described:
            self.event(d)
        cols = list(variant.key_columns)
        rows = [[str(s.get(c, "")) for c in cols] for s in shapes]
        if misses:
            cols.append("misses")
            for r, n in zip(rows, misses):
                r.append(str(n))
        groups = shape_groups(variant, shapes, misses)
        where = f"; all {len(shapes)}: {full_list}" if full_list else ""
        if self.tty:
            table = Table(title=f"{len(shapes)} {variant.name} shapes to tune, {len(groups)} group(s)",
                          show_lines=False, title_justify="left")
            for c in ("shapes of", "count", "M", "misses"):
                table.add_column(c, justify="left" if c == "shapes of" else "right")
            for label, n, m_range, missed in groups[:SHOWN_GROUPS]:
                table.add_row(label, str(n), m_range, str(missed))
            self.console.print(table)
            if len(groups) > SHOWN_GROUPS:
                self.console.print(f"... and {len(groups) - SHOWN_GROUPS} more group(s)")
            self.console.print(f"first {min(FIRST_ROWS, len(rows))} in tuning order ({','.join(cols)}): "
                               + "  ".join(",".join(r) for r in rows[:FIRST_ROWS]) + where)
        else:
            print(f"tune-remote: {len(shapes)} {variant.name} shapes to tune, {len(groups)} group(s):",
                  file=self.stream)
            for label, n, m_range, missed in groups[:SHOWN_GROUPS]:
                print(f"  {label}: {n} shape(s), M {m_range}, {missed} miss(es)", file=self.stream)
            if len(groups) > SHOWN_GROUPS:
                print(f"  ... and {len(groups) - SHOWN_GROUPS} more group(s)", file=self.stream)
            print(f"tune-remote: first {min(FIRST_ROWS, len(rows))} in tuning order: " + ",".join(cols)
                  + where, file=self.stream)
            for r in rows[:FIRST_ROWS]:
                print("  " + ",".join(r), file=self.stream)

    def confirm(self, question: str) -> bool:
        self.console.print(f"{question} [y/N] ", end="")
        try:
            answer = input()
        except EOFError:
            return False
        return answer.strip().lower() in ("y", "yes")

    # -- live progress -------------------------------------------------------------------------
    def _fields(self, info: dict) -> tuple:
        """(current step, batches done, total, pct, ETA s, last-line age s, last line) of a poll's info."""
        current = info.get("current") or "starting"
        tail = info.get("tail") or {}
        prog = (tail.get("progress") or {}) if tail.get("step", current) == current else {}
        done, total, pct = prog.get("done"), prog.get("total"), prog.get("pct")
        eta = self._eta(pct) if current == "tune" else None
        return current, done, total, pct, eta, tail.get("age_s"), tail.get("last_line")

    def progress(self, job, info: dict) -> None:
        if self.quiet:
            return
        current, done, total, pct, eta, _age, _last = self._fields(info)
        tail = info.get("tail") or {}
        line = (f"{job.job_id}: {current}"
                + (f" batches {done}/{total} ({pct:.1f}%)" if total else "")
                + (f" ETA {_fmt_age(eta)}" if eta is not None else "")
                + (f" last log line {_fmt_age(tail.get('age_s'))} ago" if tail.get("age_s") is not None
                   else " (no log line yet)"))
        if not self.tty:
            if line != self._last_line:
                print(f"tune-remote: {line}", file=self.stream, flush=True)
                self._last_line = line
            for r in self._new_results(info):
                print(f"tune-remote: {_result_text(r)}", file=self.stream, flush=True)
            return
        table = Table(grid=True, padding=(0, 2))
        table.add_row("[bold]job[/]", job.job_id)
        sub = info.get("sub", {})
        for name in REMOTE_STEPS:
            st = sub.get(name, {}).get("status", Status.PENDING)
            mark = {"done": "[green]done[/]", "partial": "[yellow]partial[/]", "failed": "[red]failed[/]",
                    "running": "[cyan]running[/]"}.get(st, st)
            extra = ""
            if name == current and total:
                extra = f"batches {done}/{total}  {pct:.1f}%" + (f"  ETA {_fmt_age(eta)}" if eta else "")
            table.add_row(f"[bold]{name}[/]", f"{mark}  {extra}")
        table.add_row("[bold]last line[/]", f"{_fmt_age(tail.get('age_s'))} ago: {(tail.get('last_line') or '')[:100]}")
        self._new_results(info)
        results = (info.get("results") or [])[-8:]
        if results:    # the live tuning table (P-11): the newest per-shape results as the tuner prints them
            rt = Table(title=_results_title(info, len(results)), show_lines=False, title_justify="left")
            for c, j in (("shape", "left"), ("kernel", "left"), ("us", "right"), ("TFLOPS", "right")):
                rt.add_column(c, justify=j)
            for r in results:
                rt.add_row(r["shape"], (r["kernel"] or "[red]no kernel[/]")[:60], _num(r["us"]), _num(r["tflops"]))
            table.add_row("", rt)
        if self._live is None:
            self._live = Live(table, console=self.console, refresh_per_second=4, transient=True)
            self._live.start()
        else:
            self._live.update(table)

    def _new_results(self, info: dict) -> list[dict]:
        """Per-shape results not shown yet (``results_seen`` counts every one parsed, the list keeps the newest)."""
        seen = int(info.get("results_seen") or 0)
        new = seen - self._results_shown
        self._results_shown = seen
        return (info.get("results") or [])[-new:] if new > 0 else []

    def _eta(self, pct):
        if pct is None:
            return None
        now = time.monotonic()
        if self._eta_base is None or pct < self._eta_base[1]:
            self._eta_base = (now, pct)
            return None
        t0, p0 = self._eta_base
        if pct <= p0 or pct >= 100:
            return 0 if pct >= 100 else None
        return (now - t0) / (pct - p0) * (100 - pct)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class TargetsView:
    """A campaign's live view (issue 10): one line per target job with its step, batches done/total, ETA and
    the age of its last log line. On a TTY a rich table redrawn in place; otherwise a line per target when
    its step or its batch count changes (never for the age alone)."""

    def __init__(self, ui: Ui):
        import threading
        self.ui = ui
        self.rows: dict[str, tuple] = {}
        self.lock = threading.Lock()
        self._said: dict[str, tuple] = {}
        self._live = None

    def ui_for(self, sub) -> "Ui":
        return _TargetUi(self, f"{sub.node}/{sub.container} {sub.variant}")

    def update(self, label: str, fields: tuple) -> None:
        if self.ui.quiet:
            return
        current, done, total, pct, eta, age, _last = fields
        with self.lock:
            self.rows[label] = fields
            if not self.ui.tty:
                key = (current, done, total)
                if self._said.get(label) != key:
                    self._said[label] = key
                    print(f"tune-remote: {label}: {current}" + (f" batches {done}/{total} ({pct:.1f}%)" if total else "")
                          + (f" ETA {_fmt_age(eta)}" if eta is not None else ""), file=self.ui.stream, flush=True)
                return
            table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
            for col in ("target", "step", "batches", "ETA", "last line"):
                table.add_column(col)
            for name, (cur, d, t, p, e, a, _l) in self.rows.items():
                table.add_row(name, cur, f"{d}/{t} ({p:.0f}%)" if t else "-", _fmt_age(e) if e is not None else "-",
                              f"{_fmt_age(a)} ago")
            if self._live is None:
                self._live = Live(table, console=self.ui.console, refresh_per_second=4, transient=True)
                self._live.start()
            else:
                self._live.update(table)

    def stop(self) -> None:
        with self.lock:
            if self._live is not None:
                self._live.stop()
                self._live = None


class _TargetUi(Ui):
    """A target job's Ui inside a campaign: its progress goes to the shared view, its events stay quiet."""

    def __init__(self, view: TargetsView, label: str):
        super().__init__(quiet=True, tty=False, stream=view.ui.stream)
        self.view, self.label = view, label

    def progress(self, job, info: dict) -> None:
        self.view.update(self.label, self._fields(info))


SHOWN_GROUPS, FIRST_ROWS = 12, 5


def shape_groups(variant, shapes: list[dict], misses=None) -> list[tuple[str, int, str, int]]:
    """(label of the key without M, e.g. 'n=7168 k=256'; shapes; M range; misses) per group, first seen first."""
    mcol = "token" if "token" in variant.key_columns else "m"
    rest = [c for c in variant.key_columns if c != mcol]
    out: dict[str, list] = {}
    for i, s in enumerate(shapes):
        label = " ".join(f"{c}={s.get(c, '')}" for c in rest)
        g = out.setdefault(label, [0, [], 0])
        g[0] += 1
        g[1].append(s.get(mcol))
        g[2] += int(misses[i]) if misses and i < len(misses) else 0
    def span(ms):
        nums = sorted(m for m in ms if isinstance(m, (int, float)))
        return (f"{nums[0]}..{nums[-1]}" if len(nums) > 1 else str(nums[0])) if nums else "-"
    return [(label, n, span(ms), missed) for label, (n, ms, missed) in out.items()]


def _results_title(info: dict, shown: int) -> str:
    """What the tuner's per-shape lines say so far. GEMM tuners name a shape's kernel only when a batch holds
    one shape (--batch 1) but always print 'No kernel can be used': counting those lines alone made a good run
    look failed ('tuned so far: 10 shape(s)', all 'no kernel', while 107 rows were tuned)."""
    seen = int(info.get("results_seen", shown) or 0)
    none = int(info.get("results_none") or 0)
    if not none:
        return f"tuned so far: {seen} shape(s) (newest last)"
    if none == seen:
        return (f"{none} shape(s) found no kernel so far (the tuner names the kernel it chose only with --batch 1: "
                "the batches above count the shapes tuned)")
    return f"tuned so far: {seen - none} shape(s) with a kernel, {none} with none (newest last)"


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _result_text(r: dict) -> str:
    if not r.get("kernel"):
        return f"no kernel for {r['shape']}"
    return f"tuned {r['shape']}: {r['kernel']} {_num(r['us'])} us, {_num(r['tflops'])} TFLOPS"
