"""The shape of a kernel variant's registry entry (``KernelVariant``, its ``BenchSpec``) and the fused-MoE key.

Data only; the entries themselves are ``orchestrator/variants.py``'s ``VARIANTS`` (facts from
../shared/reference/aiter-formats.md, sections noted next to each field).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .aiter_profiles import AiterProfile, Version


MOE_KEY = (
    "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
    "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1",
)


@dataclass(frozen=True)
class BenchSpec:
    """How a variant's op_test script is driven and read (aiter-formats.md §4).

    style:
      "m_nk"  -> ``-m M1 M2 .. -nk N,K ..`` (cross product inside the script)
      "mnk"   -> ``-mnk M,N,K ..``
      "mnk_typed" -> ``-mnk M,N,K .. -d DTYPE -o OUTDTYPE [-b]`` (one call per dtype, outdtype, bias)
      "s_mnk" -> ``-b B -s M,N,K ..`` (batched; one call per distinct B)
      "moe"   -> ``-t T.. -dim MD,ID -e E -k TOPK -q Q -a ACT -s DW -p PS`` (one call per MoE config)
      "fhmoe_baseline" -> the FHMoE tuner's ``--baseline-only -i <arm table> -o <scratch>`` (steps/fhmoe_input.py)
      "run_config" -> the tuner itself (``script`` = its tune script, under the meta root):
               ``-i <shapes> -o <scratch> --run_config [CSV]``, two calls per arm: no CSV (the tuner times its
               default kernel), then the arm's table (live where it exists / staging / live in the engaged
               check), whose value wins per shape (steps/armargs.py; upstream base_tuner.py v0.1.13+,
               docs/internals.md "Benchmark styles")
    run_config_table: style "run_config" only. True: the two calls above. False: the tuner's no-CSV call already
      times the production dispatch of the table in the arm's ``AITER_CONFIG_*`` (before: the live configuration,
      after: the staging table, engaged check: the live configuration), so it is the only call per arm, and no
      module is rebuilt (nothing sets AITER_REBUILD); its ``--run_config CSV`` times each row's kernel through a
      raw launcher instead (the MXFP8 BMM tuner's _saved_benchmark), which is not what the server runs.
      Either way the variant's ``probed_flags`` its --help lists go on the --run_config call too (armargs.RC_PROBED).
    output: "markdown" (``<name> summary (markdown):`` pipe table), "perf_lines" (``[perf] dim: ...``),
      "fhmoe_lines" or "run_config" (``<label> Benchmark Results`` + ``keys:`` lines; parsing/runconfig.py).
    key_columns: output column -> comparison key column (lower case, as in the tuned CSV).
    """

    script: str
    style: str
    output: str
    metric: str
    higher_is_better: bool
    key_columns: dict[str, str]
    extra_args: tuple[str, ...] = ()
    row_filter: dict[str, str] = field(default_factory=dict)  # keep output rows whose column == value
    run_config_table: bool = True


@dataclass(frozen=True)
class KernelVariant:
    name: str
    family: str                      # "gemm" | "batched" | "moe"
    tune_script: str                 # relative to the aiter meta root (repo root / aiter_meta)
    untuned_csv: str                 # relative to the aiter root; default -i
    tuned_csv: str                   # relative to the aiter root; default -o
    config_env: str                  # AITER_CONFIG_* env var naming the tuned CSV
    untuned_columns: tuple[str, ...]  # header of the untuned CSV we write (AITER spelling)
    bench: BenchSpec | None
    # the CK module compiled from the tuned CSV (aiter-formats.md §5.1: gen_instances.py --tune_file), which
    # promote and rollback move aside; None where the table compiles none (the MoE 2-stage modules are
    # generated without it, FlyDSL / multi-backend rows are compiled per kernelName). No default: every entry
    # says which (a variant missing here would silently keep a stale module, issue 25)
    jit_module: str | None
    tune_flags: tuple[str, ...] = ()
    requires_gfx: frozenset[str] | None = None
    aliases: tuple[str, ...] = ()    # other names `--variant` accepts (and logs of older tune-remote used)
    # key columns besides m, n, k that `run --nk` fills in (q_dtype_w comes from --q-dtype-w)
    nk_defaults: dict = field(default_factory=dict)
    since: Version | None = None     # first AITER release that ships its tuner (None = all supported)
    log_gate_env: str | None = None  # env var without which the runtime prints no miss lines for it
    # the runtime file (relative to the aiter root) whose lookup prints its miss line: the probe reads there
    # whether that line is printed once per shape per process (nodeside/probe.miss_once_of; issue 36)
    miss_source: str | None = None
    # the runtime tries M, then gemm_common getPaddedM(M,N,K,0) (aiter-formats.md §3.1): rows are tuned on
    # that padded-M grid only with run --padded-m (steps/shape_rules.runtime_lookups; any family keyed by M)
    padded_m_lookup: bool = False
    # tuner argv fragments passed only where the node's tuner --help lists their flag (probed, never by the
    # version): e.g. a8w8's `--backend ck` where gemm_a8w8_tune.py has --backend (aiter-december-2026.md)
    probed_flags: tuple[tuple[str, ...], ...] = ()
    # (flags, why): the node's tuner --help must list one of the flags, else the variant is refused there before
    # anything runs (exit 2; steps/capabilities.refuse_tuner_without): an older tuner of the same file that
    # would do harm (write a shipped table), told apart by what its --help lacks, never by the version
    help_requires: tuple[tuple[tuple[str, ...], str], ...] = ()
    # (flag, value, why) a user's --tune-arg may not pass: refused before anything runs
    refused_tune_args: tuple[tuple[str, str, str], ...] = ()
    # every other module the same tuned CSV feeds (aiter/jit/optCompilerConfig.json blob_gen_cmd): (module,
    # first AITER profile that has it or None = all); promotion moves them aside with jit_module (issue 26)
    jit_siblings: tuple[tuple[str, str | None], ...] = ()
    # what the tuner does with -k/--splitK: "flag" (tries split-K candidates only with it), "never" (takes -k
    # but hard-codes maxsplitK = 0), "always" (times its split-K candidates anyway); steps/tuneargs.splitk_note
    splitk: str = "flag"            # "refuses": its tuner raises on -k (a6w4): run --splitk is refused
    # why a "refuses" tuner refuses -k (what `run --splitk` says); None: it raises 'does not support split-K'
    splitk_refusal: str | None = None
    # backends its tuned rows name in the libtype column (the simulated tuner draws its rows from these)
    libtypes: tuple[str, ...] = ("ck",)
    # a model config's quantization kinds (parsing/modelshapes.model_quant: "block_fp8", "fp8", "int8"; "none" =
    # unquantized linears) whose linear layers the runtime serves through this variant (`shapes --model`)
    model_quant: tuple[str, ...] = ()
    # the largest M its tuner takes (a16w8_mxfp8: an M above 64 makes the whole tuning run raise): the shapes
    # step drops larger M before anything runs, with a note (steps/shape_rules.runtime_lookups)
    max_m: int | None = None
    # version overrides: list of (since, until, {field: value}) applied in order
    overrides: tuple[tuple[Version, Version, dict], ...] = ()

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Shape key columns in lower case, as in comparison.csv and `shapes --json`."""
        return tuple(c.lower() for c in self.untuned_columns)

    def resolve(self, profile: AiterProfile) -> "KernelVariant":
        """This variant as the given AITER version has it."""
        out = self
        for since, until, changes in self.overrides:
            if since <= profile.version < until:
                out = dataclasses.replace(out, **changes)
        return out
