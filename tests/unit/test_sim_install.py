"""Layout of a simulated AITER node: pip metadata, install modes, rocm-smi/rocminfo, torch stand-in."""

import json
import re

import pytest

from orchestrator.sim import SimSpec, install
from orchestrator.sim.localnode import run

from .test_sim_common import py


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("simnodes")
    return {
        "dev": install(base / "dev", SimSpec()),
        "inst": install(base / "inst", SimSpec(install_mode="install")),
        "legacy_aiter": install(base / "legacy", SimSpec(profile="legacy", pip_name="aiter")),
        "legacy_inst": install(base / "legacy_inst", SimSpec(profile="legacy", install_mode="install",
                                                             pip_name="aiter", gfx="gfx942", cu_num=304,
                                                             busy_gpus=())),
    }


def test_env_contract(nodes):
    inst = nodes["dev"]
    assert inst.env["PATH"] == f"{inst.target_dir}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert inst.aiter_root == f"{inst.target_dir}/aiter" and inst.version == "0.1.20"
    assert nodes["inst"].aiter_root == f"{nodes['inst'].target_dir}/site-packages"
    assert nodes["legacy_aiter"].version == "0.1.11"


def test_target_dir_paths(tmp_path):
    inst = install(tmp_path / "h", SimSpec(), target_dir="/opt/aiter-sim")
    assert inst.aiter_root == "/opt/aiter-sim/aiter" and inst.env["PYTHONPATH"].startswith("/opt/aiter-sim/")
    du = json.loads(next((tmp_path / "h" / "pylib").glob("*.dist-info")).joinpath("direct_url.json").read_text())
    assert du == {"url": "file:///opt/aiter-sim/aiter", "dir_info": {"editable": True}}
    assert inst.host_path("/opt/aiter-sim/sim/control.json") == str(tmp_path / "h" / "sim" / "control.json")


def test_pip_show_editable(nodes):
    inst = nodes["dev"]
    r = run(inst, ["/usr/bin/python3", "-m", "pip", "show", "amd-aiter"])
    assert r.returncode == 0, r.stderr
    assert "Name: amd-aiter" in r.stdout and "Version: 0.1.20" in r.stdout
    assert f"Editable project location: {inst.aiter_root}" in r.stdout
    f = run(inst, ["/usr/bin/python3", "-m", "pip", "show", "-f", "amd-aiter"])
    assert "Files:" in f.stdout and "direct_url.json" in f.stdout
    r = py(inst, "-c", "import aiter,os;d=os.path.dirname(aiter.__file__);print(d);print(open(d+'/install_mode').read())")
    assert r.stdout.split() == [f"{inst.aiter_root}/aiter", "develop"]
    for d in ("csrc", "op_tests", "aiter/configs"):
        assert (inst.host_path(inst.aiter_root) + "/" + d)
    assert run(inst, ["test", "-d", f"{inst.aiter_root}/op_tests"]).returncode == 0


def test_pip_show_installed(nodes):
    inst = nodes["inst"]
    r = run(inst, ["/usr/bin/python3", "-m", "pip", "show", "-f", "amd-aiter"])
    assert r.returncode == 0, r.stderr
    assert "Editable project location" not in r.stdout
    assert f"Location: {inst.aiter_root}" in r.stdout
    assert "aiter/configs/a8w8_blockscale_tuned_gemm.csv" in r.stdout
    assert "aiter_meta/csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py" in r.stdout
    r = py(inst, "-c", "import aiter,os;print(open(os.path.dirname(aiter.__file__)+'/install_mode').read())")
    assert r.stdout.strip() == "install"
    assert run(inst, ["test", "-e", f"{inst.aiter_root}/op_tests"]).returncode == 1


def test_legacy_pip_name(nodes):
    inst = nodes["legacy_aiter"]
    r = run(inst, ["/usr/bin/python3", "-m", "pip", "show", "aiter"])
    assert r.returncode == 0 and "Name: aiter" in r.stdout and "Version: 0.1.11" in r.stdout
    assert "Editable project location:" in r.stdout
    assert run(inst, ["/usr/bin/python3", "-m", "pip", "show", "amd-aiter"]).returncode != 0
    r = run(nodes["legacy_inst"], ["/usr/bin/python3", "-m", "pip", "show", "aiter"])
    assert "Name: aiter" in r.stdout and "Editable project location" not in r.stdout


def test_rocm_smi_and_rocminfo(nodes):
    inst = nodes["dev"]
    r = run(inst, "rocm-smi --showuse")
    assert r.returncode == 0
    use = {int(g): int(u) for g, u in re.findall(r"GPU\[(\d+)\]\s*:\s*GPU use \(%\):\s*(\d+)", r.stdout)}
    assert use == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 98, 7: 98}
    assert "% time GPU is busy" in r.stdout and "End of ROCm SMI Log" in r.stdout
    info = run(inst, "rocminfo").stdout
    assert re.search(r"\b(gfx\w+)\b", info).group(1) == "gfx950"
    cus = []
    for agent in re.split(r"Agent\s*\d+", info):
        dt = re.search(r"Device Type\s*:\s*(\S+)", agent)
        if dt and "GPU" in dt.group(1):
            cus.append(int(re.search(r"Compute Unit\s*:\s*(\d+)", agent).group(1)))
    assert cus == [256] * 8
    assert "Device Type:             CPU" in info
    other = run(nodes["legacy_inst"], "rocminfo").stdout
    assert re.search(r"\b(gfx\w+)\b", other).group(1) == "gfx942"
    assert re.findall(r"GPU use \(%\):\s*(\d+)", run(nodes["legacy_inst"], "rocm-smi --showuse").stdout) == ["0"] * 8


def test_torch_stand_in(nodes):
    inst = nodes["dev"]
    code = ("import torch;print(torch.cuda.device_count(), torch.cuda.get_device_properties(0).multi_processor_count,"
            " torch.bfloat16, torch.float8_e4m3fn)")
    assert py(inst, "-c", code).stdout.split() == ["8", "256", "torch.bfloat16", "torch.float8_e4m3fn"]
    assert py(inst, "-c", code, env={"HIP_VISIBLE_DEVICES": "0,1,2,3,4,5"}).stdout.split()[0] == "6"


def test_scripts_are_profile_clean(nodes):
    """No `#@` preprocessor markers survive; per-version files exist only where they should."""
    for key in ("dev", "legacy_aiter"):
        inst = nodes[key]
        r = run(inst, ["grep", "-rl", "^#@ ", inst.aiter_root])
        assert r.stdout == ""
    leg = "csrc/ck_gemm_a8w8_blockscale_bpreshuffle/gemm_a8w8_blockscale_bpreshuffle_tune.py"
    assert run(nodes["legacy_aiter"], ["test", "-f", leg]).returncode == 0
    assert run(nodes["dev"], ["test", "-e", leg]).returncode == 1
    cur = run(nodes["dev"], ["head", "-1", "aiter/configs/a8w8_blockscale_tuned_gemm.csv"]).stdout
    old = run(nodes["legacy_aiter"], ["head", "-1", "aiter/configs/a8w8_blockscale_tuned_gemm.csv"]).stdout
    assert cur.startswith("gfx,cu_num,M,N,K,libtype,") and old.startswith("cu_num,M,N,K,libtype,")


def test_the_newest_profile_reports_a_wheel_style_version_and_discover_reads_the_release(tmp_path):
    """after-v0.1.20 §1: pip versions now look like 0.1.NN[.postK]+rocmX.Y; the test bed's newest node has one."""
    from orchestrator.sim import SimSpec, install
    from orchestrator.steps.report import _version_text
    from orchestrator.variants import format_version, is_dev_build, parse_version
    inst = install(tmp_path / "n", SimSpec(profile="newest"))
    [meta] = (tmp_path / "n").rglob("*.dist-info/METADATA")
    raw = next(line.split(": ", 1)[1] for line in meta.read_text().splitlines() if line.startswith("Version: "))
    assert raw == "0.1.29.post1+rocm10.1" and inst.version == "0.1.29"
    assert format_version(parse_version(raw)) == "0.1.29" and not is_dev_build(raw)
    assert _version_text({"version": "0.1.29", "version_raw": raw}) == "0.1.29 (0.1.29.post1+rocm10.1)"
    assert _version_text({"version": "0.1.20", "version_raw": "0.1.20"}) == "0.1.20"
