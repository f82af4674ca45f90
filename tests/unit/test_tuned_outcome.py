"""Which shapes got a row for THIS GPU, and a note for rows tuned on another GPU (never used here)."""

from types import SimpleNamespace

from orchestrator.state import JobState
from orchestrator.steps.compare import tuned_outcome
from orchestrator.variants import get_variant, profile_for

CSV = """gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio
gfx950,256,1,512,7168,ck,8,0,4.8,k1,1.0,1.0,0.0
gfx942,80,64,512,7168,ck,8,0,4.8,k1,1.0,1.0,0.0
gfx942,304,64,512,7168,ck,8,0,4.8,k1,1.0,1.0,0.0
"""


def test_rows_for_other_gpus_do_not_count_and_are_noted(tmp_path):
    job = JobState(job_id="j", node="n", container="c", variant="a8w8_blockscale", created=0.0, request={},
                   facts={"gfx": "gfx950", "cu_num": 256},
                   remote={"tuned_csv": "/x/aiter/configs/a8w8_blockscale_tuned_gemm.csv"},
                   shapes=[{"m": 1, "n": 512, "k": 7168}, {"m": 64, "n": 512, "k": 7168}])
    (tmp_path / "a8w8_blockscale_tuned_gemm.csv").write_text(CSV)
    ctx = SimpleNamespace(job=job, job_dir=tmp_path,
                          variant=get_variant("a8w8_blockscale").resolve(profile_for((0, 1, 20))))
    out = tuned_outcome(ctx)
    assert out["tuned"] == [{"m": 1, "n": 512, "k": 7168}]
    assert out["no_kernel"] == [{"m": 64, "n": 512, "k": 7168}]
    assert out["rows_after"] == 3
    [note] = job.notes
    assert "2 row(s)" in note and "gfx942/cu_num=80" in note and "gfx942/cu_num=304" in note
