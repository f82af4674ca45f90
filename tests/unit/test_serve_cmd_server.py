"""The server a --serve-cmd starts (issue 36): read from the shell line and the container's environment, it is
named like a running server when it would never read the tuned rows (vLLM without VLLM_ROCM_USE_AITER=1,
vllm#56945; an AITER_CONFIG_* that lists other files, sglang#37072)."""

from __future__ import annotations

from orchestrator.serving import serve_cmd_server
from orchestrator.steps.servers import server_notes

TABLE = "/opt/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv"
FMOE = "/opt/aiter/aiter/configs/tuned_fmoe.csv"


def _notes(cmd, env=None, family="gemm", env_name="AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", table=TABLE):
    s = serve_cmd_server(cmd, env or {})
    return server_notes([s] if s else [], family, env_name, table, "/opt/aiter")


def test_a_vllm_serve_cmd_without_the_switch_is_named():
    [line] = _notes("vllm serve /models/dsv3 --tensor-parallel-size 8 & sleep 60; python bench.py")
    assert line.startswith("the vLLM server --serve-cmd starts runs without VLLM_ROCM_USE_AITER=1")
    assert "vllm#56945" in line and "in --serve-cmd" in line


def test_the_switch_from_the_line_or_the_container_counts_and_env_u_removes_it():
    assert _notes("VLLM_ROCM_USE_AITER=1 vllm serve /m") == []
    assert _notes("export VLLM_ROCM_USE_AITER=1; python -m vllm.entrypoints.openai.api_server --model m") == []
    assert _notes("vllm serve /m", {"VLLM_ROCM_USE_AITER": "1"}) == []
    assert len(_notes("env -u VLLM_ROCM_USE_AITER vllm serve /m", {"VLLM_ROCM_USE_AITER": "1"})) == 1
    [line] = _notes("VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_LINEAR=0 vllm serve /m")
    assert "VLLM_ROCM_USE_AITER_LINEAR=0" in line


def test_an_sglang_serve_cmd_whose_config_replaces_the_shipped_set_is_named():
    [line] = _notes("AITER_CONFIG_FMOE=/data/mine.csv python3 -m sglang.launch_server --model m",
                    family="moe", env_name="AITER_CONFIG_FMOE", table=FMOE)
    assert line.startswith("the SGLang server --serve-cmd starts sets AITER_CONFIG_FMOE=/data/mine.csv")
    assert "sglang#37072" in line
    assert _notes(f"AITER_CONFIG_FMOE={FMOE}:/data/mine.csv python3 -m sglang.launch_server",
                  family="moe", env_name="AITER_CONFIG_FMOE", table=FMOE) == []


def test_a_line_that_starts_no_known_server_or_cannot_be_read_says_nothing():
    assert serve_cmd_server("python3 -m aiter._sim.serve --nk 7168,2048", {}) is None
    assert serve_cmd_server('echo "unbalanced', {}) is None
    assert serve_cmd_server(None, {}) is None
