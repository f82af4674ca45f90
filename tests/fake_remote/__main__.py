"""``python -m tests.fake_remote up|down|status|clean``: a simulated AITER node for people.

    up     [--name demo] [--profile current|legacy|newest|head ...] [--install-mode develop|install] [--pip-name aiter]
           [--proxy] [--json]
           Start (or re-show) node ``trtest-<name>``: sshd on 127.0.0.1:<free port> (daemonized), one
           container per --profile (first ``trtest-<name>-aiter-dev``, then ``-aiter-<profile>``).
           State: <STATE_ROOT>/trtest-<name>/state.json (STATE_ROOT = $TRTEST_STATE_ROOT or
           /tmp/tune-remote-testbed). --proxy puts a fault proxy process in front of sshd; its control
           file is <state dir>/proxy-control.json ({"latency", "paused", "cut_seq", "refuse", "bandwidth"}).
    down   --name demo [--keep-engine] [--json]
           Remove exactly what ``up`` made: its containers (by label), its sshd (by pid + config path),
           its proxy process, its state dir. The Docker engine is stopped only if the test bed started it
           and no container at all is left and no other node is up; the base image (a few bytes, labelled
           tune-remote.testbed=1) is kept for the next ``up`` (``clean`` removes it).
    status [--json]    nodes that are up
    clean  [--json]    ``down`` every node, sweep dead pytest sessions, remove the base image, stop our engine
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from . import procs
from .node import destroy_recorded
from .provision import (
    LABEL, OWNER_LABEL, STATE_ROOT, TestbedUnavailable, base_image_tag, docker, engine_answers, live_nodes,
    poll, state_lock, stop_engine_if_ours_and_unused,
)
from .testbed import TestBed, node_name, sweep_stale


def _state_dir(name: str) -> Path:
    return STATE_ROOT / node_name(name)


def _load_state(name: str) -> dict | None:
    try:
        return json.loads((_state_dir(name) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _state_healthy(state: dict) -> bool:
    pid = state.get("sshd_pid")
    if not (pid and procs.alive(pid)):
        return False
    if state.get("proxy_pid") and not procs.alive(state["proxy_pid"]):
        return False
    if not engine_answers():
        return False
    for c in state.get("containers", []):
        cp = docker("inspect", "--format", "{{.State.Running}}", c["name"], check=False)
        if cp.stdout.strip() != "true":
            return False
    return True


def _print_human(state: dict) -> None:
    print(f"node {state['name']} is up")
    print(f"  host {state['host']}  port {state['port']}  user {state['user']}")
    print(f"  identity file   {state['identity_file']}")
    print(f"  known_hosts     {state['known_hosts_file']}")
    print(f"  known_hosts line: {state['known_hosts_line']}")
    for c in state["containers"]:
        print(f"  container {c['name']}: profile {c['profile']} ({c['install_mode']}), aiter root {c['aiter_root']}")
    print("\nssh config snippet (also in " + state["ssh_config_file"] + "):\n")
    print(state["ssh_config"])
    print("try:\n  " + state["example"])
    print(f"\nstop it: python -m tests.fake_remote down --name {state['name']}")


def _start_proxy(node, state_dir: Path) -> None:
    control = state_dir / "proxy-control.json"
    control.write_text(json.dumps({"latency": 0, "paused": False, "cut_seq": 0, "refuse": False,
                                   "bandwidth": None}, indent=2) + "\n")
    port_file = state_dir / "proxy.port"
    log = open(state_dir / "proxy.log", "ab")
    repo_root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_remote.proxy", "--target-port", str(node.sshd_port),
         "--control", str(control), "--port-file", str(port_file)],
        cwd=repo_root, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    poll(lambda: port_file.exists(), timeout=15, what="proxy to listen")
    node.external_proxy_port = int(port_file.read_text())
    node.external_proxy_pid = proc.pid
    node._write_client_files()


def cmd_up(args) -> int:
    name = node_name(args.name)
    state_dir = STATE_ROOT / name
    with state_lock("nodes"):
        state = _load_state(name)
        if state and _state_healthy(state):
            state["reused"] = True
        else:
            if state or state_dir.exists():
                destroy_recorded(state or {"name": name, "owner": f"up-{name}", "state_dir": str(state_dir)})
            t0 = time.monotonic()
            bed = TestBed(owner=f"up-{name}", root=STATE_ROOT, keep_engine=True)
            bed.provision()
            specs = []
            for prof in args.profile or ["current"]:
                spec = {"profile": prof, "install_mode": args.install_mode}
                if args.pip_name == "aiter":
                    spec["pip_name"] = "aiter"
                specs.append(spec)
            node = bed.create_node(specs, name=name, proxy=False, daemon=True, directory=state_dir)
            if args.proxy:
                _start_proxy(node, state_dir)
            state = node.to_json()
            state["timings"] = dict(bed.timings, node_up_s=node.startup_s, total_s=time.monotonic() - t0)
            state["engine"] = {"started_by_testbed": bed.engine.started_by_testbed, "pid": bed.engine.pid,
                               "log": bed.engine.log_path, "server_version": bed.engine.server_version}
            node.save(state_dir / "node.json")
            tmp = state_dir / "state.json.tmp"
            tmp.write_text(json.dumps(state, indent=2) + "\n")
            tmp.replace(state_dir / "state.json")
            # The node outlives this process: forget it so nothing is torn down on exit.
            bed.nodes.clear()
            state["reused"] = False
    if args.json:
        print(json.dumps(state, indent=2))
    else:
        _print_human(state)
    return 0


def cmd_down(args) -> int:
    name = node_name(args.name)
    state_dir = STATE_ROOT / name
    with state_lock("nodes"):
        state = _load_state(name) or {"name": name, "owner": f"up-{name}", "state_dir": str(state_dir)}
        removed = destroy_recorded(state) if engine_answers() or state_dir.exists() else []
    engine_note = "engine left alone (--keep-engine)" if args.keep_engine else stop_engine_if_ours_and_unused()
    out = {"name": name, "removed": removed, "engine": engine_note}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{name}: " + ("; ".join(removed) if removed else "nothing to remove") + f"; {engine_note}")
    return 0


def cmd_status(args) -> int:
    nodes = []
    for d in live_nodes():
        try:
            st = json.loads((d / "state.json").read_text())
        except (OSError, ValueError):
            continue
        nodes.append({"name": st["name"], "port": st["port"], "healthy": _state_healthy(st),
                      "containers": [c["name"] for c in st["containers"]], "state_dir": str(d)})
    if args.json:
        print(json.dumps({"nodes": nodes}, indent=2))
    else:
        for n in nodes:
            print(f"{n['name']}: port {n['port']} {'up' if n['healthy'] else 'BROKEN'} "
                  f"containers {', '.join(n['containers'])}")
        if not nodes:
            print("no test-bed node is up")
    return 0


def cmd_clean(args) -> int:
    notes = []
    for d in live_nodes():
        with state_lock("nodes"):
            try:
                notes += destroy_recorded(json.loads((d / "state.json").read_text()))
            except (OSError, ValueError, KeyError):
                pass
    notes += sweep_stale()
    if engine_answers():
        cp = docker("ps", "-a", "--filter", f"label={LABEL}=1", "--format",
                    f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}', check=False)
        left = [line.split()[0] for line in cp.stdout.splitlines()
                if line.split()[1:] and line.split()[1].startswith("up-")]
        if left:
            docker("rm", "-f", "-v", *left, check=False)
            notes.append(f"removed {len(left)} orphaned up-containers")
        if not docker("ps", "-aq", "--filter", f"label={LABEL}=1", check=False).stdout.strip():
            if docker("image", "inspect", base_image_tag(), check=False).returncode == 0:
                docker("image", "rm", base_image_tag(), check=False)
                notes.append(f"removed image {base_image_tag()}")
        notes.append(stop_engine_if_ours_and_unused())
    if args.json:
        print(json.dumps({"notes": notes}, indent=2))
    else:
        print("\n".join(notes) or "nothing to clean")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fake_remote", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a simulated node (idempotent)")
    up.add_argument("--name", default="demo")
    up.add_argument("--profile", action="append", choices=["current", "legacy", "newest", "head"],
                    help="one container per --profile (default: current)")
    up.add_argument("--install-mode", choices=["develop", "install"], default="develop")
    up.add_argument("--pip-name", choices=["amd-aiter", "aiter"], default=None)
    up.add_argument("--proxy", action="store_true", help="put a fault proxy (own process) in front of sshd")
    up.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="remove exactly what `up --name` made")
    down.add_argument("--name", default="demo")
    down.add_argument("--keep-engine", action="store_true")
    down.add_argument("--json", action="store_true")
    st = sub.add_parser("status")
    st.add_argument("--json", action="store_true")
    cl = sub.add_parser("clean", help="down every node, sweep dead sessions, remove base image, stop our engine")
    cl.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "clean": cmd_clean}[args.cmd](args)
    except TestbedUnavailable as e:
        print(f"test bed unavailable: {e}", file=sys.stderr)
        return 3
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

