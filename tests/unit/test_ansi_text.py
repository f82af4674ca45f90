"""One ANSI and line-prefix stripper for the laptop's parsers and the node's (review D-10; issue 9):
orchestrator/shapelib/text.py, used by every call site."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HIDE, SHOW = "\x1b[?25l", "\x1b[?25h"     # tqdm/rich cursor hide/show: CSI private mode


def test_strip_ansi_covers_private_modes_osc_and_two_char_escapes():
    from orchestrator.shapelib.text import strip_ansi, strip_prefix
    osc = "\x1b]0;title\x07c\x1b]8;;http://x\x1b\\"
    assert strip_ansi(f"{HIDE}a\x1b[1;32mb\x1b[0m{osc}d\x1b7e{SHOW}") == "abcde"
    assert strip_ansi("plain") == "plain"
    for line in ("(Worker_TP0 pid=1) [aiter] x", "[2026-02-17 23:52:11 TP4] x", "[aiter INFO] x",
                 "(APIServer pid=7) [2026-02-17 23:52:11] [aiter] x"):
        assert strip_prefix(line) == "x", line


def test_a_summary_row_behind_a_cursor_hide_is_kept():
    from orchestrator.parsing.bench import parse_markdown_tables
    log = ("[aiter] test_gemm_a8w8 summary (markdown):\n"
           "|    |   m |   n |   k |   ck us |\n"
           "|---:|----:|----:|----:|--------:|\n"
           f"{HIDE}|  0 |  16 | 512 | 256 |    5.1 |\n"
           f"(Worker_TP0 pid=1) \x1b[32m|  1 |  32 | 512 | 256 |    6.2 |\x1b[0m{SHOW}\n")
    rows = parse_markdown_tables(log)
    assert [(r["m"], r["ck us"]) for r in rows] == [(16.0, 5.1), (32.0, 6.2)]


def test_offline_shapes_reads_a_miss_line_with_a_cursor_hide(tmp_path, capsys):
    from orchestrator.cli import main
    log = tmp_path / "server.log"
    log.write_text(f"(Worker_TP0 pid=1) [aiter] shape is M:16, N:1536, K:7168, {HIDE}not found tuned config "
                   f"in /x/a8w8_blockscale_tuned_gemm.csv, will use default config!{SHOW}\n")
    capsys.readouterr()
    assert main(["shapes", str(log), "--json"]) == 0
    out = capsys.readouterr()
    assert "not understood" not in out.err
    assert json.loads(out.out) == {"a8w8_blockscale": [{"m": 16, "n": 1536, "k": 7168}]}


def test_ninja_and_tuner_lines_lose_every_escape():
    from orchestrator.parsing.ninjalog import build_lines
    from orchestrator.parsing.tuneresults import parse_line
    got = build_lines(f"{HIDE}[aiter] \x1b[32mfinish build [module_gemm], cost 12.5s\x1b[0m{SHOW}\n")
    assert [(b["module"], b["cost_s"]) for b in got] == [("module_gemm", 12.5)]
    r = parse_line(f"Tuning result for 'M': 16, 'N': 1536, 'K': 7168 is kernelId=8 {HIDE}kern_a splitK=0, "
                   "4.8us, err_ratio=0.0, tflops=2.61 TFLOPS")
    assert r is not None and r["kernel"] == "kern_a" and r["us"] == 4.8


def test_one_ansi_and_prefix_pattern():
    """text.py is the only module that spells an ANSI escape or a vLLM/SGLang prefix as a regex."""
    spelled = re.compile(r"x1b\\\[|pid=\\d|\\d\{4\}-\\d\\d-\\d\\d")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "orchestrator").rglob("*.py")
                 if p.name != "text.py" and spelled.search(p.read_text())]
    assert offenders == []
