"""`pip install .` then `tune-remote demo` anywhere: everything the demo needs must ship in the wheel."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _clean_source(dest: Path) -> list[str]:
    """The tracked files only, as a fresh clone has them (no egg-info or build/ to hide a gap)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                           ).stdout.decode().split("\0")
    for f in filter(None, files):
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)
    return [f for f in files if f.startswith("orchestrator/")]


def test_wheel_ships_every_package_file_and_the_demo_runs_from_it(tmp_path):
    src = tmp_path / "src"
    tracked = _clean_source(src)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
                   check=True, capture_output=True, timeout=600)
    [wheel] = wheels.glob("tune_remote-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in tracked if f not in names]
    assert not missing, missing
    assert "orchestrator/nodeside/pipeline.sh" in names
    assert any(n.startswith("orchestrator/sim/tree/op_tests/") for n in names)
    assert "orchestrator/templates/report.html.j2" in names
    # install it alone (deps come from this environment) and run the demo from an unrelated directory
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "TUNE_REMOTE_POLL_S": "0.05"}
    which = subprocess.run([sys.executable, "-c", "import orchestrator; print(orchestrator.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert which.startswith(str(site))
    cp = subprocess.run([sys.executable, "-m", "orchestrator", "-q", "demo"], cwd=work, env=env,
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr
    [job] = [d for d in (work / "tune-workspace").iterdir() if (d / "state.json").is_file()]
    assert (job / "report.md").is_file() and (job / "comparison.csv").is_file()


def test_every_helper_module_is_pushed_and_the_bundle_runs_alone(tmp_path):
    """Every file of the node-side package and of the shape library it imports is pushed (no list kept by
    hand), and the pushed copy runs alone, every module of it importable there."""
    import io
    import json
    import tarfile

    from orchestrator.remote.detached import ENTRY, _bundle, _digest

    # the helper dir is named by the paths too: a copy pushed with another layout is never reused
    assert _digest([("orchestrator/nodeside/common.py", b"x")]) != _digest([("common.py", b"x")])

    on_disk = {str(p.relative_to(ROOT)) for pkg in ("nodeside", "shapelib")
               for p in (ROOT / "orchestrator" / pkg).iterdir() if p.is_file() and p.suffix in (".py", ".sh")}
    _, tarball = _bundle()
    tar = tarfile.open(fileobj=io.BytesIO(tarball))
    assert {m.name for m in tar.getmembers() if m.isfile()} == on_disk | {"orchestrator/__init__.py"}
    assert all(m.mode == 0o755 for m in tar.getmembers() if m.isdir())
    tar.extractall(tmp_path)
    mods = sorted(n[:-3].replace("/", ".") for n in on_disk if n.endswith(".py") and n != ENTRY)
    cp = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                         "[__import__(m) for m in sys.argv[2:]]; print(sys.modules['orchestrator'].__file__)",
                         str(tmp_path), *mods], capture_output=True, timeout=60, cwd=tmp_path)
    assert cp.returncode == 0 and cp.stdout.decode().startswith(str(tmp_path)), cp.stderr.decode()
    out = subprocess.run([sys.executable, "-I", str(tmp_path / ENTRY), "version"], input=b"{}",
                         capture_output=True, timeout=60, cwd=tmp_path)
    answer = json.loads(out.stdout)
    assert answer["ok"] and "launch" in answer["ops"] and "discover" in answer["ops"], out.stderr
