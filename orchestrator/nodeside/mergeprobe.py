"""The node's duplicate-key merge rule, probed by running its own merge (issue 36, aiter#5184).

AITER merges the tables an ``AITER_CONFIG_*`` list (or configs/ + model_configs/) names in
``AITER_CONFIG.update_config_files`` (aiter/jit/core.py). From v0.1.12 a duplicate key makes it rewrite the
sources and raise ("... saved back to source config files. Please re-run."); the stored core.py at c4452f2c
still does. The fix of #5184 the December reference describes (op_tests/tuning_tests/test_config_merge_fallback.py,
stored at c4452f2c, and a resolution test) resolves duplicates in the merged copy (lowest ``us``, the first
source on ties) and leaves the sources byte-identical; it is not in any stored core.py (unmerged), so a node may
have either. Which one is read by executing that method on two scratch tables, as upstream's own test does (the
method alone, out of an AST of core.py: nothing imports aiter, no GPU, no torch; the real one imports pandas).
What it writes goes under a fresh temporary directory (TMPDIR), removed afterwards; an AITER that writes
``/tmp/aiter_configs/`` literally gets only a probe-named file there, removed at once. Stdlib, Python >= 3.8.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import cache

RULES = ("raise", "resolve", "keep")

# run by the node's Python: argv = core.py, scratch dir; prints one JSON line
_SCRIPT = r'''
import ast, json, logging, os, re, sys
core, tmp = sys.argv[1], sys.argv[2]
with open(core) as fh:
    tree = ast.parse(fh.read())
fn = None
for node in tree.body:
    if isinstance(node, ast.ClassDef) and node.name == "AITER_CONFIG":
        for f in node.body:
            if isinstance(f, ast.FunctionDef) and f.name == "update_config_files":
                fn = f
if fn is None:
    print(json.dumps({"absent": True}))
    sys.exit(0)
log = logging.getLogger("tune-remote-merge-probe")
log.disabled = True
ns = {"os": os, "re": re, "logger": log, "AITER_ROOT_DIR": tmp,
      "mp_lock": lambda lock_path, main_func, *a, **k: main_func()}
exec(compile(ast.Module(body=[fn], type_ignores=[]), core, "exec"), ns)
name = "tune_remote_merge_probe_%d" % os.getpid()
os.makedirs(os.path.join(tmp, "aiter", "configs"))
with open(os.path.join(tmp, "aiter", "configs", name + "_untuned_gemm.csv"), "w") as fh:
    fh.write("M,N,K\n")
head = "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
srcs = [(os.path.join(tmp, "first.csv"), head + "gfx942,80,16,1024,1024,1,0,9.5,probe_slow\n"),
        (os.path.join(tmp, "second.csv"), head + "gfx942,80,16,1024,1024,2,0,4.25,probe_fast\n"
                                                 "gfx942,80,32,1024,1024,1,0,7.0,probe_other\n")]
for p, text in srcs:
    with open(p, "w") as fh:
        fh.write(text)
out = {"raised": None, "merged": None, "sources_unchanged": None}
try:
    path = ns["update_config_files"](None, os.pathsep.join(p for p, _ in srcs), name + "_tuned_gemm")
    with open(path) as fh:
        out["merged"] = [ln.split(",")[-1] for ln in fh.read().splitlines()[1:] if ln.strip()]
    if not os.path.realpath(path).startswith(os.path.realpath(tmp) + os.sep):
        for extra in (path, path + ".lock"):      # an older AITER writes /tmp/aiter_configs/ literally
            if os.path.basename(extra).startswith(name) and os.path.isfile(extra):
                os.remove(extra)
except Exception as exc:
    out["raised"] = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "")
unchanged = True
for p, text in srcs:
    with open(p) as fh:
        unchanged = unchanged and fh.read() == text
out["sources_unchanged"] = unchanged
print(json.dumps(out))
'''


def classify(out):
    """(rule or None, why): ``raise`` (a duplicate makes the merge raise), ``resolve`` (the merged copy keeps
    the lowest-us row, the sources untouched), ``keep`` (both rows kept), None (not told apart: why)."""
    if out.get("absent"):       # no AITER_CONFIG.update_config_files: no merge to probe (the version decides)
        return None, None
    raised, merged = out.get("raised"), out.get("merged")
    if raised:
        if "duplicate" in raised.lower():
            return "raise", None
        return None, "the merge failed on two scratch tables: %s" % raised
    if merged is None:
        return None, "the merge wrote no table"
    m16 = [k for k in merged if k.startswith("probe_") and k != "probe_other"]
    if m16 == ["probe_fast"] and "probe_other" in merged and out.get("sources_unchanged"):
        return "resolve", None
    if sorted(m16) == ["probe_fast", "probe_slow"]:
        return "keep", None
    return None, "the merge kept %s of one key and changed the sources: %s" % (
        ",".join(m16) or "nothing", not out.get("sources_unchanged"))


def _cache_file(cache_dir, core, python):
    """The cache name of the rule of this core.py under this interpreter (the probe imports pandas: ~1.7 s a
    discover on a loaded host), keyed by both files' path, size, mtime and inode."""
    return "merge-rule-%s.txt" % cache.key_of([1, cache.stat_key(cache.interpreter(python)), cache.stat_key(core)])


def merge_rule(core, python=None, timeout=60.0, cache_dir=None):
    """(rule or None, problem or None) of the AITER whose aiter/jit/core.py is ``core``; a rule told is kept
    in ``cache_dir`` and read again while core.py and the interpreter are unchanged."""
    if not os.path.isfile(core):
        return None, None          # nothing to run (a trimmed install): the version decides
    python = python or sys.executable
    name = _cache_file(cache_dir, core, python)
    kept = (cache.read(cache_dir, name) or "").strip()
    if kept in RULES:
        return kept, None
    rule, problem = _run(core, python, timeout)
    if rule:
        cache.keep(cache_dir, name, rule)       # best effort: else the next discover runs the merge again
    return rule, problem


def _run(core, python, timeout):
    tmp = tempfile.mkdtemp(prefix="tune-remote-merge-")
    try:
        env = dict(os.environ, TMPDIR=tmp)
        proc = subprocess.run([python, "-c", _SCRIPT, core, tmp], cwd=tmp, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)
        lines = proc.stdout.decode("utf-8", "replace").strip().splitlines()
        if proc.returncode != 0 or not lines:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            return None, "the merge probe exited %d%s" % (proc.returncode, (": " + err[-1][:300]) if err else "")
        return classify(json.loads(lines[-1]))
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return None, "the merge probe failed: %s" % exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
