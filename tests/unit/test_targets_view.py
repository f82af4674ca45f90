"""The campaign's live view (issue 10): one line per target; plain output says a change once, not every poll."""

import io
import types

from orchestrator.ui import TargetsView, Ui


def _info(step, done=None, total=None, age=3):
    prog = {"done": done, "total": total, "pct": 100.0 * done / total} if total else {}
    return {"current": step, "tail": {"step": step, "progress": prog, "age_s": age, "last_line": "x"}}


def test_plain_output_has_a_line_per_target_change_and_none_for_age_alone():
    out = io.StringIO()
    view = TargetsView(Ui(tty=False, stream=out))
    a = view.ui_for(types.SimpleNamespace(node="n1", container="c", variant="a8w8"))
    b = view.ui_for(types.SimpleNamespace(node="n2", container="c", variant="a8w8"))
    a.progress(None, _info("baseline"))
    a.progress(None, _info("baseline", age=9))          # only the age changed: nothing printed
    b.progress(None, _info("tune", 1, 4))
    b.progress(None, _info("tune", 2, 4))
    a.progress(None, _info("tune", 1, 4))
    assert [ln.split(" ETA ")[0] for ln in out.getvalue().splitlines()] == [
        "tune-remote: n1/c a8w8: baseline",
        "tune-remote: n2/c a8w8: tune batches 1/4 (25.0%)",
        "tune-remote: n2/c a8w8: tune batches 2/4 (50.0%)",
        "tune-remote: n1/c a8w8: tune batches 1/4 (25.0%)",
    ]
    assert set(view.rows) == {"n1/c a8w8", "n2/c a8w8"}


def test_a_tty_draws_one_row_per_target():
    out = io.StringIO()
    view = TargetsView(Ui(tty=True, stream=out))
    for n in ("n1", "n2", "n3"):
        view.ui_for(types.SimpleNamespace(node=n, container="c", variant="moe_2stages")).progress(None, _info("tune", 1, 2))
    view.stop()
    text = out.getvalue()
    assert all(f"{n}/c moe_2stages" in text for n in ("n1", "n2", "n3")) and "1/2 (50%)" in text


def test_a_progress_line_before_any_log_line_says_so():
    """A user saw 'baseline last log line - ago' before the step had written anything."""
    import io
    from types import SimpleNamespace

    from orchestrator.ui import Ui
    out = io.StringIO()
    ui = Ui(tty=False, stream=out)
    job = SimpleNamespace(job_id="j1")
    ui.progress(job, {"current": "baseline", "tail": {}})
    ui.progress(job, {"current": "tune", "tail": {"age_s": 3}})
    assert out.getvalue().splitlines() == ["tune-remote: j1: baseline (no log line yet)",
                                           "tune-remote: j1: tune last log line 3s ago"]
