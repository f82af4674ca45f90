"""Issue 27, the CLI half of "the first hour": help people can read, global options anywhere, short job ids,
words on a terminal and JSON in a pipe, long lists summarised, nothing surprising."""

import json
import os
import re

import pytest

from orchestrator.cli import main
from orchestrator.state import JobState, Workspace, resolve_workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(tmp_path / "none.yaml"))
    return Workspace(resolve_workspace(None))


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def add(ws, job_id, created, **kw):
    job = JobState(job_id=job_id, node=kw.pop("node", "n1"), container="c1", variant="a8w8", created=created,
                   request={}, **kw)
    ws.save(job)
    return job


# -- 1. help -------------------------------------------------------------------------------------------
def test_tune_remote_alone_prints_help_and_exits_0(capsys):
    code, out, err = run([], capsys)
    assert code == 0 and err == ""
    assert "Usage: tune-remote" in out and "Exit codes:" in out and "promote" in out


def test_run_help_groups_its_options_by_purpose_and_shows_defaults_one_way(capsys):
    code, out, err = run(["run", "--help"], capsys)
    assert code == 0
    titles = re.findall(r"╭─ (.+?) ─", out)
    assert titles[:5] == ["What to tune", "Where", "How to tune", "Outcome", "Output"], titles
    text = re.sub(r"[│\s]+", " ", out)
    assert "(default" not in text and "default:" not in text.replace("[default:", "")
    for default in ("[default: (600)]", "[default: (the free ones)]", "[default: 3]", "[default: proven]"):
        assert default in text, default


@pytest.mark.parametrize("cmd", ["run", "resume", "fetch", "promote", "rollback"])
def test_accept_new_host_key_is_documented_wherever_it_is_taken(cmd, capsys):
    code, out, err = run([cmd, "--help"], capsys)
    assert code == 0 and "--accept-new-host-key" in out and "known_hosts" in out


# -- 2. global options after the subcommand --------------------------------------------------------------
def test_global_options_are_accepted_after_the_subcommand(tmp_path, ws, capsys):
    other = Workspace(tmp_path / "other")
    add(other, "only-here", 1.0)
    code, out, err = run(["status", "--json", "--workspace", str(other.root)], capsys)
    assert code == 0, err
    assert [r["job_id"] for r in json.loads(out)] == ["only-here"]
    code, out, err = run(["run", "--inventory", str(tmp_path / "missing.yaml"), "--node", "n1",
                          "--variant", "a8w8", "--nk", "1,2"], capsys)
    assert code == 2 and "missing.yaml" in err and "not found" in err, err


# -- 3. job ids: unique prefix, last, ambiguous ----------------------------------------------------------
def test_a_unique_prefix_and_last_name_a_job(ws, capsys):
    add(ws, "20261128-040214-demo-a8w8", 10.0)
    add(ws, "20261128-050000-demo-a8w8", 20.0)
    code, out, err = run(["status", "20261128-04", "--json"], capsys)
    assert code == 0, err
    assert [r["job_id"] for r in json.loads(out)] == ["20261128-040214-demo-a8w8"]
    code, out, err = run(["status", "last", "--json"], capsys)
    assert [r["job_id"] for r in json.loads(out)] == ["20261128-050000-demo-a8w8"]
    assert sorted(os.listdir(ws.root)) == sorted(["20261128-040214-demo-a8w8", "20261128-050000-demo-a8w8",
                                                  *[p for p in os.listdir(ws.root) if p.startswith(".")]])


@pytest.mark.parametrize("cmd", [["status"], ["logs"], ["fetch"], ["promote"], ["rollback"], ["cancel"],
                                 ["resume"], ["export", "--model-config", "M"], ["report"]])
def test_an_ambiguous_prefix_is_one_line_with_the_candidates_exit_2(ws, capsys, cmd):
    add(ws, "20261128-040214-demo-a8w8", 10.0)
    add(ws, "20261128-050000-demo-a8w8", 20.0)
    code, out, err = run([cmd[0], "20261128-0", *cmd[1:]], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "ambiguous" in lines[0] and "20261128-040214-demo-a8w8" in lines[0] and "20261128-050000" in lines[0]


def test_no_such_prefix_still_says_no_such_job(ws, capsys):
    add(ws, "20261128-040214-demo-a8w8", 10.0)
    code, out, err = run(["status", "1999"], capsys)
    assert code == 2 and "no job '1999'" in err


# -- 4, 6, 7: words on a terminal, JSON in a pipe; promote --rows all asks; status table; report -------------
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tty(monkeypatch, *streams):
    import sys
    for name in streams:
        monkeypatch.setattr(getattr(sys, name), "isatty", lambda: True)


def test_the_outcome_commands_speak_words_on_a_terminal_and_json_in_a_pipe(tmp_path, monkeypatch, capsys):
    import sys

    import click
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.05")
    ws = Workspace(tmp_path / "ws")
    assert main(["--workspace", str(ws.root), "-q", "demo", "--repeats", "1"]) == 0
    [job] = [j.job_id for j in ws.jobs()]
    capsys.readouterr()
    cli = ["--workspace", str(ws.root)]

    # piped: the JSON of today, same keys; promote --rows all with rows proven slower: one line, exit 2
    code, out, err = run([*cli, "report", "last"], capsys)
    assert code == 0 and json.loads(out)["report_md"].endswith(f"{job}/report.md"), err
    code, out, err = run([*cli, "promote", job[:12], "--rows", "all"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "proven slower" in err and "--yes" in err
    assert out == ""
    # on a terminal it asks; "no" changes nothing
    tty(monkeypatch, "stdin", "stderr")
    monkeypatch.setattr(click, "confirm", lambda *a, **k: False)
    code, out, err = run([*cli, "promote", "last", "--rows", "all"], capsys)
    assert code == 1 and "nothing promoted" in err
    md = (ws.job_dir(job) / "report.md").read_text()
    assert "never promoted with --promote proven" in md
    # --yes: promoted, in words on a terminal; the report's warning says what happened
    tty(monkeypatch, "stdout")
    code, out, err = run([*cli, "promote", "last", "--rows", "all", "--yes"], capsys)
    out = ANSI.sub("", out)
    assert code == 0 and "promoted" in out and "row(s) into" in out and "tune-remote rollback" in out, err
    with pytest.raises(ValueError):
        json.loads(out)
    md = (ws.job_dir(job) / "report.md").read_text()
    assert "promoted anyway" in md and "never promoted with --promote proven" not in md
    # --json on a terminal: the JSON document
    code, out, err = run([*cli, "rollback", "last", "--json"], capsys)
    assert code == 0 and json.loads(out)["already"] is False, err
    code, out, err = run([*cli, "rollback", "last"], capsys)
    assert code == 0 and "already rolled back" in ANSI.sub("", out)
    code, out, err = run([*cli, "export", "last", "--model-config", "DeepSeek-V3"], capsys)
    out = ANSI.sub("", out)
    assert code == 0 and "exported" in out and "summary for the pull request" in out, err
    code, out, err = run([*cli, "fetch", "last"], capsys)
    assert code == 0 and f"job {job}:" in ANSI.sub("", out) and "unchanged" in out, err
    code, out, err = run([*cli, "fetch", "last", "--json"], capsys)
    assert code == 0 and set(json.loads(out)) == {"job_id", "files"}
    # status: a table with headers, the result and the report's path; report: path and summary
    code, out, err = run([*cli, "status"], capsys)
    out = ANSI.sub("", out)
    assert code == 0 and re.search(r"^job\s+state\s+.*result\s+report", out, re.M), out
    assert "faster" in out and "report.md" in out
    code, out, err = run([*cli, "report", "last"], capsys)
    out = ANSI.sub("", out)
    assert code == 0 and "result: 119 shapes:" in out and "report.md" in out and "report.html" in out
    opened = []
    monkeypatch.setattr(click, "launch", lambda url, **k: opened.append(url))
    assert run([*cli, "report", job[:10], "--open"], capsys)[0] == 0
    assert opened == [str(ws.job_dir(job) / "report.html")]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    code, out, err = run([*cli, "status"], capsys)        # piped: the lines scripts read today
    assert out.startswith(f"{job}  succeeded")


def test_report_of_a_job_without_one_says_so(ws, capsys):
    add(ws, "j1", 1.0)
    code, out, err = run(["report", "j1"], capsys)
    assert code == 2 and "has no report yet" in err


# -- 5. the shapes to tune, summarised ------------------------------------------------------------------
def test_the_shapes_to_tune_are_summarised_per_nk_with_the_first_rows_and_where_the_list_is():
    import io

    from orchestrator.ui import Ui
    from orchestrator.variants import get_variant
    pairs = [(7168, 256), (512, 7168), (3072, 1536), (7168, 2048), (2112, 7168), (7168, 2304), (4608, 7168)]
    shapes = [{"m": m, "n": n, "k": k} for m in [2 ** i for i in range(17)] for n, k in pairs]
    misses = [8 if s["m"] == 64 else 0 for s in shapes]
    for tty in (False, True):
        out = io.StringIO()
        Ui(tty=tty, stream=out).show_shapes(get_variant("a8w8_blockscale"), shapes, ["1 log"], misses,
                                            full_list="/ws/j/untuned/x.csv")
        text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
        assert len(text.splitlines()) < 30, text
        assert "119 a8w8_blockscale shapes to tune, 7 group(s)" in " ".join(text.split())
        assert "n=7168 k=256" in text and "1..65536" in text and "/ws/j/untuned/x.csv" in text
        assert "1,7168,256,0" in text and "65536,4608,7168" not in text


# -- 8. shapes: words on a terminal, today's JSON in a pipe; --csv says what it wrote -------------------------
LINE = ("[aiter] shape is M:{m}, N:512, K:7168, not found tuned config in "
        "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!")


def test_shapes_speaks_words_with_miss_counts_on_a_terminal_and_json_in_a_pipe(tmp_path, monkeypatch, capsys):
    log = tmp_path / "server.log"
    log.write_text("\n".join([LINE.format(m=72)] * 3 + [LINE.format(m=8192)]) + "\n")
    code, out, err = run(["shapes", str(log)], capsys)
    assert code == 0 and json.loads(out)["a8w8_blockscale"][0] == {"m": 72, "n": 512, "k": 7168}
    assert out.startswith("{\n  ")                       # piped: indented as before
    tty(monkeypatch, "stdout")
    code, out, err = run(["shapes", str(log)], capsys)
    out = ANSI.sub("", out)
    assert code == 0 and "a8w8_blockscale: 2 untuned shape(s), 4 miss(es)" in out
    assert "n=512 k=7168: 2 shape(s), M 72..8192, 4 miss(es)" in out
    assert json.loads(run(["shapes", str(log), "--json"], capsys)[1]) == {
        "a8w8_blockscale": [{"m": 72, "n": 512, "k": 7168}, {"m": 8192, "n": 512, "k": 7168}]}
    # --csv: how many rows, and why run tunes more (it sweeps M)
    code, out, err = run(["shapes", str(log), "--variant", "a8w8_blockscale", "--csv", str(tmp_path / "u.csv")], capsys)
    assert code == 0 and out == ""
    assert "wrote 2 a8w8_blockscale shape(s)" in err and "would tune 17" in err and "--m-preset pow2" in err


# -- 9. errors and messages ------------------------------------------------------------------------------
def test_bare_run_names_every_missing_input_in_one_line(ws, capsys):
    code, out, err = run(["run"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "--variant" in lines[0] and "--node NODE or --slurm" in lines[0] and "a shape source" in lines[0]


def test_a_variant_typo_suggests_the_closest_name(ws, capsys):
    code, out, err = run(["demo", "--variant", "a8w8_blockscle"], capsys)
    assert code == 2 and "did you mean 'a8w8_blockscale'?" in err and len(err.strip().splitlines()) == 1


def test_the_shipped_inventory_says_it_is_an_example_and_so_does_a_failed_connect(tmp_path, monkeypatch, capsys):
    from pathlib import Path
    shipped = (Path(__file__).parents[2] / "inventory.yaml").read_text()
    assert shipped.startswith("# tune-remote EXAMPLE inventory")
    local = tmp_path / "inventory.yaml"          # the example, its first node made to refuse at once
    local.write_text(shipped.replace("host: 10.1.2.7", "host: 127.0.0.1").replace("port: 22 ", "port: 1  "))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    code, out, err = run(["run", "--inventory", str(local), "--node", "mi355-07", "--variant", "a8w8", "--nk",
                          "1,2", "--yes"], capsys)
    assert code == 3 and "is the example inventory" in err and len(err.strip().splitlines()) == 1, err
    mine = tmp_path / "mine.yaml"                # the same node in the user's own file: no such hint
    mine.write_text("nodes:\n  n1:\n    host: 127.0.0.1\n    port: 1\n    containers:\n      c1: {}\n")
    code, out, err = run(["--inventory", str(mine), "run", "--node", "n1", "--variant", "a8w8", "--nk", "1,2",
                          "--yes"], capsys)
    assert code == 3 and "example" not in err


def test_the_estimate_says_demo_jobs_do_not_count_instead_of_that_there_are_none(ws):
    from orchestrator.outcome.budget import seconds_per_shape
    add(ws, "d1", 1.0, state="succeeded", shapes=[{"m": 1, "n": 2, "k": 3}])
    job = ws.load("d1")
    job.request, job.facts = {"demo_dir": "/x"}, {"gfx": "gfx950"}
    ws.save(job)
    _, why = seconds_per_shape(ws, "a8w8", "gemm", "gfx950")
    assert "1 demo job(s) here ran on a simulated node" in why


def test_csv_diff_prints_a_summary_and_a_narrow_table(tmp_path, capsys):
    head = "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
    long = "a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16x1_intrawave_v3" * 3
    (tmp_path / "a.csv").write_text(head + f"gfx950,256,1,2,3,4,0,5.0,{long},1,1,0.0\n"
                                    f"gfx950,256,2,2,3,4,0,5.0,{long},1,1,0.0\ngfx950,256,3,2,3,4,0,5.0,k,1,1,0.0\n")
    (tmp_path / "b.csv").write_text(head + f"gfx950,256,1,2,3,4,0,5.0,{long},1,1,0.0\n"
                                    "gfx950,256,3,2,3,5,0,4.0,k2,1,1,0.0\ngfx950,256,4,2,3,4,0,5.0,k,1,1,0.0\n")
    code, out, err = run(["csv", "diff", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], capsys)
    assert code == 0, err
    assert "4 key(s): 1 added, 1 removed, 1 changed (kernel or config), 1 the same" in out
    assert max(len(line) for line in out.splitlines()[1:]) < 100 and "NaN" not in out


# -- 4. --json on every command ------------------------------------------------------------------------
def _commands():
    import click

    from orchestrator.cli import cli
    out = []
    for name, cmd in cli.commands.items():
        subs = cmd.commands.items() if isinstance(cmd, click.Group) else [(None, cmd)]
        out += [(f"{name} {sub}" if sub else name, c) for sub, c in subs]
    return out


@pytest.mark.parametrize("name,cmd", _commands(), ids=[n for n, _ in _commands()])
def test_every_command_takes_json_and_the_global_options(name, cmd):
    opts = {o for p in cmd.params for o in p.opts}
    assert {"--json", "--inventory", "--workspace", "--quiet"} <= opts, name


def test_logs_and_cancel_with_json_print_one_document(ws, capsys):
    job = add(ws, "20261128-040214-demo-a8w8", 10.0, state="succeeded")
    (ws.job_dir(job.job_id) / "pipeline.log").write_text("line 1\nline 2\n")
    job.remote = {"pipeline_log": "/node/pipeline.log"}
    ws.save(job)
    code, out, err = run(["logs", "2026", "--step", "pipeline", "--json"], capsys)
    assert code == 0 and json.loads(out) == {"job_id": job.job_id, "step": "pipeline", "log": "line 1\nline 2\n"}
    code, out, err = run(["cancel", "last", "--json"], capsys)
    assert code == 0 and json.loads(out)["state"] == "succeeded" and "already succeeded" in json.loads(out)["said"]


def test_status_of_a_campaign_keeps_its_columns_and_gives_each_target_its_result(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.05")
    monkeypatch.setenv("COLUMNS", "160")
    cli = ["--workspace", str(tmp_path / "ws")]
    assert main([*cli, "-q", "demo", "--nodes", "2", "--repeats", "1"]) == 0
    capsys.readouterr()
    tty(monkeypatch, "stdout")
    code, out, err = run([*cli, "status"], capsys)
    lines = ANSI.sub("", out).splitlines()
    assert code == 0 and re.match(r"job\s+state\s+where\s+variant\s+result\s+report", lines[0]), out
    targets = [ln for ln in lines if ln.startswith("  └ ")]
    assert len(targets) == 2 and all(" faster, " in ln for ln in targets), out
    col = lines[0].index("state")
    assert all(ln[col:].startswith("succeeded") for ln in lines[1:4]), out     # the columns line up
