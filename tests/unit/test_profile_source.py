"""The profile source (shapelib/profread.py): a real torch.profiler Chrome trace (record_shapes, a
cut of one recorded on an H200: tests/fixtures/profile/README.md) mapped to AITER shape keys and GPU time."""

import gzip
import json

import pytest

from orchestrator.shapelib import chrometrace, profops, profread

FIX = "tests/fixtures/profile/"
REAL = FIX + "torch_trace_cut.json.gz"


def test_real_trace_maps_each_aiter_call_to_its_key_and_gpu_time():
    r = profread.read_profiles([REAL])
    gemm = {(s["shape"]["m"], s["shape"]["n"], s["shape"]["k"]): s for s in r["shapes"]["a8w8_blockscale"]}
    assert set(gemm) == {(1, 1536, 7168), (1, 4096, 7168), (1, 7168, 2048)}
    assert all(s["calls"] == 4 for s in gemm.values())          # 4 layers each
    # the kernels launched inside each op call (linked by correlation) are its GPU time
    assert gemm[(1, 4096, 7168)]["gpu_us"] > gemm[(1, 1536, 7168)]["gpu_us"] > 0
    moe = r["shapes"]["moe_2stages"]
    assert [m["shape"]["token"] for m in moe] == [1]
    assert moe[0]["shape"]["expert"] == 8 and moe[0]["shape"]["topk"] == 8
    assert moe[0]["shape"]["model_dim"] == 2048 and moe[0]["shape"]["inter_dim"] == 512
    assert moe[0]["shape"]["use_g1u1"] == 1 and moe[0]["shape"]["act_type"] == "ActivationType.Silu"
    # aten::mm and the rest are GPU time too: the AITER ops are a part of the whole
    aiter_us = sum(r["variant_gpu_us"].values())
    assert 0 < aiter_us < r["total_gpu_us"]
    assert r["ops"] == {"aiter::gemm_a8w8_blockscale": 12, "aiter::fused_moe_": 4}


def test_variant_filter_and_a_variant_the_trace_lacks():
    r = profread.read_profiles([REAL], "a8w8_blockscale")
    assert list(r["shapes"]) == ["a8w8_blockscale"]
    with pytest.raises(profread.ProfileError, match="no a8w8 op call"):
        profread.read_profiles([REAL], "a8w8")


def test_trace_without_record_shapes_says_so():
    with pytest.raises(profread.ProfileError, match="record_shapes"):
        profread.read_profiles([FIX + "torch_trace_noshapes_cut.json.gz"])


def test_truncated_trace_says_truncated(tmp_path):
    raw = gzip.open(REAL).read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(profread.ProfileError, match="truncated"):
        profread.read_profiles([str(cut)])
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(raw)[:20000])
    with pytest.raises(profread.ProfileError, match="truncated|corrupt"):
        profread.read_profiles([str(gz)])


def test_trace_of_another_model_maps_nothing(tmp_path):
    d = json.loads(gzip.open(REAL).read())
    d["traceEvents"] = [e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("aiter::")]
    p = tmp_path / "other.json"
    p.write_text(json.dumps(d))
    with pytest.raises(profread.ProfileError, match="no AITER GEMM or fused-MoE op call"):
        profread.read_profiles([str(p)])


def test_streaming_reader_reads_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(chrometrace, "CHUNK", 97)           # every event crosses a chunk end
    r = profread.read_profiles([REAL])
    assert len(r["shapes"]["a8w8_blockscale"]) == 3
    rd = chrometrace.TraceReader(REAL)
    assert sum(1 for _ in rd.events()) > 1000 and rd.meta["record_shapes"] == 1


def test_nested_ck_stub_is_one_call_and_keys_follow_the_schema():
    assert profops.shape_of("aiter::gemm_a8w8", {"Input Dims": [[5, 64], [128, 64]],
                                                 "Input type": ["signed char", "signed char"]}) == (
        "a8w8", {"m": 5, "n": 128, "k": 64, "q_dtype_w": "torch.int8"})
    assert profops.shape_of("aiter::gemm_a4w4", {"Input Dims": [[8, 32], [256, 32]]})[1]["k"] == 64
    assert profops.shape_of("aiter::batched_gemm_bf16", {"Input Dims": [[2, 8, 64], [2, 128, 64]]}) == (
        "batched_bf16", {"b": 2, "m": 8, "n": 128, "k": 64})
    moe = profops.shape_of("aiter::fused_moe_", {
        "Input Dims": [[3, 7168], [256, 512, 7168], [256, 7168, 256], [3, 8], [3, 8], [], [], [], []],
        "Input type": ["c10::BFloat16", "c10::Float8_e4m3fnuz", "c10::Float8_e4m3fnuz", "float", "int"],
        "Concrete Inputs": ["", "", "", "", "", "", "0", "5", "False"]})[1]
    assert moe["q_type"] == "QuantType.per_1x128" and moe["inter_dim"] == 256 and moe["use_g1u1"] == 1
    assert moe["token"] == 3        # raw: the laptop snaps it to the runtime's bucket (shape_rules)


def test_rocprof_csv_alone_maps_nothing_and_with_a_trace_is_the_whole(tmp_path):
    csvp = tmp_path / "1_kernel_trace.csv"
    csvp.write_text('"Kind","Agent_Id","Queue_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
                    '"KERNEL_DISPATCH","Agent 4",1,"k",1,1000,10001000\n')
    with pytest.raises(profread.ProfileError, match="names kernels, not the op arguments"):
        profread.read_profiles([str(csvp)])
    r = profread.read_profiles([REAL, str(csvp)])
    assert r["total_gpu_us"] == pytest.approx(10000.0)


# --- tune-remote shapes --profile ------------------------------------------------------------------------

def _cli(capsys, *args):
    from orchestrator.cli import main
    capsys.readouterr()
    rc = main(["shapes", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_shapes_json_carries_time_share_and_gpu_us_largest_first(capsys):
    rc, out, _ = _cli(capsys, "--profile", REAL, "--json")
    assert rc == 0
    found = json.loads(out)
    gemm = found["a8w8_blockscale"]
    assert [(s["m"], s["n"], s["k"]) for s in gemm] == [(1, 4096, 7168), (1, 7168, 2048), (1, 1536, 7168)]
    assert all(0 < s["time_share"] < 1 and s["gpu_us"] > 0 for s in gemm)
    total = sum(s["time_share"] for v in found.values() for s in v)
    assert 0 < total < 1                      # aten::mm & co hold the rest of the GPU time


def test_shapes_profile_local_prefix_and_csv_keeps_key_columns_only(capsys, tmp_path):
    out_csv = tmp_path / "u.csv"
    rc, _, _ = _cli(capsys, "--profile", "local:" + REAL, "--variant", "a8w8_blockscale", "--csv", str(out_csv))
    assert rc == 0
    head = out_csv.read_text().splitlines()[0]
    assert "time_share" not in head and "gpu_us" not in head


def test_shapes_profile_bad_input_is_one_line_exit_2(capsys, tmp_path):
    from orchestrator.errors import ExitCode
    rc, _, err = _cli(capsys, "--profile", FIX + "torch_trace_noshapes_cut.json.gz", "--json")
    assert rc == ExitCode.USAGE == 2 and "record_shapes" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _cli(capsys, "--profile", str(tmp_path / "missing.json"), "--json")
    assert rc == 2 and "not found" in err
    rc, _, err = _cli(capsys, "--profile", "node:/x.json", "--json")
    assert rc == 2 and "node:" in err


def test_node_helper_profile_op_streams_the_trace_where_it_lives():
    """The helper's ``profile`` op, as a real subprocess with the flat module layout the node has."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    helper = root / "orchestrator" / "nodeside" / "node_helper.py"

    def call(req):
        proc = subprocess.run([sys.executable, str(helper), "profile"], input=json.dumps(req).encode(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        return json.loads(proc.stdout.decode().splitlines()[-1])

    ans = call({"profiles": [str(root / REAL)], "variant": "a8w8_blockscale"})
    assert ans["ok"] is True, ans
    assert len(ans["shapes"]["a8w8_blockscale"]) == 3 and ans["total_gpu_us"] > 0
    bad = call({"profiles": [str(root / FIX / "torch_trace_noshapes_cut.json.gz")]})
    assert "record_shapes" in bad["profile_error"]
