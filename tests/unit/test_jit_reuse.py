"""Issue 26: the arms reuse the live modules their table does not feed (a shell loop run as the node runs it)."""

import os
import subprocess

from orchestrator.steps.prepare import _unchanged_modules


def test_unchanged_live_modules_are_copied_the_fed_and_tune_modules_are_not(tmp_path):
    live, jit = tmp_path / "live dir", tmp_path / "jit"
    live.mkdir()
    jit.mkdir()
    for n in ("module_gemm_a8w8_blockscale", "module_aiter_enum", "module_moe_ck2stages_x",
              "module_gemm_a8w8_blockscale_tune"):
        (live / f"{n}.so").write_text(n)
    line = _unchanged_modules(str(live), ["module_gemm_a8w8_blockscale"], str(jit))
    assert subprocess.run(["sh", "-c", line]).returncode == 0
    assert sorted(os.listdir(jit)) == ["module_aiter_enum.so", "module_moe_ck2stages_x.so"]


def test_an_empty_live_dir_copies_nothing_and_succeeds(tmp_path):
    (tmp_path / "jit").mkdir()
    line = _unchanged_modules(str(tmp_path / "none"), [], str(tmp_path / "jit"))
    assert subprocess.run(["sh", "-c", line]).returncode == 0 and not os.listdir(tmp_path / "jit")
