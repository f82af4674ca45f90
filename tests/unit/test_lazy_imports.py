"""`tune-remote status/logs/--help` start fast: the heavy libraries load only in the commands that use them."""

import json
import subprocess
import sys

HEAVY = ("pandas", "numpy", "jinja2", "fabric", "paramiko", "invoke", "sqlalchemy")   # sqlalchemy: the store (issue 39)


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


def test_a_job_meets_its_node_before_pandas_and_jinja2_load():
    """`run` imports the engine and the steps before discover (the first remote step); pandas and jinja2
    load in warm.warm_up's thread once the pipeline runs, and at the latest when compare/report import them."""
    code = (
        "import sys, json\n"
        "import orchestrator.cli.jobs, orchestrator.engine as e\n"
        "for step in ('discover', 'shapes', 'prepare', 'remote'):\n"
        "    e.step_func(step)\n"
        f"print(json.dumps(sorted(m for m in ('pandas', 'numpy', 'jinja2') if m in sys.modules)))\n"
        "e.step_func('compare')\n"
        "print(json.dumps('pandas' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-2]) == []
    assert json.loads(out.stdout.splitlines()[-1]) is True


def test_warm_up_loads_the_heavy_libraries_in_a_thread():
    code = (
        "import sys, threading\n"
        "import orchestrator.warm as e\n"
        "e.warm_up()\n"
        "[t.join() for t in threading.enumerate() if t.name == 'tune-remote-warm-up']\n"
        "print(all(m in sys.modules for m in e.WARM_UP_MODULES))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "True"
