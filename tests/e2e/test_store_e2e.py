"""The team's store on a real PostgreSQL (issue 39), started by the test bed: two laptops (workspaces) demo
the same shapes at once into one store (each key's team row is held by one job, the other job is told), a
database crashed mid-job (the job goes on; after the restart nothing is lost or doubled), a job run before
the store existed imported, `rows --json` with provenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_remote.provision import poll

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _cli(*args, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TUNE_REMOTE_STORE", None)
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _done(p: subprocess.Popen, rc: int = 0) -> tuple[str, str]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == rc, err
    return out, err


def _counts(url: str, tmp_path: Path) -> dict:
    out, _ = _done(_cli("--store", url, "store", "info", "--json", cwd=tmp_path))
    return json.loads(out)["counts"]


def _counts_of(ws: Path, tmp_path: Path) -> dict:
    """What one job's records are: its workspace imported into a fresh SQLite store."""
    url = f"sqlite:///{tmp_path / (ws.name + '-alone.sqlite')}"
    _done(_cli("--store", url, "store", "import", str(ws), cwd=tmp_path))
    return _counts(url, tmp_path)


def _job(ws: Path) -> dict:
    (state,) = [p for p in ws.glob("*/state.json")]
    return json.loads(state.read_text())


def test_two_laptops_one_store_a_crash_mid_job_and_an_import(postgres, tmp_path):
    url = postgres.url
    # (--reuse none: both tune every shape, whichever plans after the other's promotion)
    a = _cli("--store", url, "--workspace", str(tmp_path / "a"), "demo", "-q", "--repeats", "2", "--reuse", "none",
             cwd=tmp_path)
    b = _cli("--store", url, "--workspace", str(tmp_path / "b"), "demo", "-q", "--repeats", "2", "--reuse", "none",
             cwd=tmp_path)
    (_, err_a), (_, err_b) = _done(a), _done(b)
    ja, jb = _job(tmp_path / "a"), _job(tmp_path / "b")
    promoted = len(ja["remote"]["promotion"]["promoted"])
    assert promoted == len(jb["remote"]["promotion"]["promoted"]) > 0
    out, _ = _done(_cli("--store", url, "rows", "--json", "--gpu", "MI355X", cwd=tmp_path))
    rows = json.loads(out)
    assert len(rows) == promoted                       # one team row per key: nothing doubled by the race
    # job ids may be equal (same second, node and variant): the laptop is the origin (host:workspace)
    held = {w: sum(r["origin"].endswith(":" + str(tmp_path / w)) for r in rows) for w in ("a", "b")}
    told = {"a": err_a.count("the team's row was promoted first by job"),
            "b": err_b.count("the team's row was promoted first by job")}
    assert {w: promoted - n for w, n in held.items()} == told        # each key lost is told to its loser
    assert {r["origin"].split(":", 1)[1] for r in rows} <= {str(tmp_path / "a"), str(tmp_path / "b")}
    assert all(r["aiter_version"] == ja["facts"]["version"] and r["gpu_model"] == "AMD Instinct MI355X" and r["row"]
               for r in rows)
    two = _counts(url, tmp_path)
    assert two["jobs"] == 2 and two["team_rows"] == promoted

    # a third laptop (the default: --reuse proven) plans the team's proven shapes as such and tunes only the
    # rest; the team's rows are staged, measured on its node and promoted only where proven
    _, err_r = _done(_cli("--store", url, "--workspace", str(tmp_path / "r"), "demo", "-q", "--repeats", "1",
                          cwd=tmp_path))
    jr = _job(tmp_path / "r")
    reused = jr["steps"]["shapes"]["info"]["reused"]
    assert len(jr["shapes"]) == len(ja["shapes"]) and len(reused) == promoted and jr["state"] == "succeeded"
    (untuned,) = (tmp_path / "r").glob("*/untuned/*.csv")
    assert len(untuned.read_text().splitlines()) - 1 == len(ja["shapes"]) - promoted > 0
    assert {r["origin"] for r in reused} <= {r["origin"] for r in rows} and "promoted first by job" not in err_r
    assert len(jr["remote"]["promotion"]["promoted"]) > 0

    plan_a, plan_r = ja["steps"]["shapes"]["info"]["estimate_s"], jr["steps"]["shapes"]["info"]["estimate_s"]
    print(f"second laptop: {promoted} of {len(ja['shapes'])} shapes reused, the tuner ran on "
          f"{len(ja['shapes']) - promoted}; planned tuner time {plan_r:.0f} s (the first laptop's {plan_a:.0f} s: "
          f"{plan_a - plan_r:.0f} s not spent); "
          f"{len(jr['remote']['promotion']['promoted'])} rows promoted here after this node's measurement")
    assert plan_r < plan_a
    _done(_cli("--store", url, "store", "import", str(tmp_path / "r"), cwd=tmp_path))   # counted apart below
    two = _counts(url, tmp_path)
    assert two["jobs"] == 3

    # a database crashed mid-job: the job goes on, its records are written once the database is back
    c = _cli("--store", url, "--workspace", str(tmp_path / "c"), "demo", "-q", "--repeats", "2", "--reuse", "none",
             cwd=tmp_path)
    poll(lambda: list((tmp_path / "c").glob("*/state.json")), timeout=120, what="job c saved once")
    postgres.kill()
    _, err_c = _done(c)
    assert err_c.count("tune-remote: warning: store postgresql://") == 1 and "the job goes on" in err_c
    assert _job(tmp_path / "c")["state"] == "succeeded"
    postgres.start()
    _done(_cli("--store", url, "store", "import", str(tmp_path / "c"), cwd=tmp_path))
    three = _counts(url, tmp_path)
    one_job = {t: _counts_of(tmp_path / "a", tmp_path)[t] for t in ("results", "samples", "tuned_rows")}
    for table, n in one_job.items():
        assert three[table] == two[table] + n, (table, two, three, err_c)
    assert three["jobs"] == 4

    # a job run before the store existed (--store none), imported; importing again doubles nothing
    _done(_cli("--store", "none", "--workspace", str(tmp_path / "d"), "demo", "-q", "--repeats", "2", cwd=tmp_path))
    assert _counts(url, tmp_path) == three
    for _ in range(2):
        _done(_cli("--store", url, "store", "import", str(tmp_path / "d"), cwd=tmp_path))
    four = _counts(url, tmp_path)
    assert four["jobs"] == 5 and four["samples"] == three["samples"] + one_job["samples"]
