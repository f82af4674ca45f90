"""a6w4 measured by its tuner's own --run_config (issue 36), end to end on a newest node (gfx950): the before arm
runs `--run_config` without a CSV (the tuner times its default kernel per shape of -i), the after arm
`--run_config <staging table>` (the table's rows through the production operator, AITER_REBUILD=2); the
comparison shows the tuned shape's gain, the gain guard's fallback row none; the proven row is promoted and the
engaged check reruns `--run_config <live table>`. A tuner that does not implement run_config: tune only, said in
a note, exit 0."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import perf_model
from orchestrator.variants import get_variant

pytestmark = pytest.mark.e2e

NK = {"n": 7168, "k": 2048}


def _shapes():
    """Two Ms the simulated tuner improves and one its gain guard falls back to the default kernel on."""
    good, old = perf_model.shapes_with_outcome("a6w4", "improved", NK, "m", 1, 2)
    [guard] = perf_model.shapes_with_outcome("a6w4", "regressed", NK, "m", 1, 1)
    return good, guard, old


def _run(node, c, tmp_path, *extra, shapes=None) -> tuple[int, Path, dict]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    ms = ",".join(str(s["m"]) for s in (shapes or _shapes()[:2]))
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a6w4", "--nk", "7168,2048",
                 "--m-preset", ms, "--yes", "--repeats", "2", "--job-id", "rc1", *extra])
    job = tmp_path / "ws" / "rc1"
    return code, job, json.loads((job / "state.json").read_text())


@pytest.mark.parametrize("profile", ["newest", "head"])
def test_a6w4_before_and_after_are_measured_by_run_config(make_node, tmp_path, capsys, profile):
    node = make_node({"profile": profile})
    c = next(iter(node.containers.values()))
    good, guard, old = _shapes()
    gfx, cu = "gfx950", 256
    # the live table holds the tuner's own row for `old` already (a shape tuned by an earlier job)
    v = get_variant("a6w4")
    row = perf_model.tune_result("a6w4", old, gfx, cu)
    live_path = c.host_path(f"{c.aiter_root}/{v.tuned_csv}")
    cols = ["gfx", "cu_num", "M", "N", "K", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    live_path.write_text(",".join(cols) + "\n" + ",".join(str({"gfx": gfx, "cu_num": cu, "M": old["m"], "N": old["n"],
                                                              "K": old["k"], **row}[k]) for k in cols) + "\n")
    launches0 = len(c.launches())
    code, job, st = _run(node, c, tmp_path, shapes=[good, guard, old])
    err = capsys.readouterr().err
    assert code == 0, (err, st.get("error"), st.get("notes"))
    r = st["remote"]
    assert [p["name"] for p in r["pipeline"]] == ["baseline", "tune", "after"]
    assert len(c.launches()) == launches0 + 1               # the --run_config processes are no tuning launch
    script = f"{r['meta_root']}/{v.tune_script}"
    bench = f"{r['job_dir']}/bench"
    # each arm: --run_config without a CSV (the default kernel), then with the arm's table
    assert r["tuned_backup"]
    before = r["bench_display"]["before"]
    after = r["bench_display"]["after"]
    head = f"python3 {script} -i {bench}/runconfig_shapes.csv -o {bench}/runconfig_"
    assert [b.split(" python3 ")[-1] for b in before] == \
        [f"{head}before.csv --run_config"[len("python3 "):], f"{head}before.csv --run_config {r['live_csv']}"[8:]]
    assert after[0].endswith(f"{head}after.csv --run_config"), after
    assert after[1].endswith(f"{head}after.csv --run_config {r['tuned_csv']}"), after
    shapes_csv = c.host_path(f"{bench}/runconfig_shapes.csv").read_text().splitlines()
    assert shapes_csv[0] == "M,N,K" and len(shapes_csv) == 4
    notes = " ".join(st.get("notes") or [])
    assert "measured by the tuner itself (--run_config" in notes, notes

    assert (gfx, cu) == (st["facts"]["gfx"], int(st["facts"]["cu_num"]))
    comp = {int(row["m"]): row for row in csv.DictReader((job / "comparison.csv").open())}
    assert set(comp) == {good["m"], guard["m"], old["m"]}, comp
    assert all(row["metric"] == "E2E(us)" for row in comp.values())
    # before: the default kernel (no CSV); after: the tuned row, or the fallback row = the default kernel
    assert float(comp[good["m"]]["before"]) == round(perf_model.default_us("a6w4", good, gfx, cu), 2)
    assert float(comp[good["m"]]["after"]) == round(perf_model.bench_us("a6w4", good, gfx, cu, tuned_from=good), 2)
    assert comp[good["m"]]["verdict"] == "improved" and float(comp[good["m"]]["speedup_pct"]) > 1.0
    assert comp[guard["m"]]["before"] == comp[guard["m"]]["after"]
    assert comp[guard["m"]]["verdict"] == "within_noise"
    # the live row runs in both arms (the tuner skipped the shape: its staging row is the live one): no gain
    tuned_old = round(perf_model.bench_us("a6w4", old, gfx, cu, tuned_from=old), 2)
    assert float(comp[old["m"]]["before"]) == float(comp[old["m"]]["after"]) == tuned_old
    assert comp[old["m"]]["verdict"] == "within_noise" and comp[old["m"]]["promoted"] == "false"
    md = (job / "report.md").read_text()
    assert "**Metric:** E2E(us), lower is better" in md and f"max +{comp[good['m']]['speedup_pct']}%" in md, md

    # promoted (the proven row), then the engaged check: --run_config <live table> in a fresh process
    promote = st["steps"]["promote"]["info"]
    eng = promote.get("engaged") or {}
    assert eng.get("total") == 1 and eng.get("engaged") == 1, promote
    ran = (job / "engaged_at_runtime.log").read_text()
    assert "Benchmark (tuned) Benchmark Results" in ran and f"={r['live_csv']} for benchmark" in ran, ran
    live = list(csv.DictReader(c.host_path(r["live_csv"]).open()))
    assert sorted(int(x["M"]) for x in live if x["N"] == "7168") == sorted([good["m"], old["m"]])
    # every --run_config <CSV> process rebuilds the operator's modules (AITER_REBUILD=2): the after arm's table
    # call in each of its 2 runs, after the first run's default call built them once in the arm's empty JIT dir;
    # the before arm's table calls too (its second run appends to the baseline log)
    after_log = (job / "logs" / Path(r["logs"]["after"]).name).read_text()
    assert after_log.count("finish build [module_gemm_a6w4_asm]") == 1 + 2, after_log
    base_log = (job / "logs" / Path(r["logs"]["baseline"]).name).read_text()
    assert base_log.count("finish build [module_gemm_a6w4_asm]") >= 2, base_log
    # recheck: "with" = --run_config <live table>, "without" = <the table without the row>: the default kernel
    inv = tmp_path / "inv.yaml"
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "recheck", "--node", node.alias,
                 "--container", c.name, "--variant", "a6w4"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["counts"]["still_faster"] == 1 and not out["counts"].get("not_measured"), out
    doc = json.loads((Path(out["dir"]) / "recheck.json").read_text())
    [rec] = [x for x in doc["rows"] if int(x["key"]["m"]) == good["m"]]
    assert rec["verdict"] == "still_faster", rec
    assert (rec["with_row"], rec["without_row"]) == (float(comp[good["m"]]["after"]), float(comp[good["m"]]["before"]))
    ran = (Path(out["dir"]) / "bench-a6w4.log").read_text()
    assert "{runconfig:" not in ran and ran.count("Benchmark (tuned) Benchmark Results") == 2 * rec["with_n"], ran


def test_a_tuner_without_run_config_is_tune_only_with_a_note(make_node, tmp_path, capsys):
    """base_tuner's own run_config ('run_config not implemented for ..., skipping benchmark'): the node's
    a6w4 tuner is made one that does not override it (the simulator's list of tuners that do)."""
    node = make_node({"profile": "newest"})
    c = next(iter(node.containers.values()))
    sim = c.host_path(f"{c.inst.package_dir}/_sim/runconfig.py")
    text = sim.read_text()
    assert '    "a6w4": ("module_quant", "module_gemm_a6w4_asm"),\n' in text
    sim.write_text(text.replace('    "a6w4": ("module_quant", "module_gemm_a6w4_asm"),\n', ""))
    code, job, st = _run(node, c, tmp_path, "--promote", "none")
    err = capsys.readouterr().err
    assert code == 0, (err, st.get("error"))
    assert st["state"] == "succeeded"
    notes = st.get("notes") or []
    said = [n for n in notes if "does not implement --run_config" in n]
    assert len(said) == 2 and any(n.startswith("a6w4 before arm") for n in said), notes
    assert any("tuning only" in n for n in said)
    assert st["steps"]["compare"]["info"]["measured"] == {"before": 0, "after": 0}
    tuned = list(csv.DictReader((job / Path(st["remote"]["tuned_csv"]).name).open()))
    assert {int(x["M"]) for x in tuned if x["N"] == "7168"} == {s["m"] for s in _shapes()[:2]}


def test_a_base_tuner_without_the_flag_is_tune_only_before_anything_runs(make_node, tmp_path, capsys):
    """A base_tuner whose argparse has no --run_config (before v0.1.13): its --help (probed) says so, so no
    benchmark step is planned (argparse would refuse every call with exit 2) and the job says why."""
    node = make_node({"profile": "newest"})
    c = next(iter(node.containers.values()))
    bt = c.host_path(f"{c.inst.package_dir}/utility/base_tuner.py")
    text = bt.read_text()
    flag = 'self.parser.add_argument("--run_config", nargs="?"'
    assert text.count(flag) == 1
    bt.write_text(text.replace(flag, 'self.parser.add_argument("--no-run-config", dest="run_config", nargs="?"'))
    code, job, st = _run(node, c, tmp_path, "--promote", "all")
    err = capsys.readouterr().err
    assert code == 0, (err, st.get("error"))
    assert [p["name"] for p in st["remote"]["pipeline"]] == ["tune"]
    said = [n for n in st.get("notes") or [] if "tuning only" in n]
    assert len(said) == 1 and "the node's tuner has no --run_config" in said[0], st.get("notes")
    assert st["steps"]["compare"]["info"].get("skipped") == "no benchmark logs"
    # promoted all the same: the engaged check says it could not measure, it does not run a call prepare never
    # planned (its argparse would refuse it) and report "0 of N engaged"
    eng = st["steps"]["promote"]["info"]["engaged"]
    assert st["steps"]["promote"]["info"]["promoted"] >= 1 and eng["engaged"] == 0, eng
    assert "did not run in this job" in eng["unchecked"] and eng["log"] is None, eng
    assert "Engaged at runtime: not checked: its --run_config benchmark did not run" in (job / "report.md").read_text()
