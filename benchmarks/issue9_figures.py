"""Issue 9's targets, each measured side by side in one run against one test-bed node (sshd + docker +
simulated AITER, behind the fault proxy, so the same node is measured at 0 and at 100 ms added RTT):

  1. one poll (state + new log bytes)  vs  OpenSSH ControlMaster `ssh ... docker exec CTR true`
  2. a whole `tune-remote run` (4 shapes, tiny simulated work, --repeats 1)  vs  the hand-written bash
     script benchmarks/handwritten_run.sh doing the same remote steps over one ControlMaster connection
  3. both again at 100 ms added RTT (proxy: +50 ms each way)
  4. round trips of a `run` outside polling (SSH channels opened + requests over the helper channel)
  5. `tune-remote status --json` on an empty workspace
  6. `fetch` of a 200 MB file  vs  `scp` of it, the file in a bind-mounted dir (read on the host) and in the
     container's own fs (through docker exec; also `ssh ... docker exec CTR cat`); bytes re-sent unchanged
  7. shape mining vs `grep -c` (benchmarks/shapelog_throughput.py; pass --mining-mb 0 to skip)

Run (root: the test bed starts dockerd and sshd):
    python benchmarks/issue9_figures.py [--mining-mb 1024] [--repeats 3]
Medians of --repeats; every figure printed next to its reference and target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TR = [str(Path(sys.executable).parent / "tune-remote")]
if not Path(TR[0]).exists():
    TR = [sys.executable, "-m", "orchestrator"]
VARIANT = "a8w8_blockscale"
CONFIGS = "/opt/aiter-sim/aiter/aiter/configs"
NK = ("--nk", "4608,7168", "--nk", "7168,2048")   # 2 N,K pairs of the sim log's a8w8 shapes
M_PRESET = "1,64"                                  # x 2 M values = 4 shapes


def median_s(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.monotonic()
        fn()
        out.append(time.monotonic() - t)
    return statistics.median(out)


class Bench:
    def __init__(self, node, ctr, d: Path, repeats: int):
        self.node, self.ctr, self.d, self.repeats = node, ctr, d, repeats
        self.inv = d / "inventory.yaml"
        self.inv.write_text(f"nodes:\n  {node.alias}:\n    ssh_config: {node.ssh_config_file}\n"
                            f"    containers:\n      {ctr.name}: {{}}\n")
        self.ws = d / "ws"
        self.cm_sock = d / "cm.sock"
        self.runs = 0
        self.configs = ctr.host_path(CONFIGS)
        self.snapshot = d / "configs.orig"
        subprocess.run(["cp", "-a", str(self.configs), str(self.snapshot)], check=True)

    # -- OpenSSH ControlMaster reference -------------------------------------------------------------
    def cm_argv(self, command: str) -> list[str]:
        return self.node.ssh_argv(command, options=("ControlMaster=auto", f"ControlPath={self.cm_sock}",
                                                    "ControlPersist=600"))

    def cm_stop(self) -> None:
        subprocess.run(self.node.ssh_argv(None, options=(f"ControlPath={self.cm_sock}", "ControlMaster=no"))[:-1]
                       + ["-O", "exit", f"{self.node.user}@{self.node.host}"], capture_output=True)

    def cm_docker_true(self) -> float:
        subprocess.run(self.cm_argv("true"), check=True)     # the master is up
        return median_s(lambda: subprocess.run(self.cm_argv(f"docker exec {self.ctr.name} true"), check=True),
                        max(5, self.repeats * 3))

    # -- tune-remote -------------------------------------------------------------------------------
    def run_args(self, job: str) -> list[str]:
        return [*TR, "--inventory", str(self.inv), "--workspace", str(self.ws), "-q", "run", "--node",
                self.node.alias, "--container", self.ctr.name, "--variant", VARIANT, *NK,
                "--m-preset", M_PRESET, "--repeats", "1", "--yes", "--job-id", job]   # as the issue says

    def restore_tables(self) -> None:
        """Every run (ours or the bash one) tunes the same shapes: the AITER config tables as provisioned."""
        subprocess.run(["rm", "-rf", str(self.configs)], check=True)
        subprocess.run(["cp", "-a", str(self.snapshot), str(self.configs)], check=True)

    def one_run(self) -> tuple[float, dict]:
        self.restore_tables()
        self.runs += 1
        job = f"bench{self.runs}"
        t = time.monotonic()
        subprocess.run(self.run_args(job), check=True, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t
        state = json.loads((self.ws / job / "state.json").read_text())
        return wall, state

    def ctx(self, state: dict):
        """A Ctx on a new Target of the bench's container, for the job ``state`` (close its target after use)."""
        from orchestrator.context import Ctx, Settings, Target
        from orchestrator.inventory import load_inventory
        from orchestrator.state import JobState, Workspace
        from orchestrator.ui import Ui
        spec = load_inventory(str(self.inv)).node(self.node.alias)
        return Ctx(job=JobState.from_dict(dict(state)), workspace=Workspace(self.ws),
                   target=Target(spec, spec.container(self.ctr.name)), settings=Settings(), ui=Ui(quiet=True))

    def poll_cost(self, state: dict) -> float:
        from orchestrator.steps.remote import poll_once
        ctx = self.ctx(state)
        target = ctx.target
        try:
            poll_once(ctx)      # connect + start the helper
            return median_s(lambda: poll_once(ctx), max(10, self.repeats * 5))
        finally:
            target.close()

    def handwritten(self, state: dict) -> float:
        """benchmarks/handwritten_run.sh over a fresh ControlMaster, with the same remote steps."""
        self.cm_stop()
        r = state["remote"]
        steps = {s["name"]: s["line"] for s in r["pipeline"]}
        plan = self.d / "plan"
        plan.mkdir(exist_ok=True)
        (plan / "untuned.csv").write_bytes((self.ws / state["job_id"] / "untuned"
                                            / os.path.basename(r["untuned_csv"])).read_bytes())
        csv = r["untuned_csv"] + ".handwritten"
        # the tuner as an engineer runs it: the same argv, reading the CSV just written, writing the live table
        argv = list(r["tune_argv"])
        argv[argv.index("-i") + 1] = csv
        argv[argv.index("-o") + 1] = r["tuned_csv"]
        tune = (f"cd {_q(r['aiter_root'])} && HIP_VISIBLE_DEVICES={_q(r['tune_env']['HIP_VISIBLE_DEVICES'])} "
                + " ".join(map(_q, argv)))
        env = dict(os.environ, CTR=self.ctr.name, CSV=csv,
                   BASELINE=steps.get("baseline", "true"), TUNE=tune, AFTER=steps.get("after", "true"),
                   BASE_LOG=r["logs"].get("baseline", "/dev/null"), TUNE_LOG=r["logs"]["tune"],
                   AFTER_LOG=r["logs"].get("after", "/dev/null"), OUT=str(self.d / "handwritten-out"))
        self.restore_tables()
        ssh = " ".join(map(_q, self.cm_argv("")[:-1]))
        t = time.monotonic()
        cp = subprocess.run(["bash", str(ROOT / "benchmarks" / "handwritten_run.sh"), ssh, str(plan / "untuned.csv")],
                            env=env, stdin=subprocess.DEVNULL, capture_output=True)
        wall = time.monotonic() - t
        if cp.returncode != 0:
            logs = subprocess.run(self.cm_argv(f"docker exec {self.ctr.name} tail -n 20 {env['TUNE_LOG']}"),
                                  capture_output=True).stdout.decode()
            raise SystemExit(f"handwritten_run.sh failed ({cp.returncode}):\n{cp.stderr.decode()[-3000:]}\n"
                             f"tune log tail:\n{logs}\ntune line: {tune}")
        return wall


def _q(s: str) -> str:
    import shlex
    return shlex.quote(s)


def remote_rows(repeats: int) -> list[tuple]:
    from tests.fake_remote.testbed import TestBed
    rows = []
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    try:
        node = bed.create_node(("current",), proxy=True)
        ctr = next(iter(node.containers.values()))
        with tempfile.TemporaryDirectory() as d:
            b = Bench(node, ctr, Path(d), repeats)
            try:
                for rtt in (0.0, 0.1):
                    node.proxy.set_latency(rtt / 2)
                    tag = f"RTT +{rtt * 1000:.0f} ms"
                    walls, states = [], []
                    for _ in range(repeats):
                        w, s = b.one_run()
                        walls.append(w)
                        states.append(s)
                    run_s = statistics.median(walls)
                    bash_s = statistics.median([b.handwritten(states[-1]) for _ in range(repeats)])
                    poll = b.poll_cost(states[-1])
                    cm = b.cm_docker_true()
                    rows.append((f"one poll ({tag})", f"{poll * 1000:.1f} ms",
                                 f"ControlMaster docker exec true {cm * 1000:.1f} ms", f"{poll / cm:.3f}x", "<= 0.1x"))
                    shapes = len((b.ws / states[-1]["job_id"] / "untuned" / os.path.basename(
                        states[-1]["remote"]["untuned_csv"])).read_text().splitlines()) - 1
                    rows.append((f"whole run, {shapes} shapes ({tag})", f"{run_s:.2f} s",
                                 f"hand-written bash {bash_s:.2f} s",
                                 f"{run_s / bash_s:.2f}x", "< 1.0x"))
                    st = states[-1]["steps"]
                    steps = ", ".join(f"{k} {v['finished'] - v['started']:.2f}" for k, v in st.items()
                                      if v.get("started") and v.get("finished"))
                    rows.append((f"run step seconds ({tag})", steps, "", "", ""))
                    stats = states[-1]["remote"]["stats"][-1]
                    rode = (stats.get("helper_ops_batched") or {}).get("status", 0)   # with the launch
                    polls = stats["helper_ops"].get("status", 0) - rode
                    rows.append((f"round trips outside polling ({tag})", str(stats["round_trips"] - polls),
                                 f"{polls} polls (+{rode} riding with the launch); "
                                 f"{stats.get('helper_requests', '?')} helper requests carrying ops "
                                 f"{json.dumps(stats['helper_ops'], sort_keys=True)}", "", "<= 6"))
                node.proxy.set_latency(0)
                rows.extend(fetch_rows(b))
            finally:
                b.cm_stop()
    finally:
        bed.close()
    return rows


def _pull_s(b: "Bench", ctx, node_path: str, local: Path) -> tuple[float, int]:
    """Median seconds of a whole fetch of ``node_path`` (nothing local), and how many were read on the host."""
    from orchestrator.steps import fetch
    times = []
    for _ in range(b.repeats):
        local.unlink(missing_ok=True)
        t = time.monotonic()
        out = fetch.pull(ctx, {node_path: local}, record=False)
        times.append(time.monotonic() - t)
        assert out[node_path] == "fetched"
    return statistics.median(times), ctx.job.step_state("fetch").info["host_reads_last_pull"]


def fetch_rows(b: Bench, text: bool = True) -> list[tuple]:
    """The same 200 MB in a directory the host bind-mounted in (fetch reads it on the host) and in the
    container's own filesystem (only `docker exec` reaches it), against scp of the host file (``text``: the
    rows of a text log too)."""
    from orchestrator.steps import fetch
    mounted, own = "/opt/aiter-sim/fetch-bench.bin", "/tmp/fetch-bench.bin"
    host_file = b.ctr.host_path(mounted)
    with open(host_file, "wb") as fh:
        for _ in range(200):
            fh.write(os.urandom(1 << 20))
    size = host_file.stat().st_size
    b.ctr.exec("cp", mounted, own)
    try:
        state = json.loads((b.ws / "bench1" / "state.json").read_text())
        ctx = b.ctx(state)
        target = ctx.target
        local = b.d / "fetched.bin"
        try:
            ctx.call("version")
            host_s, host_reads = _pull_s(b, ctx, mounted, local)
            own_s, own_reads = _pull_s(b, ctx, own, local)
            t = time.monotonic()
            again = fetch.pull(ctx, {own: local}, record=False)
            unchanged_s = time.monotonic() - t
            resent = ctx.job.step_state("fetch").info.get("bytes_last_pull")
        finally:
            target.close()
        scp_dst = b.d / "scp.bin"
        scp = ["scp", "-q", "-F", "/dev/null", "-i", str(b.node.identity_file), "-o", "BatchMode=yes",
               "-o", f"UserKnownHostsFile={b.node.known_hosts_file}", "-o", f"ControlPath={b.cm_sock}",
               "-P", str(b.node.port), f"{b.node.user}@{b.node.host}:{host_file}", str(scp_dst)]
        scp_s = median_s(lambda: subprocess.run(scp, check=True), b.repeats)
        cat_s = median_s(lambda: subprocess.run(b.cm_argv(f"docker exec {b.ctr.name} cat {own}"), check=True,
                                                stdout=open(scp_dst, "wb")), b.repeats)
        # its two parts alone (the test bed's node shares this machine's cores with the laptop side)
        from tests.fake_remote.provision import find_docker
        local_cat_s = median_s(lambda: subprocess.run([find_docker(), "exec", b.ctr.name, "cat", own], check=True,
                                                      stdout=subprocess.DEVNULL), b.repeats)
        ssh_zero_s = median_s(lambda: subprocess.run(b.cm_argv(f"head -c {size} /dev/zero"), check=True,
                                                     stdout=subprocess.DEVNULL), b.repeats)
        mbs = size / 1e6
        ref = f"scp {mbs / scp_s:.0f} MB/s ({scp_s:.2f} s)"
        text_rows = _text_rows(b, state, mounted, own, host_file, scp, scp_dst) if text else []
        return [("fetch 200 MB, file in a mounted dir",
                 f"{mbs / host_s:.0f} MB/s ({host_s:.2f} s, sha256-verified, read on the host: {host_reads})",
                 ref, f"{scp_s / host_s:.2f}x", ">= 0.8x"),
                ("fetch 200 MB, file in the container's own fs",
                 f"{mbs / own_s:.0f} MB/s ({own_s:.2f} s, sha256-verified, read on the host: {own_reads})",
                 f"{ref}; ssh docker exec cat {mbs / cat_s:.0f} MB/s (its parts alone: docker exec cat on the "
                 f"node {mbs / local_cat_s:.0f} MB/s, ssh of zeros {mbs / ssh_zero_s:.0f} MB/s)",
                 f"{scp_s / own_s:.2f}x", ">= 0.8x"),
                ("fetch again, unchanged", f"{again[own]} in {unchanged_s:.2f} s",
                 f"{resent if resent is not None else '?'} payload bytes received", "", "0 bytes re-sent"),
                *text_rows]
    finally:
        host_file.unlink(missing_ok=True)
        b.ctr.exec("rm", "-f", own, check=False)


def _text_rows(b: "Bench", state: dict, mounted: str, own: str, host_file: Path, scp: list, scp_dst: Path
               ) -> list[tuple]:
    """The same rows for a 200 MB generated vLLM log (what fetch copies most: logs, text), which fetch reads
    through `gzip -1`; and the container's own fs once more on a 25 MB/s link (a VPN), the proxy's cap."""
    from orchestrator.sim.logs import write_large_log
    write_large_log(host_file, 200 << 20)
    size = host_file.stat().st_size
    b.ctr.exec("cp", mounted, own)
    rows = []
    for cap in (None, 25_000_000):
        b.node.proxy.set_bandwidth(cap)
        ctx = b.ctx(state)
        target = ctx.target
        local = b.d / "fetched.log"
        try:
            ctx.call("version")
            where = [("mounted dir", mounted), ("container's own fs", own)] if cap is None else \
                [("container's own fs", own)]
            pulls = [(name, *_pull_s(b, ctx, path, local)) for name, path in where]
        finally:
            target.close()
        scp_s = median_s(lambda: subprocess.run(scp, check=True), b.repeats)
        link = "" if cap is None else f", {cap / 1e6:.0f} MB/s link"
        for name, secs, host_reads in pulls:
            rows.append((f"fetch 200 MB text log (generated vLLM), {name}{link}",
                         f"{size / 1e6 / secs:.0f} MB/s ({secs:.2f} s, gzip -1 on the node, sha256-verified, "
                         f"read on the host: {host_reads})", f"scp {size / 1e6 / scp_s:.0f} MB/s ({scp_s:.2f} s)",
                         f"{scp_s / secs:.2f}x", ">= 0.8x"))
    b.node.proxy.set_bandwidth(None)
    return rows


def status_row(repeats: int) -> tuple:
    with tempfile.TemporaryDirectory() as d:
        argv = [*TR, "--workspace", d, "status", "--json"]
        subprocess.run(argv, check=True, capture_output=True)
        s = median_s(lambda: subprocess.run(argv, check=True, capture_output=True), max(5, repeats * 3))
    return ("status --json, empty workspace", f"{s:.3f} s", "", "", "<= 0.25 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mining-mb", type=int, default=1024)
    a = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    rows = [status_row(a.repeats)]
    if os.geteuid() == 0:
        rows += remote_rows(a.repeats)
    else:
        print("remote figures need root (the test bed starts dockerd and sshd)")
    print("| measure | tune-remote | reference | ratio | target |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()
    if a.mining_mb:
        sys.argv = [sys.argv[0], str(a.mining_mb)]
        import shapelog_throughput
        shapelog_throughput.main()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
