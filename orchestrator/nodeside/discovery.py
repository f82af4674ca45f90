"""op discover: read-only facts about AITER and the GPUs (nothing imports aiter)."""

import json
import os
import re
import shutil
import socket
import sys
import threading
import platform

from . import files
from . import probe
from . import proctree
from .common import HelperError, read_file_text, run_tool, boot_id



def _norm_name(name):
    return re.sub(r"[-_.]+", "-", (name or "")).lower()


def _is_amd_aiter_pkg(package_dir):
    return bool(package_dir) and (os.path.isdir(os.path.join(package_dir, "configs"))
                                  or os.path.isdir(os.path.join(package_dir, "jit")))


def _realpath(p):
    return os.path.realpath(p) if p else None


def _dist_candidates():
    """Installed distributions named amd-aiter or aiter (importlib.metadata, nothing imported). Looked up by
    name (the finder matches the ``*.dist-info``/``*.egg-info`` directory names): listing every distribution
    parses each one's METADATA, ~1 ms apiece, 0.2-0.4 s in a torch container with hundreds of them."""
    try:
        from importlib import metadata as md
    except ImportError:  # pragma: no cover - Python < 3.8
        return [], ["importlib.metadata unavailable (Python < 3.8)"]
    found = []
    seen = set()
    for want in ("amd-aiter", "aiter"):      # amd-aiter first, then aiter; sys.path order within a name
        try:
            dists = list(md.distributions(name=want))
        except Exception as exc:  # noqa: BLE001 - a broken site-packages must not crash discover
            return [], ["cannot list installed distributions: %s" % exc]
        for dist in dists:
            try:
                name = dist.metadata["Name"]
            except Exception:  # noqa: BLE001
                continue
            norm = _norm_name(name)
            if norm != want:
                continue
            key = (norm, str(getattr(dist, "_path", id(dist))))
            if key in seen:
                continue
            seen.add(key)
            found.append((norm, dist))
    return found, []


def _dist_info(norm, dist):
    """What a distribution says about its aiter package: dir, editable, direct_url."""
    info = {"pip_name": norm, "version": None, "package_dir": None, "editable": False,
            "project_dir": None, "location": None}
    try:
        info["version"] = dist.version
    except Exception:  # noqa: BLE001
        pass
    try:
        base = dist.locate_file("")
        info["location"] = str(base)
    except Exception:  # noqa: BLE001
        base = None
    direct = None
    try:
        text = dist.read_text("direct_url.json")
        direct = json.loads(text) if text else None
    except Exception:  # noqa: BLE001
        direct = None
    if isinstance(direct, dict) and (direct.get("dir_info") or {}).get("editable"):
        url = direct.get("url") or ""
        if url.startswith("file://"):
            from urllib.parse import unquote, urlparse
            project = unquote(urlparse(url).path)
            info["editable"] = True
            info["project_dir"] = project
            cand = os.path.join(project, "aiter")
            if os.path.isdir(cand):
                info["package_dir"] = cand
    if info["package_dir"] is None:
        files = None
        try:
            files = dist.files
        except Exception:  # noqa: BLE001
            files = None
        owns = False
        for f in files or ():
            parts = getattr(f, "parts", ())
            if parts and parts[0] == "aiter":
                owns = True
                break
        if owns and base is not None:
            info["package_dir"] = os.path.join(str(base), "aiter")
        elif base is not None and os.path.isdir(os.path.join(str(base), "aiter")):
            # `setup.py develop` egg-info in the checkout (files unknown): the package beside it
            info["package_dir"] = os.path.join(str(base), "aiter")
            if str(getattr(dist, "_path", "")).endswith(".egg-info"):
                info["editable"] = True
                info["project_dir"] = str(base)
    return info


def _find_spec_dir():
    """Directory of the `aiter` package that `import aiter` would load, without executing it."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("aiter")
    except (ImportError, ValueError) as exc:
        return None, "importlib.util.find_spec('aiter') failed: %s" % exc
    if spec is None:
        return None, None
    locations = list(spec.submodule_search_locations or [])
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen") and os.path.isfile(spec.origin):
        return os.path.dirname(spec.origin), None
    for loc in locations:
        if _is_amd_aiter_pkg(loc):
            return loc, None
    return (locations[0] if locations else None), None


def _package_from_path(path):
    """Validate a user-given aiter_path: a checkout/site dir holding aiter/, or the package dir."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise HelperError("aiter_path %s does not exist or is not a directory" % path,
                          hint="fix aiter_path for this container in inventory.yaml")
    inner = os.path.join(path, "aiter")
    if os.path.isfile(os.path.join(inner, "__init__.py")) and _is_amd_aiter_pkg(inner):
        return inner
    if os.path.basename(path) == "aiter" and os.path.isfile(os.path.join(path, "__init__.py")) \
            and _is_amd_aiter_pkg(path):
        return path
    raise HelperError(
        "aiter_path %s is not an AITER checkout or site-packages dir (no aiter/__init__.py with "
        "configs/ or jit/)" % path,
        hint="point aiter_path at the aiter repo root (develop mode) or the site-packages dir")


def _workdir(given, res, problems):
    """Where jobs keep their files on the node (R-10): the inventory's workdir; else, in develop mode,
    <checkout>/tune_logs (AITER's own habit); in install mode never site-packages: ~/.tune-remote/tune_logs."""
    if given:
        return os.path.abspath(os.path.expanduser(given))
    if res.get("install_mode") != "install":
        return os.path.join(res["aiter_root"], "tune_logs")
    home = os.path.expanduser("~")
    if os.path.isdir(home) and os.access(home, os.W_OK):
        return os.path.join(home, ".tune-remote", "tune_logs")
    problems.append("install mode and the home directory %s is not writable: job files go to %s/tune_logs "
                    "(set workdir: for this container in inventory.yaml)" % (home, res["aiter_root"]))
    return os.path.join(res["aiter_root"], "tune_logs")


def op_discover(req):
    problems = []
    threshold = req.get("busy_threshold", req.get("free_below_pct", 10))
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise HelperError("busy_threshold must be a number (percent), got %r" % (threshold,))
    res = {"pip_name": None, "version": None, "install_mode": None, "editable": None,
           "aiter_root": None, "package_dir": None, "meta_root": None, "has_csrc": False,
           "has_configs": False, "git_describe": None, "git_commit": None}
    # the GPU samples (0.25 s apart; one when it read the KFD process list) are taken while AITER is looked for
    from . import gpus  # noqa: PLC0415
    job_env = dict(os.environ)
    job_env.update({k: str(v) for k, v in (req.get("env") or {}).items()})   # the inventory's env wins, as in the job
    gpu_problems, gpu_out = [], {}

    def sample():
        try:
            gpu_out["facts"] = gpus.gpu_facts(gpu_problems, threshold, samples=req.get("gpu_samples", 3),
                                              interval=req.get("gpu_sample_interval", 0.25), env=job_env)
        except Exception as exc:  # noqa: BLE001 - raised again in the op's own thread below
            gpu_out["error"] = exc
    sampler = threading.Thread(target=sample, name="gpu-samples", daemon=True)
    sampler.start()

    cands, probs = _dist_candidates()
    problems.extend(probs)
    infos = []
    for norm, dist in cands:
        info = _dist_info(norm, dist)
        if not _is_amd_aiter_pkg(info["package_dir"]):
            problems.append(
                "ignored distribution %s %s at %s: it has no aiter/configs or aiter/jit (not AMD AITER; "
                "PyPI's 'aiter' is an unrelated async library)" % (norm, info["version"], info["location"]))
            continue
        infos.append(info)

    if req.get("aiter_path"):
        package_dir = _package_from_path(req["aiter_path"])
        res["source"] = "aiter_path"
    else:
        package_dir, problem = _find_spec_dir()
        if problem:
            problems.append(problem)
        res["source"] = "import"
        if package_dir and not _is_amd_aiter_pkg(package_dir):
            problems.append("`import aiter` resolves to %s, which is not AMD AITER (no configs/ or jit/)"
                            % package_dir)
            package_dir = None
        if package_dir is None and infos:
            package_dir = infos[0]["package_dir"]
            problems.append("`import aiter` does not resolve for %s; using the installed distribution "
                            "%s at %s" % (sys.executable, infos[0]["pip_name"], package_dir))

    if package_dir is None:
        problems.append("AMD AITER not found for %s (no amd-aiter/aiter distribution, `import aiter` "
                        "does not resolve); pass aiter_path" % sys.executable)
    else:
        chosen = None
        for info in infos:
            if _realpath(info["package_dir"]) == _realpath(package_dir):
                chosen = info
                break
        if chosen is None and infos and not req.get("aiter_path"):
            problems.append("`import aiter` loads %s but pip's %s lives at %s"
                            % (package_dir, infos[0]["pip_name"], infos[0]["package_dir"]))
        if chosen is not None:
            res["pip_name"] = chosen["pip_name"]
            res["version"] = chosen["version"]
            res["editable"] = chosen["editable"]
        mode_text = read_file_text(os.path.join(package_dir, "install_mode"))
        if mode_text is None:
            mode = "develop"  # aiter/jit/core.py: missing file => develop ("pip install -e")
        else:
            mode = mode_text.strip() or "develop"
            if mode not in ("develop", "install"):
                problems.append("unrecognised aiter/install_mode content %r; treating as develop" % mode)
                mode = "develop"
        root = os.path.dirname(os.path.abspath(package_dir))
        meta = root if mode == "develop" else os.path.join(root, "aiter_meta")
        if os.environ.get("AITER_META_DIR"):
            meta = os.path.abspath(os.environ["AITER_META_DIR"])
        res.update({
            "install_mode": mode, "package_dir": os.path.abspath(package_dir), "aiter_root": root,
            "meta_root": meta, "has_csrc": os.path.isdir(os.path.join(meta, "csrc")),
            "has_configs": os.path.isdir(os.path.join(package_dir, "configs")),
        })
        if mode == "develop":
            git = shutil.which("git")
            if git is None:
                problems.append("git not found: no git describe for the develop checkout")
            elif os.path.exists(os.path.join(root, ".git")):
                out, problem = run_tool([git, "-C", root, "describe",   # git's ownership check stays on (S-07)
                                          "--tags", "--always"], timeout=15.0)
                if problem:
                    problems.append(problem)
                elif out and out.strip():
                    res["git_describe"] = out.strip()
                # on a tag, describe prints only the tag: the commit itself comes from rev-parse (issue 36)
                out, problem = run_tool([git, "-C", root, "rev-parse", "HEAD"], timeout=15.0)
                if problem:
                    problems.append(problem)
                elif out and out.strip():
                    res["git_commit"] = out.strip()
        if res["version"] is None and res["git_describe"]:
            res["version"] = res["git_describe"]
        if not res["has_csrc"]:
            problems.append("no csrc/ under meta_root %s: tune scripts are not available" % meta)

    # read-only ops that ride along (probe.run_riders): while the GPUs are sampled, unless a template
    # needs the GPU's gfx or cu_num
    riders = (req.get("riders") or {}) if res["aiter_root"] else {}
    ops = {"probe": probe.op_probe, "tuned_keys": files.op_tuned_keys, "paths_exist": probe.op_paths_exist}
    early = dict((op, t) for op, t in riders.items() if not probe.needs_gpu_facts(t))
    ridden = probe.run_riders(early, res, job_env, ops)
    sampler.join()
    if "error" in gpu_out:
        raise gpu_out["error"]
    problems.extend(gpu_problems)
    res.update(gpu_out.get("facts") or {})
    ridden.update(probe.run_riders(dict((op, t) for op, t in riders.items() if op not in early), res, job_env, ops))
    if ridden:
        res["riders"] = ridden
    env = {}
    for key, value in os.environ.items():
        if key.startswith("AITER_") or key in ("CU_NUM", "GPU_ARCHS"):
            env[key] = value
    res["env"] = env
    res["visible_devices"] = {k: job_env[k] for k in
                              ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
                              if k in job_env}
    res["servers"] = proctree.servers()     # the inference servers here and the AITER switches they run with
    res["hostname"] = socket.gethostname()
    res["boot_id"] = boot_id()
    res["python"] = sys.executable
    res["python_version"] = platform.python_version()
    res["busy_threshold"] = threshold
    res["problems"] = problems
    res["workdir"] = _workdir(req.get("workdir"), res, problems) if res.get("aiter_root") else None
    lock = req.get("lock")
    if lock and res.get("aiter_root"):      # a running job of this variant here: fail before anything is written
        from . import locks  # noqa: PLC0415
        locks.check(locks.lock_path(res["workdir"], lock["variant"]), lock["variant"], lock.get("job_id"),
                    lock.get("owner"))
        held = locks.gpus_held(res["workdir"], lock.get("job_id"), lock.get("owner"))
        after = set(lock.get("after_jobs") or [])   # a chained run takes its GPUs once these ended
        held = {g: rec for g, rec in held.items() if rec.get("job_id") not in after}
        res["reserved_gpus"] = {str(g): rec.get("job_id") for g, rec in sorted(held.items())}
        for g, rec in held.items():         # another running job's GPUs are not free, whatever they show
            info = res["gpus"].get(str(g))
            if info is not None:
                info["busy"].append("reserved by job %s" % rec.get("job_id"))
        if res.get("free_gpus") is not None:
            res["free_gpus"] = [g for g in res["free_gpus"] if g not in held]
    return res
