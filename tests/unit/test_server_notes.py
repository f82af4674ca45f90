"""servers.server_notes / proctree._server_kind: which running servers would never read what a job tunes."""

from __future__ import annotations

from orchestrator.nodeside import proctree
from orchestrator.steps.servers import server_notes

TABLE = "/opt/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv"


def _notes(env, kind="vllm", family="gemm", env_name="AITER_CONFIG_GEMM_A8W8_BLOCKSCALE"):
    return server_notes([{"pid": 7, "kind": kind, "env": env}], family, env_name, TABLE, "/opt/aiter")


def test_vllm_without_the_master_switch_never_reads_a_row():
    [line] = _notes({})
    assert "pid 7" in line and "VLLM_ROCM_USE_AITER=1" in line and "vllm#56945" in line
    assert len(_notes({"VLLM_ROCM_USE_AITER": "0"})) == 1


def test_vllm_with_aiter_on_reads_rows_unless_that_half_is_off():
    assert _notes({"VLLM_ROCM_USE_AITER": "1"}) == []
    [line] = _notes({"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_LINEAR": "0"})
    assert "VLLM_ROCM_USE_AITER_LINEAR=0" in line and "GEMM" in line
    assert _notes({"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_LINEAR": "0"}, family="moe",
                  env_name="AITER_CONFIG_FMOE") == []


def test_a_config_list_without_the_table_is_named_and_one_with_it_is_not():
    [line] = _notes({"SGLANG_USE_AITER": "1", "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": "/data/mine.csv"}, kind="sglang")
    assert "SGLang server" in line and "sglang#37072" in line and TABLE in line
    assert _notes({"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": f"/data/mine.csv:{TABLE}"}, kind="sglang") == []
    assert _notes({"AITER_CONFIG_GEMM_A8W8_BLOCKSCALE": "aiter/configs/a8w8_blockscale_tuned_gemm.csv"},
                  kind="sglang") == []                               # relative: against the aiter root
    assert server_notes(None, "gemm", "X", TABLE) == []


def test_a_server_that_tunes_moe_misses_itself_is_named():
    moe = dict(family="moe", env_name="AITER_CONFIG_FMOE")
    [line] = _notes({"VLLM_ROCM_USE_AITER": "1", "AITER_ONLINE_TUNE": "1"}, **moe)
    assert "AITER_ONLINE_TUNE=1" in line and TABLE in line and "overwritten" in line
    [line] = _notes({"SGLANG_USE_AITER": "1", "AITER_ONLINE_TUNE": "1"}, kind="sglang", **moe)
    assert "SGLang server" in line and "gemm_moe_tune.py --last" in line
    assert _notes({"VLLM_ROCM_USE_AITER": "1", "AITER_ONLINE_TUNE": "true"}, **moe) == []   # upstream: == "1"
    assert _notes({"VLLM_ROCM_USE_AITER": "1", "AITER_ONLINE_TUNE": "1"}) == []            # GEMM: no online tuning
    [line] = _notes({"AITER_ONLINE_TUNE": "1"}, **moe)          # vLLM without AITER: never calls fused_moe at all
    assert "VLLM_ROCM_USE_AITER=1" in line and "ONLINE" not in line


def test_server_kinds_from_their_command_lines():
    kind = proctree._server_kind       # the node helper's module, as the node imports it
    assert kind(["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "/models/x"]) == "vllm"
    assert kind(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x"]) == "vllm"
    assert kind(["python3", "-m", "sglang.launch_server", "--model-path", "x"]) == "sglang"
    assert kind(["python3", "op_tests/test_gemm_a8w8_blockscale.py"]) is None
    assert kind(["python3", "-c", "import vllm"]) is None
