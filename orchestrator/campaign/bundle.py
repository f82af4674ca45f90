"""The drive bundle: the orchestrator package as one zip the compute node's own ``python3`` runs
(``python3 drive.zip DIR NODE CONTAINER DOCKER...``), so a Slurm campaign planned while its holders were pending
tunes once Slurm grants them, with no laptop (nodedrive.py; docs/internals.md, "Slurm, pending").

The node path (engine, discover, shapes, prepare, remote) imports only the stdlib and ``orchestrator``: the zip
holds the package's files as installed (sources and the data files the steps read: the node helpers), and a
``__main__`` that unpacks it once beside itself (``pkg-<sha>``: the helpers are read as files) and runs
``orchestrator.campaign.nodedrive``. Made with the stdlib's zipfile, byte-identical for the same sources.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

MIN_PYTHON = (3, 10)     # pyproject's requires-python; the holder checks the node's python3 against it

# the zip's entry point: unpack beside the zip (atomically: two holders may share the filesystem), then run
MAIN = r'''import hashlib, os, shutil, sys, zipfile
if sys.version_info < (3, 10):
    sys.exit("tune-remote node driver: python3 >= 3.10 needed, this is %s" % sys.version.split()[0])
zpath = os.path.abspath(sys.argv[0])
with open(zpath, "rb") as fh:
    sha = hashlib.sha256(fh.read()).hexdigest()[:16]
dest = os.path.join(os.path.dirname(zpath), "pkg-" + sha)
if not os.path.isdir(dest):
    tmp = "%s.tmp%d" % (dest, os.getpid())
    with zipfile.ZipFile(zpath) as z:
        z.extractall(tmp, [n for n in z.namelist() if n.startswith("orchestrator/")])
    try:
        os.rename(tmp, dest)
    except OSError:           # another holder unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
sys.path[0] = dest
from orchestrator.campaign.nodedrive import main
sys.exit(main(sys.argv[1:]))
'''

_SKIP_DIRS = {"__pycache__", "templates", "sim"}   # the report's templates and the test bed's simulator: laptop only


def package_files(root: Path | None = None) -> list[Path]:
    """The installed package's files the node path needs, sorted (every .py and the helpers' data)."""
    root = root or Path(__file__).resolve().parent.parent
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not _SKIP_DIRS & set(rel.parts[:-1]) and p.suffix not in (".pyc", ".pyo"):
            out.append(p)
    return out


def package_zip(root: Path | None = None) -> bytes:
    """The bundle's bytes: ``__main__.py`` and ``orchestrator/...``, with fixed timestamps."""
    root = root or Path(__file__).resolve().parent.parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("__main__.py", (1980, 1, 1, 0, 0, 0)), MAIN)
        for p in package_files(root):
            info = zipfile.ZipInfo(f"orchestrator/{p.relative_to(root).as_posix()}", (1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    return buf.getvalue()
