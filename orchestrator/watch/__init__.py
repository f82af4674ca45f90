"""``tune-remote watch``: tables kept right over time. ``store`` (offsets.json, ledger.jsonl, the lock),
``mine`` (one round trip per target: new log bytes mined at the node; ranking), ``launch`` (ordinary jobs and
campaigns, re-attached after a killed watch), ``cycle`` (the loop's one step), ``loop`` (the cycles until
SIGINT/SIGTERM; the demo's growing node), ``upgrade`` (an upgrade is an event: recheck). No CLI code here
(``cli/watchloop.py``)."""
