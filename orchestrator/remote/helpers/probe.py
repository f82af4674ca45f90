"""The capability probe: what an AITER install ships (tuned-CSV header, the tuner's --help, the op_test's
flags, tuning_tests), read without importing aiter. ``discover`` runs it from a template whose paths name
``{root}``, ``{meta}`` and ``{gfx}`` (the laptop's steps/capabilities.py makes it, and checks that the
request resolved here is the one it would have sent, else it asks ``probe`` itself)."""

import os
import re
import subprocess
import sys

from common import _read_text

_PLACEHOLDER = re.compile(r"\{(root|meta|gfx)\}")


def needs_gfx(template):
    return any("{gfx}" in v for v in template.values() if isinstance(v, str))


def from_template(template, facts, gfx, env):
    """{"request": the probe request resolved for this install, "answer": op_probe's answer}.
    ``config_env``: when the job's environment names a table there (first entry; relative to the root),
    the probe reads that one, as AITER does."""
    values = {"root": facts["aiter_root"], "meta": facts.get("meta_root") or facts["aiter_root"],
              "gfx": gfx or "gfx942"}
    req = {}
    for key, value in template.items():
        if key != "config_env":
            req[key] = _PLACEHOLDER.sub(lambda m: values[m.group(1)], value) if isinstance(value, str) else value
    configured = (env.get(template.get("config_env") or "") or "").split(":")[0]
    if configured:
        req["tuned_csv"] = configured if configured.startswith("/") else "%s/%s" % (values["root"], configured)
    return {"request": req, "answer": op_probe(req)}


OPTION_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _header(path):
    try:
        with open(path, "r", errors="replace") as fh:
            line = fh.readline()
    except OSError:
        return None
    line = line.strip()
    return [c.strip() for c in line.split(",")] if line else None


def op_probe(req):
    """Capabilities of this AITER install, read from what it ships (never imports aiter here).

    request: {"aiter_root", "meta_root", "python", "tuned_csv", "tune_script", "op_test",
              "fmoe_csv", "help_timeout"}; every path absolute, each optional.
    answer:  {"tuned_header": [..] or null, "tuner_help": text or null, "tuner_help_problem",
              "op_test_src_flags": [..] or null, "op_test_markdown": bool or null,
              "tuning_tests": bool or null, "moe_gelutanh": bool or null,
              "tune_script_exists": bool or null}"""
    out = {"tuned_header": None, "tuner_help": None, "tuner_help_problem": None,
           "op_test_src_flags": None, "op_test_markdown": None, "tuning_tests": None,
           "moe_gelutanh": None, "tune_script_exists": None}
    if req.get("tuned_csv"):
        out["tuned_header"] = _header(req["tuned_csv"])
    script = req.get("tune_script")
    if script:
        out["tune_script_exists"] = os.path.isfile(script)
    if script and os.path.isfile(script):
        python = req.get("python") or sys.executable
        try:
            timeout = float(req.get("help_timeout") or 180)
        except (TypeError, ValueError):
            timeout = 180.0
        cwd = req.get("aiter_root") or os.path.dirname(script)
        try:
            proc = subprocess.run([python, script, "--help"], cwd=cwd, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
            text = proc.stdout.decode("utf-8", "replace")
            if proc.returncode == 0 and "usage:" in text:
                out["tuner_help"] = text
            else:
                err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
                out["tuner_help_problem"] = "%s --help exited %d%s" % (
                    os.path.basename(script), proc.returncode, (": " + err[-1][:300]) if err else "")
        except (OSError, subprocess.SubprocessError) as exc:
            out["tuner_help_problem"] = "%s --help failed: %s" % (os.path.basename(script), exc)
    test = req.get("op_test")
    if test:
        src = _read_text(test)
        if src is not None:
            flags = set()
            for m in re.finditer(r"add_argument\(([^)]*)", src):
                for s in re.findall(r"[\"'](--?[A-Za-z][\w-]*)[\"']", m.group(1)):
                    flags.add(s)
            out["op_test_src_flags"] = sorted(flags)
            out["op_test_markdown"] = "to_markdown" in src or "summary (markdown)" in src
    root = req.get("aiter_root")
    if root:
        if os.path.isfile(os.path.join(root, "op_tests", "tuning_tests", "test_csv_validation.py")):
            out["tuning_tests"] = True
        elif os.path.isdir(os.path.join(root, "op_tests")):
            out["tuning_tests"] = False  # a checkout with op_tests but no tuning_tests
        # an install without op_tests/ says nothing: the version decides
    fmoe = req.get("fmoe_csv")
    if fmoe:
        text = _read_text(fmoe)
        if text is not None and "ActivationType.GeluTanh" in text:
            out["moe_gelutanh"] = True
    return out
