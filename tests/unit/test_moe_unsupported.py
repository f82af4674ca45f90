"""'Fmoe tuning not support for (...)' (aiter#3202, issue 36): AITER_ONLINE_TUNE ran AITER's own fused-MoE tuner
for a shape and got no row. The log parser keeps such shapes apart ('unsupported'), on every path (line by line,
dense blocks, forked ranges); a log without the line reads exactly as before."""

from __future__ import annotations

import io

from orchestrator.shapelib import shapelog
from orchestrator.shapelib.shaperules import ShapeLogResult

TUPLE = ("(256, {t}, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
         "'torch.float8_e4m3fn', 'QuantType.per_Token', True, False)")
MISS = "(Worker_TP{r} pid={p}) INFO 12-02 10:00:00 [aiter] [fused_moe] using 2stage default for " + TUPLE + " \n"
REFUSED = "(Worker_TP{r} pid={p}) WARNING 12-02 10:00:01 [aiter] Fmoe tuning not support for " + TUPLE + "\n"


def _lines(times=1):
    out = []
    for i in range(times):
        for r in range(2):
            out.append(MISS.format(r=r, p=100 + r, t=4))
            out.append(REFUSED.format(r=r, p=100 + r, t=4))
            out.append(MISS.format(r=r, p=100 + r, t=32))
            out.append(f"(Worker_TP{r} pid={100 + r}) INFO [aiter] shape is M:{1 + i % 7}, N:1536, K:7168, not found "
                       "tuned config in /tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    return out


def test_a_refused_shape_is_kept_apart_and_its_miss_still_counted():
    r = shapelog.parse_stream(io.StringIO("".join(_lines())))
    d = r.to_dict()
    assert [s["token"] for s in d["shapes"]["moe_2stages"]] == [4, 32] and d["misses"]["a8w8_blockscale"] == 2
    assert [s["token"] for s in d["unsupported"]["moe_2stages"]] == [4]
    assert d["refused"] == {"moe_2stages": 2} and d["misses"]["moe_2stages"] == 4
    back = ShapeLogResult.from_dict(d).to_dict()
    assert back["unsupported"] == d["unsupported"] and back["refused"] == d["refused"]


def test_a_log_without_the_line_reads_as_before():
    d = shapelog.parse_stream(io.StringIO(MISS.format(r=0, p=1, t=8))).to_dict()
    assert "unsupported" not in d and "refused" not in d


def test_dense_and_forked_paths_give_the_line_by_line_answer(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text("".join(_lines(6000)))
    with open(path, "rb") as f:
        want = shapelog.parse_stream(f).to_dict()
    for procs in (1, 4):
        res = shapelog.parse_files([str(path)], procs=procs, min_range=1)
        assert res.ranges["counted"] >= 2, res.ranges        # the ranges were counted, not fed line by line
        got = res.to_dict()
        for key in ("shapes", "counts", "unsupported", "refused", "misses"):
            assert got[key] == want[key], (procs, key)
    assert want["refused"] == {"moe_2stages": 12000}


def test_the_shapes_command_leaves_a_refused_shape_out_and_says_why(tmp_path, capsys):
    from orchestrator.cli import main
    log = tmp_path / "server.log"
    log.write_text("".join(_lines()))
    capsys.readouterr()
    assert main(["shapes", str(log), "--variant", "moe_2stages", "--json"]) == 0
    out = capsys.readouterr()
    import json
    assert [s["token"] for s in json.loads(out.out)["moe_2stages"]] == [32]
    assert "1 moe_2stages shape(s) cannot be tuned by this AITER" in out.err and "aiter#3202" in out.err
