#!/usr/bin/env bash
# The reference for `tune-remote run`: what a skilled engineer writes by hand, over ONE OpenSSH
# ControlMaster connection (no client start-up per step). Same remote steps as the run:
# discover, write the untuned CSV, baseline, tune in the foreground, after, copy the logs back.
# usage: handwritten_run.sh "SSH ARGV (ControlMaster options, user@host)" LOCAL_UNTUNED_CSV
# env: CTR (container), CSV (node path to write), BASELINE / TUNE / AFTER (shell lines run in the
#      container, as tune-remote renders them), BASE_LOG / TUNE_LOG / AFTER_LOG (node paths of the
#      step logs), OUT (local dir)
set -euo pipefail
[ -n "${HANDWRITTEN_TRACE:-}" ] && set -x
SSH=$1; LOCAL_CSV=$2
q() { printf "'%s'" "$(printf %s "$1" | sed "s/'/'\\\\''/g")"; }
r() { $SSH "docker exec -i $CTR sh -c $(q "$1")"; }      # one command in the container
r 'python3 -c "import importlib.metadata as m; print(m.version(\"amd-aiter\"))" 2>/dev/null || true' >/dev/null
r "cat > $(q "$CSV")" < "$LOCAL_CSV"
r "mkdir -p \$(dirname $(q "$BASE_LOG")); ($BASELINE) > $(q "$BASE_LOG") 2>&1 || true"
# AITER exits non-zero with "[Tuning not Finished]" after writing the rows it could tune: that is partial
r "($TUNE) > $(q "$TUNE_LOG") 2>&1 || grep -qF 'Tuning not Finished' $(q "$TUNE_LOG")"
r "($AFTER) > $(q "$AFTER_LOG") 2>&1 || true"
mkdir -p "$OUT"
r "tar -cf - $(q "$BASE_LOG") $(q "$TUNE_LOG") $(q "$AFTER_LOG") 2>/dev/null" | tar -xf - -C "$OUT"
