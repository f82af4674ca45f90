"""`tune-remote demo`: the real pipeline against a simulated AITER node on this machine.

No GPU, no SSH, no docker: the "container" is a local directory holding the simulated AITER
(orchestrator.sim, shipped in the package), and commands run through LocalTransport with the
node's environment. Everything else (helper, detached pipeline, fetch, report) is the real code.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from .context import Target
from .inventory import ContainerSpec, NodeSpec
from .remote.local import LocalTransport
from .sim import SimSpec, install
from .sim.logs import expected_shapes

NODE_FILE = "demo-node.json"
DEMO_LOG = "vllm_tp8_dsv3.log"


def prepare_demo(directory: Path, *, profile: str = "current", variant: str = "a8w8_blockscale",
                 noise_pct: float = 0.0, cu_num: int = 256, noise_model: str = "uniform",
                 noise_seed: int = 0, aa: bool = False) -> tuple[Path, str]:
    """Install a simulated node under ``directory``; return it and the server log to mine. ``noise_model``
    "measured" draws the benchmarks' noise from the real GPU's (sim/noise_model.py; ``noise_pct`` unused)."""
    directory = Path(directory).resolve()
    inst = install(directory, SimSpec(profile=profile, cu_num=cu_num))
    control: dict = {"tuning_changes_nothing": True} if aa else {}
    if noise_model == "measured":
        control.update(bench_noise="measured", bench_noise_seed=int(noise_seed))
    elif noise_pct:
        control["bench_noise_pct"] = float(noise_pct)
    if control:
        Path(inst.control_path).write_text(json.dumps(control))
    env = dict(inst.env)
    # the node runs the same interpreter as this process (python3 may live elsewhere on a laptop)
    bin_dir, _, rest = env["PATH"].partition(":")
    env["PATH"] = f"{bin_dir}:{os.path.dirname(sys.executable)}:{rest}"
    (directory / NODE_FILE).write_text(json.dumps({"env": env, "aiter_root": inst.aiter_root}, indent=2))
    log = _log_with(inst, variant)
    return directory, log


def serve_cmd(variant: str) -> str | None:
    """The demo's --serve-cmd: the simulated serving benchmark (a vLLM-style decode loop over a8w8 block-scale
    GEMMs of the demo's shapes) that reads the live table and module like a fresh server."""
    if variant != "a8w8_blockscale":
        return None
    return f"{shlex.quote(sys.executable)} -m aiter._sim.serve --nk 7168,2048 --nk 2112,7168 --m 1,64,1024"


def _log_with(inst, variant: str) -> str:
    names = sorted(inst.logs)
    for name in ([DEMO_LOG] if DEMO_LOG in names else []) + names:
        if expected_shapes(name).get(variant):
            return str(Path(inst.logs_dir) / name)
    raise ValueError(f"the simulated logs have no untuned {variant} shapes")


def demo_target(directory: str, name: str = "demo") -> Target:
    node_info = json.loads((Path(directory) / NODE_FILE).read_text())
    node = NodeSpec(name=name, host="localhost", local=True,
                    containers={"simulated": ContainerSpec(name="simulated", python=sys.executable)})
    host = LocalTransport(base_env=node_info["env"], label=name)
    return Target(node, node.containers["simulated"], host=host, ctr=host)


# ------------------------------------------------------------------------------------------------ campaigns
def demo_nodes(root: Path, count: int, *, profile: str, variant: str, noise_pct: float,
               noise_model: str = "uniform", noise_seed: int = 0, aa: bool = False) -> tuple[dict, str]:
    """``count`` simulated nodes under ``root`` (demo1..N); from the third on, every third one has its GPUs
    partitioned (cu_num 64: a GPU kind of its own). Returns {node: dir} and the first node's server log."""
    dirs, log = {}, None
    for i in range(1, count + 1):
        d, node_log = prepare_demo(Path(root) / f"demo{i}", profile=profile, variant=variant, noise_pct=noise_pct,
                                   cu_num=64 if i % 3 == 0 else 256, noise_model=noise_model,
                                   noise_seed=noise_seed + i - 1, aa=aa)
        dirs[f"demo{i}"] = str(d)
        log = log or node_log
    return dirs, log
