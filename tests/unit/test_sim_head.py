"""The `head` simulated profile (AITER v0.1.30 with the HEAD forms of aiter-december-2026.md): newest plus more."""

from pathlib import Path

import pytest

from orchestrator.sim import PROFILES, SimSpec, install, is_newest, preprocess


def test_head_is_newest_and_more(tmp_path):
    assert PROFILES["head"] == "0.1.30" and is_newest("head") and is_newest("newest") and not is_newest("current")
    text = "a\n#@ if newest\nb\n#@ endif\n#@ if head\nc\n#@ endif\n#@ if !head\nd\n#@ endif\n"
    assert preprocess(text, "head") == "a\nb\nc\n"
    assert preprocess(text, "newest") == "a\nb\nd\n"


def test_head_node_has_the_newest_files(tmp_path):
    head = install(tmp_path / "h", SimSpec(profile="head"))
    new = install(tmp_path / "n", SimSpec(profile="newest"))
    assert head.version == "0.1.30"
    assert list(Path(head.aiter_root).parent.glob("pylib/amd_aiter-0.1.30+rocm10.1.dist-info"))
    for rel in ("op_tests/tuning_tests", "op_tests/test_gemm_a8w8_mxfp8_bpreshuffle.py"):
        assert (Path(head.aiter_root) / rel).exists() and (Path(new.aiter_root) / rel).exists()


def test_only_head_ships_the_capture_module(tmp_path):
    head = install(tmp_path / "h", SimSpec(profile="head"))
    new = install(tmp_path / "n", SimSpec(profile="newest"))
    assert (Path(head.package_dir) / "utility" / "untuned_shapes.py").exists()
    assert not (Path(new.package_dir) / "utility" / "untuned_shapes.py").exists()


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_package_says_its_profiles_version(tmp_path, profile):
    inst = install(tmp_path / profile, SimSpec(profile=profile))
    src = (Path(inst.package_dir) / "__init__.py").read_text()
    assert src.count("__version__ = ") == 1 and f'__version__ = "{PROFILES[profile]}"' in src
