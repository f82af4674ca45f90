#!/bin/sh
# The node-side pipeline of one tune-remote job: runs each step in turn, detached from the laptop.
# usage: pipeline.sh RUN_DIR [NAME LOG LINE MARKER]...
#   NAME   step name; its exit status is written atomically to RUN_DIR/NAME.rc
#   LOG    the step's log file (stdout+stderr appended)
#   LINE   a shell line rendered and quoted by tune-remote (orchestrator/remote/shell.py)
#   MARKER if the step exits non-zero but its log contains MARKER (a fixed string), the result is partial
#          and the pipeline goes on (AITER's "[Tuning not Finished]" after writing the rows it could tune);
#          MARKER "*" makes the step non-fatal: any failure is partial (a baseline bench never gates tuning)
# A step whose .rc already exists is not run again (idempotent re-entry). An empty or garbled .rc is a
# failure (exit 1), never a success.
set -u
rd=$1
shift
mkdir -p "$rd"
while [ $# -ge 4 ]; do
  name=$1; log=$2; line=$3; marker=$4
  shift 4
  if [ -f "$rd/$name.rc" ]; then
    rc=$(cat "$rd/$name.rc" 2>/dev/null)
    case "$rc" in ''|*[!0-9]*) rc=1;; esac
    echo "== $name already-done rc $rc"
  else
    mkdir -p "$(dirname "$log")"
    echo "== $name start $(date +%s) $log"
    sh -c "$line" >> "$log" 2>&1 < /dev/null
    rc=$?
    if ! { echo "$rc" > "$rd/$name.rc.tmp" && mv -f "$rd/$name.rc.tmp" "$rd/$name.rc"; }; then
      echo "== $name cannot write $rd/$name.rc (disk full?)"
    fi
    echo "== $name rc $rc"
  fi
  if [ "$rc" -ne 0 ]; then
    if [ "$marker" = "*" ] || { [ -n "$marker" ] && grep -qF -- "$marker" "$log"; }; then
      echo "== $name partial"
    else
      echo "== pipeline failed at $name"
      exit "$rc"
    fi
  fi
done
echo "== pipeline done"
exit 0
