"""`tune-remote status/logs/--help` start fast: the heavy libraries load only in the commands that use them."""

import json
import subprocess
import sys

HEAVY = ("pandas", "numpy", "jinja2", "fabric", "paramiko", "invoke")


def test_cli_import_and_status_leave_heavy_libraries_unloaded(tmp_path):
    code = (
        "import sys, json\n"
        "from click.testing import CliRunner\n"
        "from orchestrator.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['--workspace', {str(tmp_path)!r}, 'status', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []
