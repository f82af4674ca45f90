"""Simulated AITER node: a faithful, GPU-less stand-in for an AMD AITER install (docs/internals.md).

``install(host_dir, spec, target_dir=None)`` lays out a complete node under ``host_dir``; every path
written into a file refers to ``target_dir`` (default ``host_dir``), where the test bed bind-mounts it.
Everything that runs inside the node is stdlib-only Python 3.8+ started as ``python3``.

Node layout (``<t>`` = target_dir)::

    <t>/bin/rocm-smi, <t>/bin/rocminfo, amd-smi   executables (python3 scripts; amd-smi when spec.amd_smi)
    <t>/pylib/_simgpu.py                          which GPUs each tool sees (physical vs ROCr/HIP)
    <t>/pylib/torch/                              minimal torch stand-in (on PYTHONPATH)
    <t>/pylib/amd_aiter-<v>.dist-info             develop mode: editable dist-info (+ __editable__ .pth)
    <t>/aiter/                                    develop mode: the source checkout (AITER_ROOT_DIR)
        aiter/ (package, install_mode=develop, configs/, jit/), csrc/<variant>/..._tune.py, op_tests/
    <t>/site-packages/                            install mode: AITER_ROOT_DIR
        aiter/ (package, install_mode=install, configs/, jit/), aiter_meta/csrc/..., amd_aiter-<v>.dist-info
    <t>/sim/node.json, control.json, launches.jsonl
    <t>/logs/*.log                                simulated vLLM / SGLang server logs (see sim.logs)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SimSpec", "SimInstall", "install", "PROFILES"]

TREE = Path(__file__).resolve().parent / "tree"
# stdlib-only modules of this package that the node runs too (copied into aiter/_sim/)
NODE_MODULES = tuple(Path(__file__).resolve().parent / n for n in (
    "perf_model.py", "kernel_names.py", "lookups.py", "upgrade.py", "flydsl_moe.py", "noise_model.py",
    "variant_table.py"))
# the cost model (sim/costs.py), on the node's PYTHONPATH as pylib/_simcosts.py (torch and aiter use it)
COSTS_MODULE = Path(__file__).resolve().parent / "costs.py"

PROFILES = {"current": "0.1.20", "legacy": "0.1.11", "newest": "0.1.29", "head": "0.1.30"}
# the version pip reports, where it is not the plain release: wheels after v0.1.20 carry a post release and
# the ROCm build as a local version (aiter-after-v0.1.20.md §1: `0.1.NN[.postK]+rocmX.Y`)
PIP_VERSIONS = {"newest": "0.1.29.post1+rocm10.1", "head": "0.1.30+rocm10.1"}
# `#@ if <tags>` blocks: a profile keeps a block when every tag holds (`!tag` = must not hold).
# newest = current + what changed after v0.1.20 (orchestrator/sim/newest.py, aiter-after-v0.1.20.md);
# head = newest + the v0.1.30/HEAD forms of aiter-december-2026.md that are unmerged or only in some releases
# (a node shows one form or the other: tune-remote probes, never reads the version alone)
PROFILE_TAGS = {"current": {"current"}, "legacy": {"legacy"}, "newest": {"current", "newest"},
                "head": {"current", "newest", "head"}}
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LEGACY_ONLY = ("csrc/ck_gemm_a8w8_blockscale_bpreshuffle",)
# besides the tuners a release does not ship yet (each variant's `since`: unshipped_tuners): v0.1.30 ships the
# MXFP8 op_test with its tuner (aiter-december-2026.md); the newest simulated profile has them, and the shared
# mixed-MXFP tuner module that the a6w4 / a4w6 entry points (since 0.1.21) import (ROCm/aiter 610d1e8e)
# and the MXFP8 BMM runtime lookup of the bmm_a8w8_mxscale_bpreshuffle tuner (since 0.1.21)
NEWEST_ONLY = ("op_tests/tuning_tests", "op_tests/test_gemm_a8w8_mxfp8_bpreshuffle.py", "csrc/gemm_mixed_mxfp",
               "aiter/ops/opus", "aiter/ops/gemm_op_mixed_mxfp.py", "aiter/ops/gemm_op_a6w4.py",
               "aiter/ops/gemm_op_a4w6.py", "aiter/ops/gemm_op_a16w8_mxfp8.py")   # the MX asm runtimes, with their tuners
# what only the head profile ships (aiter-december-2026.md: forms unmerged or only in some releases)
HEAD_ONLY = ("aiter/utility/untuned_shapes.py",   # AITER's own shape capture (#5268)
             "aiter/fhmoe.py", "op_tests/tuners")  # FHMoE's runtime as eb326e45 has it, with its tuner
_MARKETING = {"gfx950": "AMD Instinct MI355X", "gfx942": "AMD Instinct MI300X"}


@dataclass(frozen=True)
class SimSpec:
    profile: str = "current"          # "current" = AITER 0.1.20, "legacy" = AITER 0.1.11, "newest" = 0.1.29,
                                      # "head" = 0.1.30 (+ HEAD forms)
    install_mode: str = "develop"     # "develop" (editable checkout) | "install" (site-packages)
    pip_name: str | None = None       # None -> "amd-aiter"; "aiter" = legacy distribution name
    gfx: str = "gfx950"
    cu_num: int = 256
    gpus: int = 8
    busy_gpus: tuple = (6, 7)
    seconds_per_shape: float = 0.0
    # what builds and process starts sleep: real seconds x cost_scale (sim/costs.py, AITER_SIM_COST_SCALE)
    cost_scale: float = 0.001
    gpu_cu_nums: tuple = ()           # per-GPU Compute Unit counts in rocminfo (partition modes); () = cu_num
    # GPU view (orchestrator/sim/tree/pylib/_simgpu.py): rocm-smi/amd-smi list every GPU of the host; ROCr
    # (rocminfo, HIP) only those whose device nodes the container has, renumbered from 0
    dri_gpus: tuple = ()              # physical GPUs whose /dev/dri nodes are mapped in; () = all
    vram_gpus: tuple = ()             # idle (0 % use) but holding VRAM, like a server between requests
    kfd_gpus: tuple = ()              # idle with a KFD process on them (another job compiling)
    partition: str = "SPX"            # compute partition mode rocm-smi/amd-smi report
    rocm_smi: bool = True             # bin/rocm-smi present (deprecated, gone on newer ROCm)
    amd_smi: bool = False             # bin/amd-smi present
    rocm_version: str = "7.0.2"       # <root>/.info/version, beside bin/rocminfo (as in /opt/rocm)
    table_defects: tuple = ()         # audit finding kinds planted in the live tables (sim/defects.py)

    @property
    def version(self) -> str:
        return PROFILES[self.profile]

    @property
    def pip_version(self) -> str:
        return PIP_VERSIONS.get(self.profile, self.version)

    @property
    def dist_name(self) -> str:
        return self.pip_name or "amd-aiter"


@dataclass
class SimInstall:
    env: dict
    aiter_root: str
    logs_dir: str
    control_path: str
    launches_path: str
    version: str
    spec: SimSpec = field(default_factory=SimSpec)
    host_dir: str = ""
    target_dir: str = ""
    package_dir: str = ""     # <aiter_root>/aiter
    meta_root: str = ""       # where csrc/ lives (= aiter_root in develop, <root>/aiter_meta in install)
    logs: dict = field(default_factory=dict, repr=False)   # log file name -> sim.logs.SimLog

    def host_path(self, target_path: str) -> str:
        """Map a path inside the node (target side) to the host side."""
        t = self.target_dir.rstrip("/")
        if target_path == t or target_path.startswith(t + "/"):
            return self.host_dir.rstrip("/") + target_path[len(t):]
        return target_path

    def script(self, rel: str) -> str:
        """Target path of a script relative to the meta root (csrc/...) or checkout (op_tests/...)."""
        return f"{self.meta_root}/{rel}" if rel.startswith(("csrc/", "hsa/")) else f"{self.aiter_root}/{rel}"


def is_newest(profile: str) -> bool:
    """The profiles that have everything after v0.1.20 (newest, and head on top of it)."""
    return "newest" in PROFILE_TAGS.get(profile, {profile})


def unshipped_tuners(version: str) -> tuple:
    """The tuner directories of the registry's variants that this AITER release does not ship yet (``since``:
    e.g. csrc/gemm_a16w16 before v0.1.16, csrc/gemm_a6w6 before v0.1.21)."""
    from .fromfacts import unshipped_dirs
    from .variant_table import VARIANTS
    return unshipped_dirs(VARIANTS, version)


# ------------------------------------------------------------------------------------ preprocessing

def preprocess(text: str, profile: str) -> str:
    """Keep the `#@ if <tags>` ... `#@ endif` blocks of this profile, drop the others and the markers."""
    out, keep = [], True
    tags = PROFILE_TAGS.get(profile, {profile})
    for line in text.splitlines(keepends=True):
        s = line.strip()
        if s.startswith("#@ if "):
            conds = s[len("#@ if "):].split()
            keep = all((c[1:] not in tags) if c.startswith("!") else (c in tags) for c in conds)
            continue
        if s == "#@ endif":
            keep = True
            continue
        if keep:
            out.append(line)
    return "".join(out)


def _copy_tree(src: Path, dst: Path, profile: str, skip=()) -> None:
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = Path(root).relative_to(src)
        if any(str(rel) == s or str(rel).startswith(s + "/") for s in skip):
            continue
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")) or str(rel / f) in skip:
                continue
            sp, dp = Path(root) / f, dst / rel / f
            data = sp.read_bytes()
            if f.endswith(".py") or sp.parent.name == "bin":
                data = preprocess(data.decode("utf-8"), profile).encode("utf-8")
            dp.write_bytes(data)
            executable = sp.parent.name == "bin" or bool(sp.stat().st_mode & stat.S_IXUSR)
            mode = 0o755 if executable else 0o644
            os.chmod(dp, mode)


def _legacy_csv(text: str) -> str:
    """Current-schema tuned CSV -> v0.1.11 schema: drop the leading gfx column and fmoe's _tag."""
    lines = text.splitlines()
    if not lines:
        return text
    header = lines[0].split(",")
    drop = [i for i, h in enumerate(header) if h.strip() in ("gfx", "_tag", "xbf16", "flat")]
    if not drop:
        return text
    out = []
    for ln in lines:
        cells = ln.split(",")
        out.append(",".join(c for i, c in enumerate(cells) if i not in drop))
    return "\n".join(out) + "\n"


def _install_configs(cfg_dir: Path, profile: str) -> None:
    cfg_dir.mkdir(parents=True, exist_ok=True)
    cur, leg = TREE / "configs" / "current", TREE / "configs" / "legacy"
    for f in sorted(cur.iterdir()):
        text = f.read_text()
        if profile == "legacy":
            if (leg / f.name).exists():
                text = (leg / f.name).read_text()
            elif "untuned" not in f.name:
                text = _legacy_csv(text)
        (cfg_dir / f.name).write_text(text)
        os.chmod(cfg_dir / f.name, 0o644)
    (cfg_dir / "model_configs").mkdir(exist_ok=True)


# ------------------------------------------------------------------------------------ dist-info

def _record_line(base: Path, p: Path) -> str:
    data = p.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{p.relative_to(base).as_posix()},sha256={digest},{len(data)}"


def _write_dist_info(where: Path, spec: SimSpec, editable_target: str | None, record_roots=()) -> Path:
    norm = spec.dist_name.replace("-", "_")
    di = where / f"{norm}-{spec.pip_version}.dist-info"
    di.mkdir(parents=True, exist_ok=True)
    (di / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        f"Name: {spec.dist_name}\n"
        f"Version: {spec.pip_version}\n"
        "Summary: AITER: AI Tensor Engine for ROCm (simulated node)\n"
        "Home-page: https://github.com/ROCm/aiter\n"
        "Author: AMD\n"
        "License: MIT\n"
        "Requires-Python: >=3.8\n"
    )
    (di / "INSTALLER").write_text("pip\n")
    (di / "top_level.txt").write_text("aiter\n")
    files = [di / "METADATA", di / "INSTALLER", di / "top_level.txt"]
    if editable_target is not None:
        (di / "direct_url.json").write_text(
            json.dumps({"url": f"file://{editable_target}", "dir_info": {"editable": True}}))
        pth = where / f"__editable__.{norm}-{spec.pip_version}.pth"
        pth.write_text(editable_target + "\n")
        files += [di / "direct_url.json", pth]
    (di / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: false\n"
                              "Tag: cp312-cp312-linux_x86_64\n")
    files.append(di / "WHEEL")
    for root in record_roots:
        for dirpath, dirs, fnames in os.walk(root):
            dirs.sort()
            for fn in sorted(fnames):
                files.append(Path(dirpath) / fn)
    lines = [_record_line(where, p) for p in files]
    lines.append(f"{di.name}/RECORD,,")
    (di / "RECORD").write_text("\n".join(lines) + "\n")
    return di


# ------------------------------------------------------------------------------------ install

def install(host_dir, spec: SimSpec | None = None, target_dir: str | None = None) -> SimInstall:
    """Lay out a simulated AITER node under host_dir (idempotent: an existing node is replaced)."""
    spec = spec or SimSpec()
    if spec.profile not in PROFILES:
        raise ValueError(f"unknown profile {spec.profile!r}; choose one of {sorted(PROFILES)}")
    if spec.install_mode not in ("develop", "install"):
        raise ValueError(f"unknown install_mode {spec.install_mode!r}")
    host = Path(host_dir).resolve()
    target = (target_dir or str(host)).rstrip("/") or "/"
    host.mkdir(parents=True, exist_ok=True)
    for sub in ("aiter", "site-packages", "pylib", "bin", "sim", "logs"):
        if (host / sub).exists():
            shutil.rmtree(host / sub)

    profile = spec.profile
    skip = ((() if profile == "legacy" else LEGACY_ONLY) + unshipped_tuners(spec.version)
            + (() if is_newest(profile) else NEWEST_ONLY))
    if spec.install_mode == "develop":
        root_h, root_t = host / "aiter", f"{target}/aiter"
        meta_h, meta_t = root_h, root_t
    else:
        root_h, root_t = host / "site-packages", f"{target}/site-packages"
        meta_h, meta_t = root_h / "aiter_meta", f"{root_t}/aiter_meta"
    pkg_h = root_h / "aiter"

    pkg_skip = skip + (() if profile == "head" else HEAD_ONLY)
    _copy_tree(TREE / "aiter_pkg" / "aiter", pkg_h, profile,
               skip=tuple(s[len("aiter/"):] for s in pkg_skip if s.startswith("aiter/")))
    for module in NODE_MODULES:
        shutil.copyfile(module, pkg_h / "_sim" / module.name)
    (pkg_h / "install_mode").write_text(spec.install_mode)
    _install_configs(pkg_h / "configs", profile)
    if is_newest(profile):
        from .newest import adjust_configs
        adjust_configs(pkg_h / "configs")
    if profile == "head":     # the FHMoE table as eb326e45 ships it (sim/fhmoe_table.py)
        from .fhmoe_table import TABLE
        (pkg_h / "configs" / "tuned_fhmoe.csv").write_text(TABLE)
    if spec.table_defects:
        from .defects import plant
        plant(pkg_h / "configs", spec.table_defects, spec.gfx, spec.cu_num)
    (pkg_h / "jit" / "build").mkdir(parents=True, exist_ok=True)
    _copy_tree(TREE / "csrc", meta_h / "csrc", profile,
               skip=tuple(s[len("csrc/"):] for s in skip if s.startswith("csrc/")))
    (meta_h / "hsa" / spec.gfx).mkdir(parents=True, exist_ok=True)
    if spec.install_mode == "develop":
        _copy_tree(TREE / "op_tests", root_h / "op_tests", profile,
                   skip=tuple(s[len("op_tests/"):] for s in (*skip, *(() if profile == "head" else HEAD_ONLY))
                              if s.startswith("op_tests/")))
        (root_h / "setup.py").write_text(
            "# simulated AITER checkout: `python3 setup.py develop` is not needed, the node is pre-installed\n"
            "import sys\nsys.exit('simulated aiter: nothing to build')\n")
    _copy_tree(TREE / "pylib", host / "pylib", profile)
    shutil.copyfile(COSTS_MODULE, host / "pylib" / "_simcosts.py")
    _copy_tree(TREE / "bin", host / "bin", profile)
    for tool, present in (("rocm-smi", spec.rocm_smi), ("amd-smi", spec.amd_smi)):
        if not present:
            (host / "bin" / tool).unlink()

    if spec.install_mode == "develop":
        _write_dist_info(host / "pylib", spec, editable_target=root_t)
    else:
        _write_dist_info(root_h, spec, editable_target=None, record_roots=(pkg_h, meta_h))

    sim = host / "sim"
    sim.mkdir(exist_ok=True)
    node = {
        "profile": profile, "version": spec.version, "pip_name": spec.dist_name,
        "install_mode": spec.install_mode, "gfx": spec.gfx, "cu_num": spec.cu_num, "gpus": spec.gpus,
        "busy_gpus": list(spec.busy_gpus), "seconds_per_shape": spec.seconds_per_shape,
        "gpu_cu_nums": list(spec.gpu_cu_nums), "dri_gpus": list(spec.dri_gpus),
        "vram_gpus": list(spec.vram_gpus), "kfd_gpus": list(spec.kfd_gpus), "partition": spec.partition,
        "amd_smi": spec.amd_smi,
        "marketing_name": _MARKETING.get(spec.gfx, "AMD Instinct MI355X"),
        "target_dir": target, "aiter_root": root_t, "meta_root": meta_t,
        "control_path": f"{target}/sim/control.json", "launches_path": f"{target}/sim/launches.jsonl",
        "logs_dir": f"{target}/logs",
    }
    (sim / "node.json").write_text(json.dumps(node, indent=1))
    # KFD's process list as sysfs shows it (/sys/class/kfd/kfd/proc/<pid>): the processes the simulated
    # rocm-smi/amd-smi attribute to GPUs (numbered as _simgpu.kfd_pids numbers them)
    kfd = sim / "kfd" / "proc"
    kfd.mkdir(parents=True, exist_ok=True)
    for pid in sorted({40000 + p for p in (*spec.busy_gpus, *spec.kfd_gpus)}):
        (kfd / str(pid)).mkdir(exist_ok=True)
    (sim / "control.json").write_text(json.dumps(
        {"seconds_per_shape": spec.seconds_per_shape, "crash_after_shapes": None, "hang_after_shapes": None}))
    (sim / "launches.jsonl").write_text("")

    from . import logs as _logs

    (host / ".info").mkdir(exist_ok=True)
    (host / ".info" / "version").write_text(spec.rocm_version + "\n")
    written = _logs.generate_logs(host / "logs")
    pypath = f"{target}/pylib:{root_t}"
    env = {
        "PATH": f"{target}/bin:{BASE_PATH}",
        "PYTHONPATH": pypath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "AITER_SIM_NODE": f"{target}/sim/node.json",
        "TUNE_REMOTE_KFD_PROC_DIR": f"{target}/sim/kfd/proc",
        "AITER_SIM_COST_SCALE": f"{spec.cost_scale:g}",
        "AITER_SIM_COST_LOG": f"{target}/sim/costs.jsonl",
    }
    inst = SimInstall(
        env=env, aiter_root=root_t, logs_dir=f"{target}/logs", control_path=f"{target}/sim/control.json",
        launches_path=f"{target}/sim/launches.jsonl", version=spec.version, spec=spec, host_dir=str(host),
        target_dir=target, package_dir=f"{root_t}/aiter", meta_root=meta_t, logs=written,
    )
    from .fromfacts import serve_missing
    from .variant_table import VARIANTS
    serve_missing(inst, VARIANTS)   # a registry variant with no tuner file of its own here: from its facts
    return inst


def write_control(inst: SimInstall, **values) -> dict:
    """Update the node's control file (host side): seconds_per_shape, crash_after_shapes,
    hang_after_shapes, fault_once, build_seconds. Returns the new content."""
    p = Path(inst.host_path(inst.control_path))
    try:
        cur = json.loads(p.read_text())
    except (OSError, ValueError):
        cur = {}
    cur.update(values)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cur))
    os.replace(tmp, p)
    return cur


def read_launches(inst: SimInstall) -> list:
    """The launch counter: one dict per tune-script start."""
    p = Path(inst.host_path(inst.launches_path))
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
