"""steps/riders.py: a rider's answer is used only for exactly the request the step would send."""

from types import SimpleNamespace

from orchestrator.records import Facts
from orchestrator.steps import riders


class _Ctx:
    def __init__(self, ridden):
        self.job = SimpleNamespace(facts=Facts(riders=ridden))
        self.calls = []

    def call(self, op, req, **kw):
        self.calls.append((op, req))
        return {"ok": True, "asked": True}


def test_the_same_request_uses_the_ridden_answer_once():
    ctx = _Ctx({"tuned_keys": {"request": {"patterns": ["/a/*x*.csv"], "cu_num": 256}, "answer": {"files": {}}}})
    assert riders.call(ctx, "tuned_keys", {"patterns": ["/a/*x*.csv"], "cu_num": 256}) == {"files": {}}
    assert ctx.calls == [] and ctx.job.facts["riders"] == {}
    assert riders.call(ctx, "tuned_keys", {"patterns": ["/a/*x*.csv"], "cu_num": 256}) == {"ok": True, "asked": True}


def test_a_different_request_is_asked_for_itself():
    ctx = _Ctx({"probe": {"request": {"tune_script": "/old/path.py"}, "answer": {"tuner_help": "usage: x"}}})
    assert riders.call(ctx, "probe", {"tune_script": "/new/path.py"})["asked"]
    assert ctx.calls == [("probe", {"tune_script": "/new/path.py"})]


def test_no_riders_at_all_asks():
    ctx = _Ctx(None)
    assert riders.call(ctx, "probe", {"x": 1})["asked"]
    riders.drop(ctx, "probe")
