"""The typed parts of a job's state.json: what the user asked for (``JobRequest``), what discover found on the
node (``Facts``) and where the job lives there (``NodePaths``).

Each is a dataclass read and written through attributes; every field defaults to None, as ``dict.get`` did.
state.json keeps its meaning: a record writes back exactly the keys it was loaded with or given (an absent key
stays absent), and keys this code does not know (a newer writer's) survive a load and save unchanged. Until
every reader uses the attributes, a record is also a mutable mapping over the same values (``r["gfx"]`` is
``r.gfx``)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, fields
from typing import Any, Iterator, Optional


_NAMES: dict = {}     # record class -> its field names


class Record(MutableMapping):
    """Base of the records: known keys are fields, others stay in ``_extra``; ``_present`` is the keys written."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if not name.startswith("_"):
            self.__dict__.setdefault("_present", {})[name] = None

    def __post_init__(self) -> None:   # built in code: the keys given a value are the keys written
        object.__setattr__(self, "_present", dict.fromkeys(n for n in self.names() if getattr(self, n) is not None))

    @classmethod
    def names(cls) -> frozenset:
        names = _NAMES.get(cls)
        if names is None:
            names = _NAMES[cls] = frozenset(f.name for f in fields(cls))
        return names

    @classmethod
    def from_dict(cls, data: "dict | Record | None"):
        if isinstance(data, cls):
            return data
        data = dict(data or {})
        names = cls.names()
        rec = cls(**{k: v for k, v in data.items() if k in names})
        object.__setattr__(rec, "_present", dict.fromkeys(k for k in data if k in names))
        object.__setattr__(rec, "_extra", {k: v for k, v in data.items() if k not in names})
        return rec

    def to_dict(self) -> dict:
        return {k: v.to_dict() if isinstance(v, Record) else v for k, v in self.items()}

    # ------------------------------------------------------------- the mapping view (for the readers not moved yet)
    def _extras(self) -> dict:
        return self.__dict__.setdefault("_extra", {})

    def __getitem__(self, key: str) -> Any:
        if key in self.names() and key in self.__dict__.get("_present", {}):
            return getattr(self, key)
        return self._extras()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.names():
            setattr(self, key, value)
        else:
            self._extras()[key] = value

    def __delitem__(self, key: str) -> None:
        if key in self.names():
            if key not in self.__dict__.get("_present", {}):
                raise KeyError(key)
            object.__setattr__(self, key, None)
            del self._present[key]
        else:
            del self._extras()[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.__dict__.get("_present", {})
        yield from self._extras()

    def __len__(self) -> int:
        return len(self.__dict__.get("_present", {})) + len(self._extras())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Record, dict)):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # mutable


@dataclass(eq=False)
class Campaign(Record):
    """A campaign's own state, saved in its request (``request.campaign``): its targets, sub-jobs and plan, what
    its target source holds (``source`` names the kind, the source keeps its own state under its kind's key, e.g.
    ``slurm``) and what happened across targets (re-shards, promotions across kinds)."""
    nodes: Optional[list] = None               # the inventory nodes asked for
    container: Optional[str] = None            # --container, when one was given
    source: Optional[str] = None               # the target source's kind (campaign/sources.py)
    sub_jobs: Optional[list] = None            # the target jobs' ids, in plan order
    plan_lines: Optional[list] = None          # the plan as shown before it ran
    unreachable: Optional[list] = None         # targets the plan could not reach
    kinds: Optional[dict] = None               # "node/container" -> GPU kind
    resharded: Optional[dict] = None           # lost sub-job -> the sub-jobs made from its shapes
    spread: Optional[list] = None              # what the promotion across kinds did, one line each
    later: Optional[list] = None               # promotions/rollbacks after the campaign ended
    remeasured: Optional[dict] = None          # shapes measured again after the promotion across kinds
    slurm: Optional[dict] = None               # the Slurm source's state (campaign/slurm.py)


@dataclass(eq=False)
class JobRequest(Record):
    """What the user asked for (run's flags, never secrets); a campaign's sub-job gets a copy with its shard."""
    logs: Optional[list] = None                # server logs on the node to read shapes from
    profiles: Optional[list] = None            # --profile: server profiles (issue 38), paths as logs
    shapes_csv: Optional[str] = None           # a local untuned CSV instead
    nk: Optional[list] = None                  # --nk N,K pairs
    m_preset: Optional[str] = None
    gpus: Optional[list] = None
    batch: Optional[int] = None
    timeout: Optional[int] = None
    stall_timeout: Optional[float] = None
    detach: Optional[bool] = None
    repeats: Optional[int] = None
    promote: Optional[str] = None              # never | proven | ...
    serve_cmd: Optional[str] = None
    tune_args: Optional[list] = None
    q_dtype_w: Optional[str] = None
    moe_tuners: Optional[str] = None           # standard (absent) | flydsl | both (issue 30)
    max_m: Optional[int] = None
    budget: Optional[str] = None
    padded_m: Optional[bool] = None
    table_from_log: Optional[bool] = None
    force_cu_num: Optional[int] = None
    model: Optional[dict] = None               # the model config read by modelshapes.read_model
    tp: Optional[int] = None
    demo_dir: Optional[str] = None             # the demo's simulated node
    demo_nodes: Optional[dict] = None          # a demo campaign's simulated nodes
    variants: Optional[list] = None            # a campaign's variants
    campaign: Optional[Campaign] = None        # a campaign's own state (sub-jobs, nodes, plan, ...)
    parent: Optional[str] = None               # a sub-job: its campaign's id
    resharded_from: Optional[str] = None       # a sub-job made from a lost one's shapes
    watch: Optional[str] = None                # the watch that started the job

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "campaign" and isinstance(value, dict):   # a loaded file, an older caller's dict
            value = Campaign.from_dict(value)
        super().__setattr__(name, value)

    @classmethod
    def of_run(cls, keys: tuple = None, **given: Any) -> "JobRequest":
        """The one place run's options become a request (run, watch, demo; a campaign's shards copy it:
        ``shard``): every key of ``keys`` (default: run's, in state.json's order) with run's default where not
        given, ``profiles`` and ``moe_tuners`` only when not their defaults, then ``given``'s others (the
        demo's nodes, the watch's name). The keys written are exactly those each caller always wrote."""
        opts = {**RUN_DEFAULTS, **given}
        out = {k: opts[k] for k in (RUN_DEFAULTS if keys is None else keys)
               if k in opts and (k, opts[k]) not in (("profiles", []), ("moe_tuners", "standard"))}
        return cls.from_dict({**out, **{k: v for k, v in given.items() if k not in RUN_DEFAULTS}})

    def shard(self, shapes_csv: str, gpus: Optional[list], parent: str) -> "JobRequest":
        """A campaign's target job: this request with its shard of shapes (as --shapes-csv) on ``gpus``."""
        return JobRequest.from_dict(dict(self, logs=[], nk=[], shapes_csv=shapes_csv, m_preset="logged",
                                         budget=None, detach=False, campaign=None, parent=parent, gpus=gpus))


# run's options and their defaults when not given, in the order state.json has always had them
RUN_DEFAULTS = {"logs": [], "profiles": [], "shapes_csv": None, "nk": [], "m_preset": None, "gpus": None,
                "batch": None, "timeout": None, "stall_timeout": None, "detach": False, "repeats": 3,
                "promote": "proven", "serve_cmd": None, "tune_args": [], "q_dtype_w": None, "moe_tuners": "standard",
                "max_m": None, "budget": None, "padded_m": False, "table_from_log": False, "force_cu_num": False,
                "model": None, "tp": 1}
# the demo's jobs (`tune-remote demo`): the keys they always had (demo_dir, or demo_nodes and no serve_cmd for
# several nodes)
DEMO_KEYS = ("logs", "demo_dir", "demo_nodes", "detach", "m_preset", "nk", "shapes_csv", "gpus", "batch", "timeout",
             "repeats", "promote", "serve_cmd")


@dataclass(eq=False)
class Facts(Record):
    """What discover found in the container (the node helper's answer), then the AITER profile settled into it."""
    aiter_root: Optional[str] = None
    meta_root: Optional[str] = None
    package_dir: Optional[str] = None
    pip_name: Optional[str] = None
    install_mode: Optional[str] = None
    editable: Optional[bool] = None
    has_configs: Optional[bool] = None
    has_csrc: Optional[bool] = None
    source: Optional[str] = None
    version: Optional[str] = None
    version_raw: Optional[str] = None
    git_describe: Optional[str] = None
    git_commit: Optional[str] = None      # `git rev-parse HEAD` of a develop checkout (issue 36)
    servers: Optional[list] = None        # vLLM/SGLang servers in the container: pid, kind, AITER env (issue 36)
    python: Optional[str] = None
    python_version: Optional[str] = None
    hostname: Optional[str] = None
    boot_id: Optional[str] = None
    workdir: Optional[str] = None
    env: Optional[dict] = None
    gfx: Optional[str] = None
    cu_num: Optional[int] = None
    gpu_name: Optional[str] = None
    gpu_count: Optional[int] = None
    gpus: Optional[dict] = None
    gpu_map: Optional[dict] = None
    gpu_cu_nums: Optional[list] = None
    gpu_use: Optional[dict] = None
    gpu_samples: Optional[int] = None
    partitions: Optional[dict] = None          # GPU -> compute partition mode (CPX, DPX, ...)
    busy_threshold: Optional[float] = None
    free_gpus: Optional[list] = None
    reserved_gpus: Optional[dict] = None
    visible_devices: Optional[dict] = None
    tune_gpus: Optional[list] = None
    tune_hip: Optional[list] = None
    tune_cu_nums: Optional[list] = None
    problems: Optional[list] = None
    riders: Optional[dict] = None
    id: Optional[int] = None
    probes: Optional[dict] = None              # capabilities.probe's answers (tuned header, tuner --help, ...)
    profile: Optional[str] = None              # settled by aiter_profiles.settle_profile
    probed: Optional[list] = None
    assumed: Optional[list] = None


@dataclass(eq=False)
class NodePaths(Record):
    """Where the job lives on the node and how its pipeline was launched (prepare, remote, promote)."""
    aiter_root: Optional[str] = None
    meta_root: Optional[str] = None
    job_dir: Optional[str] = None
    run_dir: Optional[str] = None
    logs_dir: Optional[str] = None
    logs: Optional[dict] = None                # log name -> path on the node
    pipeline: Optional[list] = None
    pipeline_log: Optional[str] = None
    untuned_csv: Optional[str] = None
    tuned_csv: Optional[str] = None
    live_csv: Optional[str] = None
    tuned_backup: Optional[str] = None
    table_from_log: Optional[str] = None
    tune_argv: Optional[list] = None
    tune_env: Optional[dict] = None
    bench_argv: Optional[list] = None
    bench_jit: Optional[str] = None          # how each arm got its JIT modules (issue 26)
    bench_env: Optional[dict] = None
    bench_gpu: Optional[str] = None
    bench_run_as: Optional[dict] = None
    bench_probed: Optional[list] = None      # a run_config tuner's probed flags (steps/armargs.py RC_PROBED)
    bench_display: Optional[dict] = None
    repeats: Optional[int] = None
    stall_timeout_s: Optional[float] = None
    space_needed_bytes: Optional[int] = None
    report_md: Optional[str] = None
    report_md_on_node: Optional[bool] = None
    promotion: Optional[dict] = None
    peer_promotions: Optional[list] = None
    relaunches: Optional[int] = None
    carry_rc: Optional[int] = None
    stats: Optional[list] = None
