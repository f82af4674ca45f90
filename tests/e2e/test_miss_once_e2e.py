"""Once per process, per variant (issue 36), end to end: a node whose a8w8 runtime logs a miss once per shape
per process (its lookup lru_cached, as upstream has it) but whose gemm_op_a4w4.py prints a line per lookup (the
lookup's cache dropped: a local patch) weighs the same server log's shapes differently per variant: a8w8_blockscale
by the processes that logged a shape, a4w4_blockscale by its lines."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.nodeside.probe import miss_once_of

pytestmark = pytest.mark.e2e

LINE = ("{who} [aiter] shape is M:64, N:{n}, K:{k}, not found tuned config in /tmp/aiter_configs/"
        "{table}_tuned_gemm.csv, will use default config!\n")
A, B = (4096, 512), (1536, 7168)     # A: one process, ten lines; B: four ranks, a line each


@pytest.fixture(scope="module")
def node(testbed):
    n = testbed.create_node(("current",), proxy=False)
    for c in n.containers.values():
        path = Path(c.host_path(f"{c.aiter_root}/aiter/ops/gemm_op_a4w4.py"))
        src, count = re.subn(r"^@functools\.lru_cache\(maxsize=1024\)\n(def get_GEMM_config\()", r"\1",
                             path.read_text(), flags=re.M)
        assert count == 1 and miss_once_of(src) is False
        path.write_text(src)
    yield n
    testbed.destroy_node(n)


def _log(tmp_path, table):
    text = LINE.format(who="(Worker_TP0 pid=100)", n=A[0], k=A[1], table=table) * 10
    text += "".join(LINE.format(who=f"(Worker_TP{r} pid={100 + r})", n=B[0], k=B[1], table=table) for r in range(4))
    path = tmp_path / f"{table}.log"
    path.write_text(text)
    return path


def _order(node, tmp_path, capsys, variant, table) -> tuple[list, str]:
    """The shapes the job tuned, in the order it ranked them (state.json), and what it said."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c: {} for c in node.containers}}}}))
    out = io.StringIO()
    capsys.readouterr()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
                   "--variant", variant, "--log", f"local:{_log(tmp_path, table)}", "--m-preset", "logged",
                   "--promote", "none", "--repeats", "1", "--yes", "--job-id", variant])
    text = out.getvalue() + capsys.readouterr().err
    assert rc == 0, text
    job = tmp_path / "ws" / variant
    state = json.loads((job / "state.json").read_text())
    text += "\n".join(state["facts"]["probed"]) + (job / "report.md").read_text()
    return [(s["n"], s["k"]) for s in state["shapes"]], text


def test_each_variants_shapes_are_weighed_by_its_own_runtime_files_rule(node, tmp_path, capsys):
    once, text = _order(node, tmp_path, capsys, "a8w8_blockscale", "a8w8_blockscale")
    assert once and once[0] == B, text                   # four processes before one process's ten lines
    assert "logs a a8w8_blockscale miss once per shape per process" in text
    lines, text = _order(node, tmp_path, capsys, "a4w4_blockscale", "a4w4_blockscale")
    assert lines and lines[0] == A, text                 # its lines: ten before four
    assert "miss once per shape per process" not in text
    assert "miss lines per lookup (gemm_op_a4w4.py)" in text and "miss lines once per process (gemm_op_a8w8.py)" in text
