"""The scripts a Slurm campaign puts on the cluster's shared filesystem (``<home>/.tune-remote/slurm/<job>/<i>/``).

``holder.sh`` is each shard's batch job. It checks that the node's container runs (else it fails at once,
naming the node), says where Slurm put it (``node``) and which GPUs Slurm granted (``gpus``), then keeps the
allocation until tune-remote writes ``release``. Meanwhile, when a campaign planned while it was pending left
its shard's drive bundle (``drive/ready``, ``../drive.zip``) and the node's ``python3`` is >= 3.10, it runs the
node driver once in its background (campaign/nodedrive.py: output in ``drive.log``, exit code in ``drive.rc``).
Its TERM trap is the only way a Slurm-side stop (``tune-remote cancel``, a user's ``scancel``, the time limit)
reaches the tuner: what ``docker exec`` started belongs to the
container runtime, so no proctrack plugin (cgroup included) sees it. The trap runs ``stop.py`` in the container,
which TERMs, then KILLs, every process group carrying this campaign's job marker.

Written for ``/bin/sh`` (dash): the loop sleeps in the background and ``wait``s, so a trap runs at once
(a shell delays traps until its foreground command ends); process groups are signalled from Python in the
container (dash's ``kill -TERM -- -PGID`` fails).
"""

HOLDER = r"""#!/bin/sh
# tune-remote holder job. usage: holder.sh DIR CONTAINER_TEMPLATE JOB_ID DOCKER_COMMAND...
d="$1"; tmpl="$2"; job="$3"; shift 3
node="${SLURMD_NODENAME:-$(hostname -s)}"
ctr=$(printf '%s' "$tmpl" | sed "s/{node}/$node/g")
printf '%s\n' "${ROCR_VISIBLE_DEVICES:-${CUDA_VISIBLE_DEVICES:-}}" > "$d/gpus"
if ! seen=$("$@" inspect -f '{{.State.Running}}' "$ctr" 2>&1) || [ "$seen" != true ]; then
  why=$(printf '%s' "$seen" | head -n 1)
  printf 'no running container %s on node %s (%s: %s)\n' "$ctr" "$node" "$*" "${why:-not running}" > "$d/error"
  echo 3 > "$d/rc"
  exit 3
fi
stop() {
  trap '' TERM INT
  g=$(cat "$d/cancel" 2>/dev/null || echo 10)
  "$@" exec -i "$ctr" python3 - "$job" "$g" < "$d/stop.py" > "$d/stopped.tmp" 2>&1
  mv -f "$d/stopped.tmp" "$d/stopped"
  echo 143 > "$d/rc"
  exit 143
}
trap 'stop "$@"' TERM INT
printf '%s\n' "$node" > "$d/node.tmp" && mv "$d/node.tmp" "$d/node"
drive=
while [ ! -e "$d/release" ]; do
  if [ -z "$drive" ] && [ -e "$d/drive/ready" ] && [ ! -e "$d/drive.rc" ]; then
    drive=1
    if python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      ( python3 "$d/../drive.zip" "$d" "$node" "$ctr" "$@" > "$d/drive.log" 2>&1
        echo $? > "$d/drive.rc.tmp" && mv -f "$d/drive.rc.tmp" "$d/drive.rc" ) &
    else
      printf 'no python3 >= 3.10 on node %s (%s): the laptop carries this shard\n' "$node" \
        "$(python3 --version 2>&1 | head -n 1)" > "$d/drive.log"
      echo 127 > "$d/drive.rc.tmp" && mv -f "$d/drive.rc.tmp" "$d/drive.rc"
    fi
  fi
  sleep 1 &
  wait $!
done
echo 0 > "$d/rc"
"""

# Runs in the container (python3 >= 3.8, as the node helper). argv: JOB_ID GRACE_S. Prints one JSON line.
STOP = r'''
import json, os, signal, sys, time
job, grace = sys.argv[1], float(sys.argv[2])
WANT = tuple(("TUNE_REMOTE_JOB=%s." % p).encode() for p in {job, job[:48]})
RUN_DIR = b"TUNE_REMOTE_RUN_DIR="
me = os.getpid()


def ours():
    """{pid: (pgid, run_dir)} of live processes carrying this campaign's marker (sub-jobs are JOB.<...>)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open("/proc/%d/environ" % pid, "rb") as fh:
                env = fh.read().split(b"\0")
            with open("/proc/%d/stat" % pid, "rb") as fh:
                stat = fh.read()
            rest = stat[stat.rindex(b")") + 2:].split()
        except (OSError, ValueError):
            continue
        if rest[0] in (b"Z", b"X", b"x") or not any(e.startswith(WANT) for e in env):
            continue
        rd = [e[len(RUN_DIR):].decode("utf-8", "surrogateescape") for e in env if e.startswith(RUN_DIR)]
        out[pid] = (int(rest[2]), rd[0] if rd else None)
    return out


def signal_all(procs, sig):
    """A group whose leader carries the marker is ours as a whole (the helper's supervisor leads it)."""
    for pid, (pgid, _) in procs.items():
        for kill, target in ((os.killpg, pgid if pgid in procs else 0), (os.kill, pid)):
            if target > 1 and target != os.getpgrp():
                try:
                    kill(target, sig)
                except OSError:
                    pass


# A launch already in flight when the TERM came (a helper op whose docker exec client died with the step
# goes on in the container) starts its processes a moment later: scan until nothing of ours has been seen
# for a second (and at least QUIET s), TERMing what appears; KILL what is left at the grace's end.
QUIET = min(grace, 2.0)
start = time.time()
deadline, last_seen = start + grace, start
signalled, killed, marked = set(), set(), set()
live = ours()
while time.time() < deadline:
    for pgid, rd in live.values():   # the run reads 'cancelled', not 'failed', like the helper's own cancel
        if rd and rd not in marked and os.path.isdir(rd) and not os.path.exists(os.path.join(rd, "cancelled")):
            tmp = os.path.join(rd, ".cancelled.slurm")
            with open(tmp, "w") as fh:
                json.dump({"at": time.time(), "grace_s": grace, "by": "slurm"}, fh)
            os.replace(tmp, os.path.join(rd, "cancelled"))
            marked.add(rd)
    if live:
        signal_all(live, signal.SIGTERM)
        signalled.update(live)
        last_seen = time.time()
    elif time.time() - start >= QUIET and time.time() - last_seen >= 1.0:
        break
    time.sleep(0.1)
    live = ours()
end = time.time() + 5
while live and time.time() < end:
    signal_all(live, signal.SIGKILL)
    killed.update(live)
    time.sleep(0.1)
    live = ours()
others = set()
for name in os.listdir("/proc"):      # for the record: other jobs' markers seen here (left alone)
    try:
        with open("/proc/%s/environ" % name, "rb") as fh:
            others.update(e.decode("utf-8", "replace") for e in fh.read().split(b"\0")
                          if e.startswith(b"TUNE_REMOTE_JOB=") and not e.startswith(WANT))
    except (OSError, ValueError):
        continue
print(json.dumps({"at": round(time.time(), 3), "signalled": len(signalled), "killed": len(killed),
                  "remaining": sorted(live), "other_jobs": sorted(others)[:20]}))
'''
