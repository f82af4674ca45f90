"""op ``tuning_guards``: upstream's level-0 guards (op_tests/tuning_tests: test_csv_validation,
test_config_shape_collision) run on the node's own AITER with a candidate table added, before it is proposed
upstream (issue 30; aiter#5155, #5500).

They read ``<root>/aiter/configs`` next to their own ``op_tests`` directory, so the op copies both into a temporary
tree, adds the candidate as ``aiter/configs/model_configs/<file>``, runs each test module there
(``python -m unittest``, in its own process group, killed past the timeout) and removes the tree: the node's
AITER is never touched.
"""

import os
import shutil
import tempfile

from .common import HelperError
from .runcmd import op_run

TAIL_LINES = 6


def op_tuning_guards(req):
    """request: {"python", "root", "file": a plain CSV file name, "content": text, "tests": [module names
    under op_tests/tuning_tests], "timeout_s"}
    answer: {"results": {test: {"status": "passed"|"failed"|"missing"|"timed_out", "exit", "tail"}}}"""
    root, name = req.get("root"), req.get("file") or ""
    if not root or not name or "/" in name or not name.endswith(".csv"):
        raise HelperError("tuning_guards: root and a plain .csv file name are required")
    tests_dir = os.path.join(root, "op_tests", "tuning_tests")
    tmp = tempfile.mkdtemp(prefix="tune_remote_guards_")
    try:
        shutil.copytree(os.path.join(root, "aiter", "configs"), os.path.join(tmp, "aiter", "configs"))
        shutil.copytree(tests_dir, os.path.join(tmp, "op_tests", "tuning_tests"))
        for pkg in ("op_tests", os.path.join("op_tests", "tuning_tests")):
            init = os.path.join(tmp, pkg, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
        mc = os.path.join(tmp, "aiter", "configs", "model_configs")
        if not os.path.isdir(mc):
            os.makedirs(mc)
        with open(os.path.join(mc, name), "w") as fh:
            fh.write(req.get("content") or "")
        results = {}
        for test in req.get("tests") or []:
            if not os.path.isfile(os.path.join(tests_dir, test + ".py")):
                results[test] = {"status": "missing", "exit": None, "tail": ""}
                continue
            ans = op_run({"argv": [req.get("python") or "python3", "-m", "unittest",
                                   "op_tests.tuning_tests." + test],
                          "cwd": tmp, "timeout_s": req.get("timeout_s") or 300})
            out = (ans.get("stderr") or "") + (ans.get("stdout") or "")
            status = "timed_out" if ans.get("timed_out") else "passed" if ans.get("exit") == 0 else "failed"
            tail = "\n".join(out.strip().splitlines()[-TAIL_LINES:])
            results[test] = {"status": status, "exit": ans.get("exit"), "tail": tail.replace(tmp, "<copy>")}
        return {"results": results}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
