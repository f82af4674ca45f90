"""Once-per-process miss lines (issue 36): where the node's AITER logs a miss once per shape per process
(probed: `_log_CKGEMM_miss_once` in its gemm_op_a8w8.py), a shape's weight is the processes that logged it,
read from the line's worker prefix (vLLM pid, SGLang TP rank); elsewhere its lines, as before."""

from orchestrator.nodeside.probe import miss_log_facts
from orchestrator.outcome import budget
from orchestrator.shapelib import shapelog
from orchestrator.shapelib.shaperules import miss_weights
from orchestrator.shapelib.text import process_of

MISS = "[aiter] shape is M:{m}, N:{n}, K:{k}, not found tuned config in /tmp/aiter_configs/" \
       "a8w8_blockscale_tuned_gemm.csv, will use default config!"
A = {"m": 64, "n": 4096, "k": 512}     # many lookups, one process
B = {"m": 64, "n": 1536, "k": 7168}    # fewer lookups, many ranks


def _log(tmp_path, dense=False):
    lines = [f"(Worker_TP0 pid=100) {MISS.format(**A)}"] * 10
    lines += [f"(Worker_TP{r} pid={100 + r}) {MISS.format(**B)}" for r in range(4)]
    if dense:          # enough identical lines for the dense (counted) path
        lines = lines * 400
    p = tmp_path / "server.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _ranked(answer, once):
    shapes = answer["shapes"]["a8w8_blockscale"]
    pairs = list(zip(shapes, miss_weights(answer, "a8w8_blockscale", once)))
    exact, family = budget.miss_counts(pairs)
    return budget.rank(shapes, exact, family)


def test_ranking_follows_the_processes_where_aiter_logs_once_per_process(tmp_path):
    r = shapelog.parse_files([_log(tmp_path)], "a8w8_blockscale")
    answer = {"shapes": r.shapes, "counts": r.counts, "workers": r.workers_dict()}
    assert r.counts["a8w8_blockscale"] == [10, 4] and r.workers["a8w8_blockscale"] == [1, 4]
    shapes, weights = _ranked(answer, once=False)       # a line per lookup: the many lookups first
    assert shapes == [A, B] and weights == [10, 4]
    shapes, weights = _ranked(answer, once=True)        # once per process: the many ranks first
    assert shapes == [B, A] and weights == [4, 1]


def test_the_dense_path_counts_processes_as_the_line_path_does(tmp_path, monkeypatch):
    path = _log(tmp_path, dense=True)
    with open(path, "a") as fh:          # lines without a process: each one a process, on the counted path too
        fh.write((MISS.format(m=8, n=8, k=8) + "\n") * 3000)
    plain = shapelog.parse_stream(open(path).read().splitlines(), "a8w8_blockscale")
    from orchestrator.shapelib.shaperecords import RecordParser
    applied = []
    real = RecordParser.apply_effect
    monkeypatch.setattr(RecordParser, "apply_effect", lambda self, eff, times: applied.append(times) or
                        real(self, eff, times))
    dense = shapelog.parse_files([path], "a8w8_blockscale", chunk_bytes=1 << 18)
    assert sum(applied) > 5000                          # most lines went through the counted (dense) path
    assert dense.counts == plain.counts == {"a8w8_blockscale": [4000, 1600, 3000]}
    assert dense.workers == plain.workers == {"a8w8_blockscale": [1, 4, 3000]}


def test_lines_without_a_process_prefix_count_one_process_each_and_sglang_echoes_once(tmp_path):
    ts = "2026-02-17 23:52:11"
    lines = [MISS.format(**A)] * 3
    for r in range(2):     # SGLang: each record twice, AITER's own line and SGLang's echo with the rank
        lines += [MISS.format(**B), f"[{ts} TP{r}] " + MISS.format(**B)[len("[aiter] "):]]
    r = shapelog.parse_stream(lines, "a8w8_blockscale")
    assert r.counts["a8w8_blockscale"] == [3, 2] and r.workers["a8w8_blockscale"] == [3, 2]
    assert process_of("(Worker_TP4_EP4 pid=892) [aiter] ") == "Worker_TP4_EP4 pid=892"
    assert process_of(f"[{ts} DP1 TP4] ") == "DP1 TP4" and process_of("[aiter] ") is None


def test_an_older_helpers_answer_weighs_one_each():
    assert miss_weights({"shapes": {"v": [{}, {}]}}, "v", True) == [1, 1]


def test_the_probe_reads_the_runtime_source(tmp_path):
    ops = tmp_path / "aiter" / "ops"
    ops.mkdir(parents=True)
    assert miss_log_facts(str(tmp_path)) == {}                       # nothing to read: the version decides
    (ops / "gemm_op_a8w8.py").write_text("@functools.lru_cache(maxsize=1024)\ndef get_CKGEMM_config(M): ...\n")
    (tmp_path / "aiter" / "utility").mkdir()
    assert miss_log_facts(str(tmp_path)) == {"miss_log_once": False, "capture_csv": False}
    (ops / "gemm_op_a8w8.py").write_text("def _log_CKGEMM_miss_once(M, N, K, tuned_file): ...\n")
    (tmp_path / "aiter" / "utility" / "untuned_shapes.py").write_text("def record(tuned_file, row): ...\n")
    assert miss_log_facts(str(tmp_path)) == {"miss_log_once": True, "capture_csv": True}


def test_the_node_shapes_op_answers_workers_and_the_shapes_aiters_online_tuner_refused(tmp_path):
    from orchestrator.nodeside.node_helper import op_shapes
    tup = ("(256, 4, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
           "'torch.float8_e4m3fn', 'QuantType.per_Token', True, False)")
    log = tmp_path / "server.log"
    log.write_text(f"[aiter] [fused_moe] using 2stage default for {tup} \n[aiter] Fmoe tuning not support for {tup}\n"
                   f"(Worker_TP0 pid=7) {MISS.format(**A)}\n(Worker_TP1 pid=8) {MISS.format(**A)}\n")
    ans = op_shapes({"logs": [str(log)]})
    assert [s["token"] for s in ans["unsupported"]["moe_2stages"]] == [4] and ans["refused"] == {"moe_2stages": 1}
    assert ans["workers"]["a8w8_blockscale"] == [2] and ans["counts"]["a8w8_blockscale"] == [2]
