"""Once per process, per variant (issue 36): the probe reads, in each runtime file that prints a family's miss
line, whether the line is printed once per shape per process (inside an lru_cached lookup, as upstream has it
in every release up to v0.1.20, or through #5268's lru_cached ``_log_*_miss_once`` logger), and each variant's
shapes are weighed by its own file's answer (the registry's ``miss_source``)."""

from pathlib import Path

from orchestrator.nodeside.probe import MISS_SOURCES, miss_log_facts, miss_once_of
from orchestrator.shapelib.shaperules import logs_once, miss_weights
from orchestrator.sim import PROFILES, preprocess
from orchestrator.variants import VARIANTS, get_variant

SIM = Path(__file__).resolve().parents[2] / "orchestrator" / "sim" / "tree" / "aiter_pkg"

# upstream v0.1.20 (fc2e5d57) aiter/ops/gemm_op_a4w4.py get_GEMM_config, cut to its miss line
CACHED_LOOKUP = '''
@functools.lru_cache(maxsize=1024)
def get_GEMM_config(M: int, N: int, K: int):
    config = cfg.get((cu_num, M, N, K), None)
    if config is None:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, not found tuned config in {tuned_file}, will use default config!"
        )
    return config
'''
# the same lookup without its cache: a line per lookup
UNCACHED_LOOKUP = CACHED_LOOKUP.replace("@functools.lru_cache(maxsize=1024)\n", "")
# upstream v0.1.20 aiter/fused_moe.py get_2stage_cfgs: the '[fused_moe] using' line inside the cached function
MOE = '''
@functools.lru_cache(maxsize=2048)
def get_2stage_cfgs(
    token,
    model_dim,
):
    def get_block_m() -> int:
        return 32
    logger.info(
        f"[fused_moe] using {'1stage' if run_1stage else '2stage'} {'default' if cfg is None else tag} for {keys} "
    )
'''

# A6W6 (aiter/ops/gemm_op_a6w6.py get_GEMM_A6W6_config, #4859): a %-style message split over two strings
A6W6 = '''
@functools.lru_cache(maxsize=1024)
def get_GEMM_A6W6_config(
    M: int, N: int, K: int, tuned_file: str | None = None
) -> dict[str, object] | None:
    if AITER_LOG_TUNED_CONFIG:
        logger.info(
            "A6W6 shape M:%s N:%s K:%s has no tuned config in %s; "
            "using the safe default kernel",
            M,
        )
    return None
'''


def _sim(rel, profile):
    return preprocess((SIM / rel).read_text(), profile)


def test_a_miss_line_inside_an_lru_cached_lookup_is_once_per_process():
    assert miss_once_of(CACHED_LOOKUP) is True
    assert miss_once_of(UNCACHED_LOOKUP) is False
    assert miss_once_of(MOE) is True
    assert miss_once_of(A6W6) is True
    assert miss_once_of(A6W6.replace("@functools.lru_cache(maxsize=1024)\n", "")) is False
    assert miss_once_of("def f():\n    return 1\n") is None and miss_once_of(None) is None
    # the text in the module's docstring or a comment is no line a lookup prints
    assert miss_once_of('"""logs ``... has no tuned config in ...`` once"""\n# has no tuned config\n' + CACHED_LOOKUP) is True
    # one uncached miss line among cached ones: not once per process
    assert miss_once_of(CACHED_LOOKUP + UNCACHED_LOOKUP.replace("get_GEMM_config", "other")) is False


def test_every_profile_of_the_simulated_runtime_logs_each_familys_miss_once_per_process():
    # old releases through the cached lookup, head (#5268) through _log_*_miss_once, whose lookup is uncached
    for profile in PROFILES:
        for rel in ("aiter/ops/gemm_op_a8w8.py", "aiter/ops/gemm_op_a4w4.py", "aiter/ops/batched_gemm_op_a8w8.py",
                    "aiter/ops/batched_gemm_op_bf16.py", "aiter/tuned_gemm.py", "aiter/fused_moe.py"):
            assert miss_once_of(_sim(rel, profile)) is True, (profile, rel)
    head = _sim("aiter/ops/gemm_op_a8w8.py", "head")
    assert "_log_CKGEMM_miss_once" in head
    assert miss_once_of(head.replace("@functools.lru_cache(maxsize=None)\ndef _log_CKGEMM_miss_once",
                                     "def _log_CKGEMM_miss_once")) is False


def test_the_mx_runtimes_of_the_newest_profile_log_once_per_process():
    # their lookups are lru_cached (upstream gemm_op_a6w4.py / gemm_op_a4w6.py / gemm_op_a16w8_mxfp8.py, opus policy)
    for name in ("a6w4", "a4w6", "a16w8_mxfp8", "bmm_a8w8_mxscale_bpreshuffle"):
        rel = get_variant(name).miss_source
        assert rel in MISS_SOURCES and miss_once_of(_sim(rel, "newest")) is True, name


def test_the_probe_answers_per_runtime_file_and_keeps_the_old_key(tmp_path):
    ops = tmp_path / "aiter" / "ops"
    ops.mkdir(parents=True)
    (ops / "gemm_op_a8w8.py").write_text(_sim("aiter/ops/gemm_op_a8w8.py", "current"))
    (ops / "gemm_op_a4w4.py").write_text(UNCACHED_LOOKUP)
    (tmp_path / "aiter" / "fused_moe.py").write_text(MOE)
    facts = miss_log_facts(str(tmp_path))
    assert facts == {"miss_log_once": False,            # no _log_CKGEMM_miss_once: as before
                     "miss_once": {"aiter/ops/gemm_op_a8w8.py": True, "aiter/ops/gemm_op_a4w4.py": False,
                                   "aiter/fused_moe.py": True}}


def test_each_variant_is_weighed_by_its_own_runtime_files_answer():
    probes = {"miss_log_once": True, "miss_once": {"aiter/ops/gemm_op_a8w8.py": True,
                                                   "aiter/ops/gemm_op_a4w4.py": False}}
    a8, a4 = get_variant("a8w8_blockscale"), get_variant("a4w4_blockscale")
    assert logs_once(probes, a8.miss_source) is True and logs_once(probes, a4.miss_source) is False
    assert logs_once(probes, get_variant("a6w6").miss_source) is False        # not probed: its lines
    # a state probed before per-file answers: the node's one answer, for every variant (as it was read then)
    assert logs_once({"miss_log_once": True}, a4.miss_source) is True
    assert logs_once({}, a8.miss_source) is False
    answer = {"shapes": {"v": [{}, {}]}, "counts": {"v": [10, 4]}, "workers": {"v": [1, 4]}}
    assert miss_weights(answer, "v", logs_once(probes, a8.miss_source)) == [1, 4]
    assert miss_weights(answer, "v", logs_once(probes, a4.miss_source)) == [10, 4]


def test_every_registry_miss_source_is_one_the_probe_reads():
    sources = {v.miss_source for v in VARIANTS.values() if v.miss_source}
    assert sources and sources <= set(MISS_SOURCES)
    assert get_variant("moe_2stages").miss_source == "aiter/fused_moe.py"
    assert get_variant("batched_bf16").miss_source == "aiter/ops/batched_gemm_op_bf16.py"


def test_the_watch_weighs_by_the_variants_own_answer(tmp_path):
    from orchestrator.sim.growlog import append_misses
    from tests.unit.test_watch import V, _watch
    log = tmp_path / "server.log"
    append_misses(log, V, [(72, 512, 7168)], times=2)          # ranks 0 and 1, a line each
    with open(log, "a") as fh:                                  # one process, three lines
        fh.write("(Worker_TP0 pid=1000) [aiter] shape is M:72, N:7168, K:2048, not found tuned config in "
                 "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n" * 3)
    base = {"aiter_version": "0.1.30", "rocm_version": "7.0.2", "gfx": "gfx950", "miss_log_once": True}
    for once, want in ((True, {512: 2, 7168: 1}), (False, {512: 2, 7168: 3})):
        facts = {**base, "miss_once": {"aiter/ops/gemm_op_a4w4.py": True, "aiter/ops/gemm_op_a8w8.py": once}}
        w, _launcher, _ui, _h = _watch(tmp_path / str(once), log, facts=facts)
        w.cycle()
        assert {e["shape"]["n"]: e["count"] for e in w.store.events() if e["event"] == "seen"} == want, once
