"""What a job costs on a cost-charging simulated node (issue 26), side by side in one run:

  1. the whole small job `run --shapes-csv F --repeats 1 --promote none --yes` (4 shapes, distinct M)
     against benchmarks/handwritten_run.sh (the same remote steps over one ControlMaster; its after arm
     with AITER_REBUILD=1, as the issue's script), ALTERNATING, in simulated seconds and in projected real
     seconds; the contract is ratio < 1.0
  2. builds and process starts per job (the node's cost log, sim/costs.jsonl)
  3. the projected real-node minutes of fixed cost (JIT builds + process starts) of a 100-shape
     a8w8_blockscale job and of a 3-config MoE job (--repeats 3, the default)

The node sleeps real costs x --scale (AITER_SIM_COST_SCALE, orchestrator/sim/costs.py). Projected real
seconds of a run = its wall seconds - what the node slept + the real seconds it charged for.

Run (root: the test bed starts dockerd and sshd):
    python benchmarks/costs_figures.py [--scale 0.02] [--pairs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from issue9_figures import TR, Bench, _q  # noqa: E402

from orchestrator.sim import costs  # noqa: E402

FOUR = "M,N,K\n1,4608,7168\n16,4608,7168\n64,7168,2048\n1024,7168,2048\n"   # distinct M: one call each NK
MOE_HEAD = ("token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
            "doweight_stage1\n")
MOE3 = MOE_HEAD + "".join(
    f"{t},6144,4096,8,2,ActivationType.Silu,torch.bfloat16,{q}\n"
    for t in (1, 64, 512)
    for q in ("torch.bfloat16,torch.bfloat16,QuantType.No,1,0",
              "torch.float8_e4m3fnuz,torch.float8_e4m3fnuz,QuantType.per_Token,1,0",
              "torch.float8_e4m3fnuz,torch.float8_e4m3fnuz,QuantType.per_Tensor,1,0"))   # all in l_quant


class CostBench(Bench):
    def __init__(self, node, ctr, d: Path, repeats: int):
        super().__init__(node, ctr, d, repeats)
        self.cost_log = ctr.host_path(ctr.env[costs.LOG_ENV])
        self.jit = ctr.host_path(f"{ctr.aiter_root}/aiter/jit")
        self.jit_snapshot = d / "jit.orig"

    def charges(self) -> list[dict]:
        return [json.loads(x) for x in self.cost_log.read_text().splitlines() if x.strip()]

    def restore_tables(self) -> None:
        """The config tables as provisioned, rewriting only those a run changed: a table rewritten with
        ``cp -a`` gets a new ctime, so the live module would no longer count as current for it (prepare's
        copy_if_current) and every job's before arm would build it again."""
        import filecmp
        for src in self.snapshot.rglob("*"):
            dst = self.configs / src.relative_to(self.snapshot)
            if src.is_file() and not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
                subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
        for dst in list(self.configs.rglob("*")):
            if dst.is_file() and not (self.snapshot / dst.relative_to(self.configs)).exists():
                dst.unlink()

    def reset(self) -> None:
        """Tables and live modules as provisioned (a server had loaded the live module), an empty cost log."""
        self.restore_tables()
        subprocess.run(["rm", "-rf", str(self.jit)], check=True)
        subprocess.run(["cp", "-a", str(self.jit_snapshot), str(self.jit)], check=True)
        self.cost_log.write_text("")

    def warm_live(self) -> None:
        """A server-like process built the live module from the live table (and the tuner's *_tune module)."""
        self.ctr.sh(f"cd {self.ctr.aiter_root} && python3 op_tests/test_gemm_a8w8_blockscale.py -m 1 -nk 1536,7168"
                    " > /dev/null 2>&1")
        subprocess.run(["cp", "-a", str(self.jit), str(self.jit_snapshot)], check=True)

    def job(self, name: str, csv_text: str, variant: str, *extra: str) -> tuple[float, dict, dict]:
        self.reset()
        self.runs += 1
        job = f"{name}{self.runs}"
        f = self.d / f"{job}.csv"
        f.write_text(csv_text)
        argv = [*TR, "--inventory", str(self.inv), "--workspace", str(self.ws), "-q", "run", "--node",
                self.node.alias, "--container", self.ctr.name, "--variant", variant, "--shapes-csv", str(f),
                "--yes", "--job-id", job, *extra]
        t = time.monotonic()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, capture_output=True)
        wall = time.monotonic() - t
        state = json.loads((self.ws / job / "state.json").read_text())
        self.last_ours = (time.time() - wall, wall, state, self.charges())
        return wall, state, self.summary()

    def summary(self) -> dict:
        ch = self.charges()
        return {**costs.summary(ch), "slept_s": sum(float(x["slept_s"]) for x in ch)}

    def handwritten_costed(self, state: dict, issue_script: bool = False) -> tuple[float, dict]:
        """handwritten_run.sh with the issue's after arm: AITER_REBUILD=1 on its (only) sample. With
        ``issue_script``, the baseline as the issue measured it too: in its private JIT dir, empty (the
        job's line without the copy of the current live module)."""
        state = json.loads(json.dumps(state))
        r = state["remote"]
        for s in r["pipeline"]:
            if s["name"] == "after":
                s["line"] = "export AITER_REBUILD=1; " + s["line"]
            if s["name"] == "baseline" and issue_script:
                empty = f"rm -rf {_q(r['bench_env']['before']['AITER_JIT_DIR'])}; "
                s["line"] = re.sub(r"^rc=0; .*?(echo '== tune-remote sample)", lambda m: "rc=0; " + empty + m.group(1),
                                   s["line"])
        self.reset()
        wall = self.handwritten(state)     # restores the tables again: nothing charged in between
        self.last_theirs = (time.time() - wall, wall, None, self.charges())
        return wall, self.summary()


def projected(wall: float, s: dict) -> float:
    return wall - s["slept_s"] + s["real_s"]


def timeline(b: CostBench) -> None:
    """Where the last pair's wall time went, in seconds from each command's start: the node's first and last
    charged cost (a process start or a build) and tune-remote's steps (state.json)."""
    rows = []
    for label, (t0, wall, state, charges) in (("tune-remote run", b.last_ours), ("handwritten_run.sh", b.last_theirs)):
        first = min(float(c["t"]) - float(c["slept_s"]) for c in charges) - t0
        last = max(float(c["t"]) for c in charges) - t0
        rows.append((label, first, last, wall))
        if state:
            steps = sorted(state["steps"].items(), key=lambda kv: kv[1]["started"])
            what = ", ".join(f"{k} {v['started'] - t0:.2f}+{v['finished'] - v['started']:.2f}" for k, v in steps)
    print("where the last pair's wall time went (s from the command's start):")
    print(f"{'':44} {'first node cost':>16} {'last node cost':>15} {'exit':>6}")
    for label, first, last, wall in rows:
        print(f"{'  ' + label:44} {first:16.2f} {last:15.2f} {wall:6.2f}")
    print(f"  tune-remote's steps (start+duration): {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.02, help="AITER_SIM_COST_SCALE of the node (default 0.02)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating pairs for the whole-run ratio")
    ap.add_argument("--big", action=argparse.BooleanOptionalAction, default=True,
                    help="also the 100-shape a8w8_blockscale and 3-config MoE jobs")
    args = ap.parse_args()
    # tune-remote as installed: `pip install` compiles the package's bytecode; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 (this machine's default) would compile ~60 modules again in every run (~0.15 s)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "orchestrator")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   stdout=subprocess.DEVNULL)
    from tests.fake_remote.container import ContainerSpec
    from tests.fake_remote.testbed import TestBed
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    try:
        node = bed.create_node((ContainerSpec(sim={"profile": "current", "cost_scale": args.scale}),), proxy=True)
        ctr = next(iter(node.containers.values()))
        with tempfile.TemporaryDirectory() as d:
            b = CostBench(node, ctr, Path(d), 1)
            try:
                b.warm_live()
                med = statistics.median
                print(f"scale {args.scale:g} (real seconds x scale are slept); {args.pairs} alternating pairs; medians")
                print(f"{'':44} {'tune-remote run':>18} {'handwritten_run.sh':>19} {'ratio':>7}  target")
                for issue_script in (False, True):
                    tag = "issue's script" if issue_script else "script on the job's lines"
                    ours, theirs, ratios, real_ratios = [], [], [], []
                    for _ in range(args.pairs):        # A B A B ...: each ratio from one pair
                        w, st, s = b.job("small", FOUR, "a8w8_blockscale", "--repeats", "1", "--promote", "none")
                        hw, hs = b.handwritten_costed(st, issue_script)
                        ours.append((w, s))
                        theirs.append((hw, hs))
                        ratios.append(w / hw)
                        real_ratios.append(projected(w, s) / projected(hw, hs))
                    print(f"{'vs ' + tag + ':'}")
                    print(f"{'  whole small job, simulated s':44} {med(w for w, _ in ours):18.2f} "
                          f"{med(w for w, _ in theirs):19.2f} {med(ratios):7.2f}  < 1.0")
                    print(f"{'    each pair (simulated)':44} " + " ".join(f"{r:.2f}" for r in ratios))
                    print(f"{'  whole small job, projected real s':44} {med(projected(*x) for x in ours):18.1f} "
                          f"{med(projected(*x) for x in theirs):19.1f} {med(real_ratios):7.2f}  < 1.0")
                    s, hs = ours[-1][1], theirs[-1][1]
                    print(f"{'  JIT builds per job':44} {s['builds']:18d} {hs['builds']:19d}")
                    print(f"{'  process starts per job (import torch)':44} {s['process_starts']:18d} "
                          f"{hs['process_starts']:19d}")
                    timeline(b)
                if args.big:
                    nks = ("4608,7168", "7168,2048", "1536,7168", "576,7168")
                    ms = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448,
                          512, 1024, 2048, 4096, 8192)
                    big = "M,N,K\n" + "".join(f"{m},{nk}\n" for nk in nks for m in ms)
                    # the live install holds the MoE modules a server loaded: a first job's before arm built them
                    _w, st, _s = b.job("warm", MOE3, "moe_2stages", "--promote", "none", "--repeats", "1")
                    built = ctr.host_path(st["remote"]["bench_env"]["before"]["AITER_JIT_DIR"])
                    subprocess.run(["sh", "-c", f"cp -p {_q(str(built))}/*.so {_q(str(b.jit))}/ && "
                                    f"cp -p {_q(str(built))}/*.so {_q(str(b.jit_snapshot))}/"], check=True)
                    for label, text, variant in (("100-shape a8w8_blockscale job", big, "a8w8_blockscale"),
                                                 ("3-config MoE job (9 shapes)", MOE3, "moe_2stages")):
                        w, _st, s = b.job("big", text, variant, "--promote", "none")
                        fixed = s["real_s"] / 60
                        print(f"{label + ', --repeats 3':44} {s['builds']} builds, {s['process_starts']} process "
                              f"starts: {fixed:.1f} projected real minutes of fixed cost "
                              f"({w:.1f} s simulated)")
            finally:
                b.cm_stop()
    finally:
        bed.close()


if __name__ == "__main__":
    main()
