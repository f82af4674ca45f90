"""The live tuning table (review P-11): the tuner's per-shape result lines, parsed as they arrive."""

import io
import types

from orchestrator.parsing.tuneresults import feed, parse_line
from orchestrator.steps.remote import _tuning_results
from orchestrator.ui import Ui

GEMM = ("Tuning result for 'gfx': 'gfx950', 'cu_num': 256, 'M': 16, 'N': 1536, 'K': 7168, 'q_dtype_w': 'torch.int8' "
        "is kernelId=8 a8w8_blockscale_1x128x128_256x16x64x256 splitK=0, 4.8294us, err_ratio=0.0, tflops=2.61 "
        "TFLOPS, bw=1304.22 GB/s")
NUMPY2 = ("Tuning result for 'gfx': 'gfx942', 'cu_num': 304, 'M': np.int64(64), 'N': np.int64(512), 'K': np.int64(7168) "
          "is kernelId=3 k3 splitK=2, infus, err_ratio=1.0, tflops=0 TFLOPS, bw=0 GB/s")
MOE = ("Tuning result for ('gfx950', 256, 8192, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16') is "
       "(128, 'moe_gemm1_a', 'moe_gemm2_b', '0.0%', '0.0%', False) 81.2 us, 512.5 TFLOPS, 1234.0 GB/s")
NONE = "[aiter] No kernel can be used for ('gfx950', 256, 1, 7168, 256, 256, 8, 'ActivationType.Silu')"


def test_gemm_moe_and_no_kernel_lines():
    assert parse_line(GEMM) == {"shape": "M=16 N=1536 K=7168 q_dtype_w=torch.int8",
                                "kernel": "a8w8_blockscale_1x128x128_256x16x64x256", "splitk": 0, "us": 4.8294,
                                "err_ratio": 0.0, "tflops": 2.61}
    r = parse_line(NUMPY2)
    assert r["shape"] == "M=64 N=512 K=7168" and r["splitk"] == 2 and r["us"] == float("inf")
    assert parse_line(MOE) == {"shape": "8192,7168,256,256,8,ActivationType.Silu,torch.bfloat16",
                               "kernel": "moe_gemm1_a + moe_gemm2_b", "splitk": None, "us": 81.2,
                               "err_ratio": None, "tflops": 512.5}
    assert parse_line(NONE)["kernel"] is None and parse_line(NONE)["shape"] == "1,7168,256,256,8,ActivationType.Silu"
    assert parse_line("Tuning result for garbage") is None and parse_line("processed 1 batches of 4") is None


def test_lines_cut_by_a_chunk_boundary_are_read_once_whole():
    text = "\n".join(["noise", GEMM, MOE, NONE, "tail"]) + "\n"
    for cut in range(0, len(text), 37):
        pending, got = "", []
        for part in (text[:cut], text[cut:]):
            new, pending = feed(pending, part)
            got += new
        assert [g["kernel"] for g in got] == ["a8w8_blockscale_1x128x128_256x16x64x256", "moe_gemm1_a + moe_gemm2_b",
                                              None]


def test_plain_output_prints_each_result_once_as_it_arrives():
    out = io.StringIO()
    ui = Ui(tty=False, stream=out)
    info = {"current": "tune"}
    job = types.SimpleNamespace(job_id="j")
    _tuning_results(info, (GEMM + "\n" + NONE[:30]).encode())
    ui.progress(job, info)
    ui.progress(job, info)                                  # nothing new: printed once
    _tuning_results(info, (NONE[30:] + "\n").encode())
    ui.progress(job, info)
    lines = [ln for ln in out.getvalue().splitlines() if "tuned" in ln or "no kernel" in ln]
    assert lines == ["tune-remote: tuned M=16 N=1536 K=7168 q_dtype_w=torch.int8: "
                     "a8w8_blockscale_1x128x128_256x16x64x256 4.829 us, 2.61 TFLOPS",
                     "tune-remote: no kernel for 1,7168,256,256,8,ActivationType.Silu"]
    assert info["results_seen"] == 2


def test_a_tty_shows_the_newest_results_in_a_table():
    out = io.StringIO()
    ui = Ui(tty=True, stream=out)
    info = {"current": "tune"}
    _tuning_results(info, (GEMM + "\n" + MOE + "\n").encode())
    ui.progress(types.SimpleNamespace(job_id="j"), info)
    ui.stop()
    import re
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    assert "tuned so far: 2 shape(s)" in text and "moe_gemm1_a +" in text and "512.5" in text and "4.829" in text


def test_the_whole_local_tuning_log_settles_the_results_the_polls_may_have_cut_short(tmp_path):
    # the tune step's last bytes can arrive after the step ended (with the next step's polls or the pull):
    # once compare pulled the whole log, the results are read from all of it
    from orchestrator.state import JobState
    from orchestrator.steps.remote import settle_tuning_results
    job = JobState(job_id="j", node="n", container="c", variant="a8w8_blockscale", created=0, request={},
                   remote={"logs": {"tune": "/aiter/tune_logs/a8w8_blockscale_tuning_1.log"}})
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a8w8_blockscale_tuning_1.log").write_text("\n".join(["x", GEMM, NUMPY2, NONE]))
    info = job.step_state("remote").info
    _tuning_results(info, (GEMM + "\n").encode())          # what the polls saw
    settle_tuning_results(types.SimpleNamespace(job=job, job_dir=tmp_path))
    assert info["results_seen"] == 3 and [r["kernel"] for r in info["results"]] == [
        "a8w8_blockscale_1x128x128_256x16x64x256", "k3", None]


def test_the_live_title_does_not_count_no_kernel_lines_as_what_was_tuned():
    """Issue 27: a good run showed 'tuned so far: 10 shape(s)' listing only 'no kernel' rows while 107 rows were
    tuned: without --batch 1 the tuner prints only its 'No kernel' lines, and those were the count."""
    import re
    out = io.StringIO()
    ui = Ui(tty=True, stream=out)
    info = {"current": "tune", "sub": {"tune": {"status": "running"}},
            "tail": {"step": "tune", "progress": {"done": 280, "total": 288, "pct": 97.2}}}
    _tuning_results(info, (NONE + "\n" + NONE + "\n").encode())
    ui.progress(types.SimpleNamespace(job_id="j"), info)
    ui.stop()
    text = " ".join(re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue()).split())
    assert "tuned so far" not in text and "2 shape(s) found no kernel so far" in text, text
    assert "280/288" in text
    _tuning_results(info, (GEMM + "\n").encode())
    assert info["results_none"] == 2
    ui = Ui(tty=True, stream=out)
    ui.progress(types.SimpleNamespace(job_id="j"), info)
    ui.stop()
    text = " ".join(re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue()).split())
    assert "tuned so far: 1 shape(s) with a kernel, 2 with none" in text
