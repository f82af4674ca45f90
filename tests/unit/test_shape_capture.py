"""AITER's own shape capture (`AITER_TUNE_GEMM=1`, aiter/utility/untuned_shapes.py) as a shape source (issue 36)."""

import json

from orchestrator.cli import main
from orchestrator.shapelib import shapelog
from orchestrator.shapelib.shapecsv import capture_name, capture_variant


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_one_file_appended_by_every_process_weighs_a_row_by_the_processes_that_wrote_it(tmp_path):
    # each process writes a row once (deduplicated in-process); four ranks missed M=16, one M=32
    rows = "16,7168,2048,torch.float8_e4m3fn\n" * 4 + "32,7168,2048,torch.float8_e4m3fn\n"
    p = _write(tmp_path / "a8w8_bpreshuffle_untuned_gemm.csv", "M,N,K,q_dtype_w\n" + rows)
    r = shapelog.parse_files([p])
    assert r.shapes == {"a8w8_bpreshuffle": [
        {"m": 16, "n": 7168, "k": 2048, "q_dtype_w": "torch.float8_e4m3fn"},
        {"m": 32, "n": 7168, "k": 2048, "q_dtype_w": "torch.float8_e4m3fn"}]}
    assert r.counts["a8w8_bpreshuffle"] == [4, 1]
    assert r.misses["a8w8_bpreshuffle"] == 5


def test_a_directory_of_per_process_shards_counts_each_shard_once_per_row(tmp_path):
    for shard in ("host1.101", "host1.102", "host2.7"):
        _write(tmp_path / f"a8w8_blockscale_untuned_gemm.{shard}.csv", "M,N,K\n64,1536,7168\n")
    _write(tmp_path / "a8w8_blockscale_untuned_gemm.host2.7.csv.tmp", "junk\n")   # AITER's temp header file
    _write(tmp_path / "bf16_untuned_gemm.csv", "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle\n"
           "8,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False\n")
    r = shapelog.parse_files([str(tmp_path)])
    assert r.shapes["a8w8_blockscale"] == [{"m": 64, "n": 1536, "k": 7168}]
    assert r.counts["a8w8_blockscale"] == [3]
    assert r.shapes["a16w16"] == [{"m": 8, "n": 4096, "k": 4096, "bias": False, "dtype": "torch.bfloat16",
                                   "outdtype": "torch.bfloat16", "scaleab": False, "bpreshuffle": False}]


def test_a_torn_append_is_skipped_with_one_warning_and_the_variant_filter_holds(tmp_path):
    p = _write(tmp_path / "a8w8_blockscale_untuned_gemm.csv", "M,N,K\n1,\n1,2,3\n4,5,6\n")
    q = _write(tmp_path / "a4w4_blockscale_untuned_gemm.csv", "M,N,K\n9,9,9\n")
    r = shapelog.parse_files([p, q], "a8w8_blockscale")
    assert r.shapes == {"a8w8_blockscale": [{"m": 1, "n": 2, "k": 3}, {"m": 4, "n": 5, "k": 6}]}
    assert len(r.warnings) == 1 and "torn append" in r.warnings[0]


def test_a_log_named_like_a_capture_file_is_still_mined_as_a_log(tmp_path):
    line = ("[aiter] shape is M:16, N:7168, K:2048, not found tuned config in "
            "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    p = _write(tmp_path / "server_untuned_x.csv", line * 2)
    assert shapelog.parse_files([p]).shapes == {"a8w8_blockscale": [{"m": 16, "n": 7168, "k": 2048}]}


def test_names_map_to_their_tuned_tables():
    assert capture_name("/d/a8w8_untuned_gemm.h.1.csv") == "a8w8_untuned_gemm"
    assert capture_name("/d/a8w8_tuned_gemm.csv") is None
    assert capture_variant("dsv3_a8w8_blockscale_untuned_gemm.csv", ["m", "n", "k"])[0] == "a8w8_blockscale"
    assert capture_variant("untuned_fmoe.csv", ["token", "model_dim"])[0] == "moe_2stages"
    assert capture_variant("bf16_untuned_batched_gemm.csv", ["b", "m", "n", "k"])[0] == "batched_bf16"


def test_shapes_cli_reads_a_capture_directory(tmp_path, capsys):
    _write(tmp_path / "a8w8_blockscale_untuned_gemm.csv", "M,N,K\n64,1536,7168\n64,1536,7168\n")
    capsys.readouterr()
    assert main(["shapes", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["a8w8_blockscale"] == [{"m": 64, "n": 1536, "k": 7168}]
