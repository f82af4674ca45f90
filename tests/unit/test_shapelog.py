"""shapelog: every fixture log under tests/fixtures/logs/ must give exactly its .expected.json."""

from __future__ import annotations

import ast
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.shapelib import shapelog, shapescan

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
FIXTURES = sorted(LOGS.glob("*.log"))
SHAPELOG_SRC = Path(shapelog.__file__)


def _expected(log: Path) -> dict:
    return json.loads(log.with_suffix(".expected.json").read_text(encoding="utf-8"))


def _strip(d: dict) -> dict:
    d = dict(d)
    d.pop("files", None)
    d.pop("missing", None)
    return d


def test_fixture_corpus_is_complete():
    names = {p.name for p in FIXTURES}
    for required in ("real_vllm_blockscale.log", "real_v015_container_hit.log", "real_sglang_glm5_moe.log",
                     "real_moe_wrapped_glm53.log", "moe_forms.log", "gemm_q_dtype_w.log", "batched.log",
                     "bf16.log", "log_more.log", "ansi_prefixes.log", "sglang_dump_triton.log",
                     "sglang_moe_echo.log", "tuner_noise.log", "gemm_v015_nofile.log",
                     "after_v0120_a6w6_gelutanh.log", "mx_asm_lookups.log"):
        assert required in names
    for p in FIXTURES:
        assert p.with_suffix(".expected.json").exists(), p


@pytest.mark.parametrize("log", FIXTURES, ids=lambda p: p.stem)
def test_parse_files_exact(log):
    got = _strip(shapelog.parse_files([log]).to_dict())
    assert got == _expected(log)


@pytest.mark.parametrize("log", FIXTURES, ids=lambda p: p.stem)
def test_parse_stream_equals_parse_files(log):
    with open(log, encoding="utf-8", errors="replace", newline="") as f:
        got = _strip(shapelog.parse_stream(f).to_dict())
    assert got == _expected(log)


@pytest.mark.parametrize("chunk", [1, 7, 64, 200])
@pytest.mark.parametrize("log", FIXTURES, ids=lambda p: p.stem)
def test_chunk_boundaries_do_not_matter(log, chunk):
    got = _strip(shapelog.parse_files([log], chunk_bytes=chunk).to_dict())
    assert got == _expected(log)


def test_bytes_lines_input_and_gzip(tmp_path):
    log = LOGS / "real_vllm_blockscale.log"
    raw = log.read_bytes()
    by_bytes = _strip(shapelog.parse_stream(io.BytesIO(raw)).to_dict())
    assert by_bytes == _expected(log)
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(raw))
    r = shapelog.parse_files([gz])
    assert r.shapes == _expected(log)["shapes"]
    assert r.lines == raw.count(b"\n")


def test_real_vllm_shapes_and_counts():
    r = shapelog.parse_files([LOGS / "real_vllm_blockscale.log"])
    assert list(r.shapes) == ["a8w8_blockscale"]
    assert r.shapes["a8w8_blockscale"][0] == {"m": 8192, "n": 1024, "k": 3072}
    assert {"m": 72, "n": 2112, "k": 7168} in r.shapes["a8w8_blockscale"]
    assert r.misses == {"a8w8_blockscale": 11}   # every rank's line is a lookup
    assert r.hits == {}


def test_wrapped_real_moe_tuple():
    r = shapelog.parse_files([LOGS / "real_moe_wrapped_glm53.log"])
    assert r.shapes["moe_2stages"] == [{
        "token": 64, "model_dim": 4096, "inter_dim": 256, "expert": 288, "topk": 8,
        "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn",
        "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0,
    }]
    assert r.warnings == []


def test_truncated_real_tuple_warns_and_does_not_swallow_next_record():
    r = shapelog.parse_files([LOGS / "real_sglang_glm5_moe.log"])
    assert r.shapes == {}
    assert len(r.warnings) == 1 and "never closes" in r.warnings[0]
    assert "POST /v1/completions" not in r.warnings[0]


def test_sglang_echo_counts_once_but_ranks_count_each():
    r = shapelog.parse_files([LOGS / "sglang_moe_echo.log"])
    assert r.misses == {"moe_2stages": 3, "a8w8_blockscale": 1}
    assert [s["token"] for s in r.shapes["moe_2stages"]] == [16384, 8192]


def test_hits_are_not_misses():
    r = shapelog.parse_files([LOGS / "real_v015_container_hit.log"])
    assert r.shapes == {} and r.misses == {}
    assert r.hits == {"a8w8_blockscale": 1}
    r = shapelog.parse_files([LOGS / "moe_forms.log"])
    assert r.hits == {"moe_2stages": 2}


def test_triton_dispatch_warning():
    r = shapelog.parse_files([LOGS / "sglang_dump_triton.log"])
    assert r.dumps == {"a8w8_blockscale": 4}
    assert any("CK tuning will not help" in w for w in r.warnings)
    assert r.dispatch[0]["triton"] is True
    r = shapelog.parse_files([LOGS / "sglang_dump_ck_bpreshuffle.log"])
    assert r.warnings == []


def test_dump_variant_follows_filter():
    lines = (LOGS / "sglang_dump_triton.log").read_text().splitlines()
    r = shapelog.parse_stream(lines, variant="a8w8_blockscale_bpreshuffle")
    assert list(r.shapes) == ["a8w8_blockscale_bpreshuffle"]
    assert len(r.shapes["a8w8_blockscale_bpreshuffle"]) == 3


def test_variant_filter():
    files = [LOGS / "log_more.log", LOGS / "moe_forms.log"]
    r = shapelog.parse_files(files, variant="a8w8_bpreshuffle")
    assert list(r.shapes) == ["a8w8_bpreshuffle"]
    assert r.misses == {"a8w8_bpreshuffle": 1}
    r = shapelog.parse_files(files, variant=["moe_2stages", "a16w16"])
    assert set(r.shapes) == {"moe_2stages", "a16w16"}


def test_dedup_across_files_and_lines_bytes(tmp_path):
    log = LOGS / "real_vllm_blockscale.log"
    r = shapelog.parse_files([log, log])
    assert len(r.shapes["a8w8_blockscale"]) == 8
    assert r.misses == {"a8w8_blockscale": 22}
    assert r.bytes == 2 * log.stat().st_size
    assert r.lines == 30


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        shapelog.parse_files([tmp_path / "nope.log"])
    r = shapelog.parse_files([tmp_path / "nope.log"], skip_missing=True)
    assert r.missing == [str(tmp_path / "nope.log")]


def test_keep_meta():
    r = shapelog.parse_files([LOGS / "moe_forms.log", LOGS / "gemm_files_and_hits.log"], keep_meta=True)
    moe = r.shapes["moe_2stages"][0]
    assert moe["_meta"] == {"gfx": "gfx950", "cu_num": 256}
    legacy = [s for s in r.shapes["moe_2stages"] if s["token"] == 16][0]
    assert legacy["_meta"] == {"cu_num": 304}
    hit = r.hit_shapes["a8w8_blockscale_bpreshuffle"][0]
    assert hit["_meta"]["padded_m"] == 32 and hit["m"] == 20


def test_json_roundtrip():
    r = shapelog.parse_files([LOGS / "moe_forms.log"])
    assert isinstance(r.to_json(), dict) and r.to_json() == r.to_dict()
    again = shapelog.ShapeLogResult.from_dict(json.loads(r.to_json_text()))
    assert again.to_dict() == r.to_dict()


@pytest.mark.parametrize("text,variant,note", [
    ("/tmp/aiter_configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv", "a8w8_blockscale_bpreshuffle", False),
    ("/x/model_configs/dsv3_a8w8_blockscale_tuned_gemm.csv", "a8w8_blockscale", False),
    ("/x/a8w8_blockscale_bpreshuffle_tuned_gemm_mm2.5.csv", "a8w8_blockscale_bpreshuffle", False),
    ("/x/a8w8_bpreshuffle_tuned_gemm.csv", "a8w8_bpreshuffle", False),
    ("/x/a8w8_tuned_gemm.csv", "a8w8", False),
    ("/x/dsv3_a4w4_blockscale_tuned_gemm.csv", "a4w4_blockscale", False),
    ("/x/bf16_tuned_gemm.csv", "a16w16", False),
    ("/tmp/aiter_configs/a8w8_mxfp8_bpreshuffle_tuned_gemm.csv", "a8w8_mxfp8_bpreshuffle", False),
    ("/x/model_configs/dsv4_a8w8_mxfp8_bpreshuffle_tuned_gemm.csv", "a8w8_mxfp8_bpreshuffle", False),
    ("CKGEMM", "a8w8_blockscale", False),
    ("CKGEMM or asmGEMM", "a4w4_blockscale", False),
    ("ASMGEMM", "a8w8_bpreshuffle", True),
    ("/x/custom.csv", "a8w8_blockscale", True),
])
def test_variant_from_tuned_file(text, variant, note):
    got, why = shapelog.variant_from_tuned_file(text)
    assert got == variant
    assert bool(why) is note


def test_moe_tuple_forms():
    shape, meta = shapelog.parse_moe_tuple(
        "('gfx950', 256, 64, 4096, 256, 288, 8, <ActivationType.Silu: 0>, 'torch.bfloat16', "
        "'torch.float8_e4m3fn', 'torch.float8_e4m3fn', <QuantType.per_1x128: 4>, True, False, 287, 0, 0)")
    assert shape["act_type"] == "ActivationType.Silu" and shape["q_type"] == "QuantType.per_1x128"
    assert meta == {"gfx": "gfx950", "cu_num": 256}
    shape, meta = shapelog.parse_moe_tuple(
        "(16, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.bfloat16', "
        "'torch.bfloat16', 'QuantType.No', 1, 0)")
    assert meta == {} and shape["token"] == 16 and shape["use_g1u1"] == 1
    with pytest.raises(ValueError):
        shapelog.parse_moe_tuple("(1, 2, 3)")


def test_m_presets():
    assert shapelog.m_sweep() == [2 ** i for i in range(16)]
    cg = shapelog.m_sweep("cudagraph")
    assert cg[:5] == [1, 2, 4, 8, 16] and cg[-1] == 512 and len(cg) == 67
    assert shapelog.m_sweep([4, 2, 2]) == [2, 4]
    assert shapelog.m_sweep("1, 72,8") == [1, 8, 72]
    with pytest.raises(ValueError):
        shapelog.m_sweep("fancy")
    assert shapelog.moe_token_sweep()[-1] == 32768


def test_expand_m():
    shapes = [{"m": 72, "n": 512, "k": 7168}, {"m": 8, "n": 512, "k": 7168},
              {"m": 3, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"}]
    out = shapelog.expand_m(shapes, [1, 8])
    assert out == [
        {"m": 1, "n": 512, "k": 7168}, {"m": 8, "n": 512, "k": 7168}, {"m": 72, "n": 512, "k": 7168},
        {"m": 1, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"},
        {"m": 3, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"},
        {"m": 8, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"},
    ]
    assert len(shapelog.expand_m(shapes[:1], "pow2", keep_logged=False)) == 16
    batched = shapelog.expand_m([{"b": 16, "m": 5, "n": 1280, "k": 8192}], [1], keep_logged=False)
    assert batched == [{"b": 16, "m": 1, "n": 1280, "k": 8192}]
    moe = shapelog.parse_files([LOGS / "real_moe_wrapped_glm53.log"]).shapes["moe_2stages"]
    swept = shapelog.expand_m(moe, "pow2")
    assert [s["token"] for s in swept] == shapelog.moe_token_sweep()
    assert list(swept[0]) == list(shapelog.MOE_KEY)


SHAPE_MODULES = ("shapelog", "shapefmt", "shaperules", "shaperecords", "shapescan", "shapepar", "shapecsv", "shapefhmoe", "shapebmm",
                 "text", "variant_facts")


@pytest.mark.parametrize("name", SHAPE_MODULES)
def test_stdlib_only_and_py38_syntax(name):
    tree = ast.parse((SHAPELOG_SRC.parent / f"{name}.py").read_text(), feature_version=(3, 8))
    allowed = {"__future__", "collections", "gzip", "json", "os", "pickle", "re", "signal", "sys", "argparse",
               "warnings",
               *SHAPE_MODULES}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert {a.name.split(".")[0] for a in node.names} <= allowed
        elif isinstance(node, ast.ImportFrom):
            assert node.module.split(".")[0] in allowed
            assert node.level == 0 or node.module in SHAPE_MODULES     # `from .shapefmt import`: laptop side


def test_the_cli_runs_as_a_module_of_the_pushed_package(tmp_path):
    """On the node the library is the package orchestrator/shapelib/ in the pushed dir, alone (no laptop code)."""
    pkg = tmp_path / "orchestrator" / "shapelib"
    pkg.mkdir(parents=True)
    (tmp_path / "orchestrator" / "__init__.py").write_text("")
    for name in (*SHAPE_MODULES, "__init__"):
        (pkg / f"{name}.py").write_text((SHAPELOG_SRC.parent / f"{name}.py").read_text())
    log = tmp_path / "s.log"
    log.write_text("[aiter] shape is M:16, N:1536, K:7168, not found tuned config in /x/a8w8_tuned_gemm.csv, "
                   "will use default config!\n")
    out = subprocess.run([sys.executable, "-I", "-c", "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); "
                          "runpy.run_module('orchestrator.shapelib.shapelog', run_name='__main__', alter_sys=True)",
                          str(tmp_path), str(log)], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert json.loads(out)["shapes"] == {"a8w8": [{"m": 16, "n": 1536, "k": 7168}]}


def test_throughput_smoke(tmp_path):
    """~20 MB of noise with sparse misses parses in well under the test budget."""
    noise = b"(Worker_TP3 pid=11841) INFO 04-10 06:05:12 [model_runner.py:100] step 123 took 0.01s\n" * 2000
    miss = (b"(Worker_TP3 pid=11841) [aiter] shape is M:72, N:512, K:7168, not found tuned config in "
            b"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    big = tmp_path / "big.log"
    with open(big, "wb") as f:
        for _ in range(120):
            f.write(noise)
            f.write(miss)
    r = shapelog.parse_files([big])
    assert r.misses == {"a8w8_blockscale": 120}
    assert r.lines == 120 * 2001


# ------------------------------------------------------------------------------------------------
# scanning: the dense path (identical lines counted) and the line-length cap must not change results
# ------------------------------------------------------------------------------------------------


def _mixed_log(tmp_path, repeats=4):
    """Dense generated vLLM stretches between copies of every fixture log (SGLang echoes, wrapped
    tuples, warnings): blocks of both kinds, and blocks that mix them."""
    from orchestrator.sim.logs import write_large_log

    write_large_log(tmp_path / "vllm.log", 2 << 20)
    dense = (tmp_path / "vllm.log").read_bytes()
    corpus = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in FIXTURES)
    path = tmp_path / "mixed.log"
    path.write_bytes((dense + corpus) * repeats)
    return path


def _reference(path):
    """parse_stream feeds every line in order: the plain reading of the rules."""
    with open(path, "rb") as f:
        return _strip(shapelog.parse_stream(f).to_dict())


@pytest.mark.parametrize("chunk", [4096, 65536, 1 << 20, shapelog.CHUNK_BYTES])
def test_dense_blocks_give_the_line_by_line_answer(tmp_path, chunk, monkeypatch):
    path = _mixed_log(tmp_path)
    counted = []
    real = shapescan.LineScanner.count_lines
    monkeypatch.setattr(shapescan.LineScanner, "count_lines",
                        lambda self, lines: counted.append(real(self, lines)) or counted[-1])
    assert _strip(shapelog.parse_files([path], chunk_bytes=chunk).to_dict()) == _reference(path)
    if 65536 <= chunk <= 1 << 20:
        assert True in counted  # the dense path really ran (and gave the same answer)


def test_dense_path_on_a_generated_vllm_log(tmp_path):
    from orchestrator.sim.logs import write_large_log

    path = tmp_path / "vllm.log"
    log = write_large_log(path, 3 << 20)
    got = shapelog.parse_files([path], chunk_bytes=256 << 10)
    assert _strip(got.to_dict()) == _reference(path)
    assert got.lines == log.lines and got.bytes == log.bytes


@pytest.mark.parametrize("chunk", [65536, 1 << 20, shapelog.CHUNK_BYTES])
def test_over_long_lines_are_skipped_with_one_warning_whatever_the_chunk(tmp_path, chunk):
    miss = (b"(Worker_TP3 pid=11841) [aiter] shape is M:72, N:512, K:7168, not found tuned config in "
            b"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    long_candidate = b"\r progress " + b"x" * (3 << 20) + b" tuned " + b"y" * 100 + b"\n"
    long_noise = b"z" * (2 << 20) + b"\n"
    wrapped = (b"[aiter] [fused_moe] using 2stage default for (256, 1, 7168, 256, 257, 9,\n")
    path = tmp_path / "long.log"
    path.write_bytes(miss + long_candidate + miss.replace(b"M:72", b"M:8") + long_noise + wrapped
                     + long_noise + miss.replace(b"M:72", b"M:16"))
    r = shapelog.parse_files([path], chunk_bytes=chunk)
    assert r.shapes == {"a8w8_blockscale": [{"m": 72, "n": 512, "k": 7168}, {"m": 8, "n": 512, "k": 7168},
                                            {"m": 16, "n": 512, "k": 7168}]}
    assert r.lines == 7 and r.bytes == path.stat().st_size
    assert sum("longer than" in w for w in r.warnings) == 1 and "1 candidate line(s)" in " ".join(r.warnings)
    assert any("never closes" in w for w in r.warnings)  # the long line ended the wrapped tuple
    assert _strip(r.to_dict()) == _reference(path)


def test_memory_stays_bounded_by_the_block_on_a_huge_line(tmp_path):
    import tracemalloc

    path = tmp_path / "huge.log"
    with open(path, "wb") as f:
        f.write(b"[aiter] shape is M:1, N:2, K:3, not found tuned config in a8w8_tuned_gemm.csv, will use "
                b"default config!\n")
        for _ in range(40):
            f.write(b"\x1b[2K tuned " * 100000)  # 40 x 1.1 MB, no newline
        f.write(b"\n")
    tracemalloc.start()
    try:
        r = shapelog.parse_files([path], chunk_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.lines == 2 and r.misses == {"a8w8": 1}
    assert peak < 8 << 20, peak


# ------------------------------------------------------------------------------------------------
# several processes (shapepar): each range counted elsewhere is taken only when feeding it would agree
# ------------------------------------------------------------------------------------------------


def _exact(path, **kw):
    """parse_files with ``kw``, checked against the line-by-line answer."""
    got = shapelog.parse_files([path], **kw)
    assert _strip(got.to_dict()) == _reference(path)
    return got


def _dense_log(tmp_path, size=3 << 20):
    from orchestrator.sim.logs import write_large_log

    path = tmp_path / "vllm.log"
    write_large_log(path, size)
    return path


def _ranges_log(tmp_path):
    """Dense generated stretches with every fixture log between them (SGLang echoes, wrapped tuples,
    warnings), so that some ranges start where the parser is not free to take a count."""
    from orchestrator.sim.logs import write_large_log

    write_large_log(tmp_path / "vllm.log", 1 << 20)
    dense = (tmp_path / "vllm.log").read_bytes()
    corpus = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in FIXTURES)
    path = tmp_path / "ranges.log"
    path.write_bytes((dense + corpus) * 3 + dense)
    return path


@pytest.mark.parametrize("procs", [2, 3, 5, 8])
def test_several_processes_give_the_line_by_line_answer(tmp_path, procs, monkeypatch):
    from orchestrator.shapelib import shapepar

    path = _ranges_log(tmp_path)
    monkeypatch.setattr(shapepar, "looks_dense", lambda f, size: True)   # the corpus stretches are sparse
    got = shapelog.parse_files([path], procs=procs, min_range=1)
    assert _strip(got.to_dict()) == _reference(path)
    assert got.ranges["counted"] + got.ranges["scanned"] == procs == got.ranges["processes"]
    if procs >= 5:          # some ranges hold only generated lines: their counts were really taken
        assert got.ranges["counted"] >= 1
    if procs == 8:          # and some hold fixture lines that must be fed in order: scanned here
        assert got.ranges["scanned"] >= 1


def test_a_range_starting_inside_a_wrapped_tuple_is_scanned_here(tmp_path):
    from orchestrator.shapelib import shapepar

    miss = (b"(Worker_TP0 pid=888) [aiter] shape is M:%d, N:512, K:7168, not found tuned config in "
            b"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    half = b"".join(miss % (i % 50) for i in range(4000))
    wrapped = (b"[aiter] [fused_moe] using 2stage default for ('gfx950', 256, 1, 7168, 256, 257, 9,\n"
               b"'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', 'torch.float8_e4m3fn',\n"
               b"'QuantType.per_1x128', True, False)\n")
    path = tmp_path / "w.log"
    path.write_bytes(half + wrapped + half)
    cut = len(half) + wrapped.index(b"\n") + 1            # the second range starts on the tuple's 2nd line
    import unittest.mock as mock
    with mock.patch.object(shapepar, "cuts", lambda f, size, n: [0, cut, size]):
        got = shapelog.parse_files([path], procs=2, min_range=1)
    # the first range ends on the tuple's first line (it needs its neighbours: scanned here) and leaves the
    # record open, so the second range's count (its worker cannot know) is not taken either
    assert got.ranges == {"counted": 0, "scanned": 2, "processes": 2}
    assert _strip(got.to_dict()) == _reference(path)
    assert sum(len(v) for k, v in got.shapes.items() if "moe" in k) == 1   # the wrapped record was assembled


def test_a_worker_that_dies_or_refuses_costs_time_not_the_answer(tmp_path, monkeypatch):
    from orchestrator.shapelib import shapepar

    path = _dense_log(tmp_path)
    real = shapepar.count_range
    parent = os.getpid()

    def count_range(p, start, end, scanner):
        if os.getpid() != parent:
            if start > (2 << 20):
                os._exit(3)                               # killed before it answered
            return None                                   # refused
        return real(p, start, end, scanner)
    monkeypatch.setattr(shapepar, "count_range", count_range)
    assert _exact(path, procs=3, min_range=1).ranges == {"counted": 1, "scanned": 2, "processes": 3}


def test_workers_are_killed_and_reaped_when_the_scan_is_interrupted(tmp_path, monkeypatch):
    from orchestrator.shapelib import shapepar

    path = _dense_log(tmp_path)
    pids = []
    real_fork = shapepar._Worker.fork

    def fork(self, *a):
        real_fork(self, *a)
        pids.append(self.pid)
    monkeypatch.setattr(shapepar._Worker, "fork", fork)
    monkeypatch.setattr(shapescan.LineScanner, "take", lambda self, digest: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        shapelog.parse_files([path], procs=4, min_range=1)
    assert len(pids) == 3 and all(pid > 0 for pid in pids)
    for pid in pids:
        with pytest.raises(ChildProcessError):           # reaped: no zombie left behind
            os.waitpid(pid, os.WNOHANG)


def test_small_sparse_or_long_lined_files_stay_in_one_process(tmp_path):
    from orchestrator.shapelib import shapepar

    from orchestrator.sim.logs import write_large_log
    dense = tmp_path / "vllm.log"
    write_large_log(dense, 2 << 20)
    nothing = {"counted": 0, "scanned": 0, "processes": 1}
    assert shapelog.parse_files([dense], procs=2).ranges == nothing                    # < 2 x 32 MB
    assert shapelog.parse_files([dense], procs=2, min_range=1).ranges == {"counted": 2, "scanned": 0,
                                                                          "processes": 2}
    # one process: ranges of min_range, all counted here, one after the other
    one = shapelog.parse_files([dense], procs=1, min_range=256 << 10)
    assert one.ranges == {"counted": 8, "scanned": 0, "processes": 1}
    assert _strip(one.to_dict()) == _reference(dense)
    noise = b"(APIServer pid=1) INFO 04-10 06:05:12 [loggers.py:123] Engine 000: Avg prompt throughput\n"
    sparse = tmp_path / "sparse.log"
    sparse.write_bytes(noise * 40000 + dense.read_bytes()[:4096])
    with open(sparse, "rb") as f:
        assert not shapepar.looks_dense(f, sparse.stat().st_size)
    long_lines = tmp_path / "long.log"
    long_lines.write_bytes((b"\r[Tuning] 37% |#####     | tuned 1/3 " * 60000 + b"\n") * 8)
    with open(long_lines, "rb") as f:
        assert not shapepar.looks_dense(f, long_lines.stat().st_size)


def test_a_worker_keeps_bounded_memory_and_refuses_past_its_cap(tmp_path, monkeypatch):
    """Lines that are not candidates are all distinct (timestamps): pruned every PRUNE_BYTES read, not kept;
    candidate lines past MAX_KEPT_BYTES: the worker refuses and the range is scanned here."""
    import tracemalloc

    from orchestrator.shapelib import shapepar, shaperecords

    miss = (b"(Worker_TP0 pid=888) [aiter] shape is M:%d, N:512, K:7168, not found tuned config in "
            b"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    path = tmp_path / "unique.log"
    with open(path, "wb") as f:
        for i in range(150000):             # ~20 MB, every noise line distinct
            f.write(b"(APIServer pid=1) INFO request %012d finished in 0.%06d s\n" % (i, i) + miss % (i % 64))
    size = path.stat().st_size
    scanner = shapescan.LineScanner(shaperecords.RecordParser())
    monkeypatch.setattr(shapepar, "PRUNE_BYTES", 2 << 20)
    fh = open(path, "rb")
    tracemalloc.start()
    try:
        digest = shapepar.count_range(fh.fileno(), 0, size, scanner)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest is not None and len(digest["counts"]) == 64 and digest["lines"] == 300000
    assert peak < 3 * shapepar.PRUNE_BYTES + (6 << 20), peak          # not ~30 MB of distinct lines
    monkeypatch.setattr(shapepar, "MAX_KEPT_BYTES", 64 * 100)
    assert shapepar.count_range(fh.fileno(), 0, size, scanner) is None
    fh.close()
    assert _exact(path, procs=2, min_range=1).ranges == {"counted": 0, "scanned": 2, "processes": 2}


def test_a_fork_that_fails_leaves_its_range_to_this_process(tmp_path, monkeypatch):
    from orchestrator.shapelib import shapepar

    path = _dense_log(tmp_path)
    forks = []

    def fork():
        forks.append(1)
        if len(forks) > 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real_fork()
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", fork)
    fds = len(os.listdir("/proc/self/fd"))
    got = shapelog.parse_files([path], procs=4, min_range=1)
    assert got.ranges == {"counted": 4, "scanned": 0, "processes": 2}   # one worker; the rest counted here
    assert _strip(got.to_dict()) == _reference(path)
    assert len(os.listdir("/proc/self/fd")) == fds                     # the failed fork's pipe is closed


def test_a_record_that_comes_back_exactly_one_echo_window_later_is_counted_not_crashed():
    """The echo window evicted a message's only entry and then counted the new one into the dropped list:
    the next eviction raised KeyError (a record cycling with period ECHO_WINDOW, common in serving logs)."""
    from orchestrator.shapelib.shapefmt import ECHO_WINDOW

    miss = ("[aiter] shape is M:%d, N:512, K:7168, not found tuned config in /tmp/a8w8_blockscale_tuned_gemm.csv, "
            "will use default config!\n")
    for period in (ECHO_WINDOW - 1, ECHO_WINDOW, ECHO_WINDOW + 1):
        r = shapelog.parse_stream(io.StringIO("".join(miss % (i % period) for i in range(200))))
        assert r.misses == {"a8w8_blockscale": 200} and len(r.shapes["a8w8_blockscale"]) == period


@pytest.mark.parametrize("where", ["chunk", "range"])
def test_a_blank_line_inside_a_wrapped_tuple_at_a_block_or_range_end_is_fed(tmp_path, where, monkeypatch):
    from orchestrator.shapelib import shapepar

    miss = (b"[aiter] shape is M:%d, N:512, K:7168, not found tuned config in /tmp/a8w8_blockscale_tuned_gemm.csv, "
            b"will use default config!\n")
    wrapped = b"[aiter] [fused_moe] using 2stage default for ('gfx950', 256, 1, 7168,\n" + b"  \n" * 6
    closing = (b"256, 257, 9, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
               b"'torch.float8_e4m3fn', 'QuantType.per_1x128', True, False)\n")
    head = b"".join(miss % i for i in range(3))
    path = tmp_path / "blank.log"
    path.write_bytes(head + wrapped + b"\n" + closing + b"".join(miss % i for i in range(3)))
    cut = len(head + wrapped) + 1                      # the block / the range ends right after the empty line
    if where == "chunk":
        got = shapelog.parse_files([path], chunk_bytes=cut)
    else:
        monkeypatch.setattr(shapepar, "looks_dense", lambda f, size: True)
        monkeypatch.setattr(shapepar, "cuts", lambda f, size, n: [0, cut, size])
        got = shapelog.parse_files([path], procs=2, min_range=1)
    assert _strip(got.to_dict()) == _reference(path)   # the 8th line of the record ends it: never closes


def test_workers_are_killed_when_the_reading_of_their_answers_is_interrupted(tmp_path):
    """A deadline while the parent reads a digest: every worker is killed and reaped at once, none stays
    blocked writing its (big) digest into a pipe another worker held open. In a subprocess: a hang fails."""
    from orchestrator.sim.logs import write_large_log

    path = tmp_path / "vllm.log"
    write_large_log(path, 6 << 20)
    script = f"""
import os, signal, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from orchestrator.shapelib import shapelog, shapepar, shapescan
pids = []
real_fork = shapepar._Worker.fork
def fork(self, *a):
    real_fork(self, *a)
    pids.append(self.pid)
shapepar._Worker.fork = fork
real_load = shapepar.pickle.load
def load(f):
    time.sleep(0.3)           # the workers are done counting, blocked writing their digests
    raise KeyboardInterrupt   # what a SIGALRM deadline raises in the helper
shapepar.pickle.load = load
try:
    shapelog.parse_files([{str(path)!r}], procs=4, min_range=1)
except KeyboardInterrupt:
    pass
for pid in pids:
    try:
        os.waitpid(pid, os.WNOHANG)
        print("not reaped", pid)
    except ChildProcessError:
        pass
print("done", len(pids))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert out.strip().splitlines() == ["done 3"], out


def test_a_log_rotated_while_it_is_mined_is_read_as_it_was_opened(tmp_path, monkeypatch):
    from orchestrator.shapelib import shapepar
    path = _dense_log(tmp_path)
    reference = _reference(path)
    real = shapepar.looks_dense

    def rotate(f, size):             # logrotate between the open and the workers' reads
        os.rename(path, tmp_path / "vllm.log.1")
        path.write_bytes(b"[aiter] shape is M:1, N:768, K:7168, not found tuned config in "
                         b"/tmp/a8w8_blockscale_tuned_gemm.csv, will use default config!\n" * 40000)
        return real(f, size)
    monkeypatch.setattr(shapepar, "looks_dense", rotate)
    got = shapelog.parse_files([path], procs=3, min_range=1)
    assert got.ranges["counted"] == 3
    assert _strip(got.to_dict()) == reference


def test_a_log_being_written_ends_mid_line_and_its_ranges_are_still_counted(tmp_path):
    path = _dense_log(tmp_path)
    with open(path, "ab") as f:
        f.write(b"(Worker_TP0 pid=888) [aiter] shape is M:77, N:512, K:7168, not found tuned co")   # no newline yet
    assert _exact(path, procs=3, min_range=1).ranges == {"counted": 3, "scanned": 0, "processes": 3}


def test_tiny_ranges_are_capped(tmp_path):
    from orchestrator.shapelib import shapepar
    from orchestrator.sim.logs import write_large_log

    path = tmp_path / "vllm.log"
    write_large_log(path, 2 << 20)
    assert shapepar.plan(path.stat().st_size, 1, 1) == (shapepar.MAX_RANGES, 1)
    got = shapelog.parse_files([path], procs=1, min_range=1)
    assert got.ranges["counted"] + got.ranges["scanned"] <= shapepar.MAX_RANGES
    assert _strip(got.to_dict()) == _reference(path)


def test_ranges_of_several_files_add_up_and_say_the_most_processes_one_used(tmp_path):
    """Before: ``processes`` was the last file's (1 for a small log after a big one)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    big = _dense_log(tmp_path / "a", 3 << 20)          # three 1 MiB ranges: two workers
    two = _dense_log(tmp_path / "b", (2 << 20) + 4096)  # two ranges: one worker
    got = shapelog.parse_files([big, two], procs=3, min_range=1 << 20)
    assert got.ranges["processes"] == 3 and got.ranges["counted"] + got.ranges["scanned"] == 5


def test_memory_stays_bounded_on_a_log_of_many_distinct_long_candidate_lines(tmp_path):
    """An audit found the memo of candidate lines (whole lines as keys, up to 65536 of them, each up to 1 MiB)
    grew with the log: 300 distinct 0.9 MB lines holding "tuned" peaked at 310 MB. The memos now have a byte
    budget: the peak stays well under the issue's 100 MB whatever the log."""
    import resource
    import subprocess
    import sys
    log = tmp_path / "progress.log"
    with open(log, "wb") as fh:
        for i in range(150):   # ~130 MB: tqdm progress redrawn with \r, one 0.88 MB line per bar
            fh.write(b"\r[Tuning] %06d 37%% |#####     | tuned 1/3 " % i * 20000 + b"\n")
    root = Path(shapelog.__file__).parents[2]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cp = subprocess.run([sys.executable, "-m", "orchestrator.shapelib.shapelog", str(log), "--summary", "--procs", "1"],
                        capture_output=True, text=True, cwd=root)
    assert cp.returncode == 0, cp.stderr
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert peak_mb < 80 or before / 1024 >= 80, f"peak RSS {peak_mb:.0f} MB"
