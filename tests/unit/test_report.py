"""orchestrator.report: every shape rendered, metric direction stated, HTML well-formed and offline."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

import pytest

from orchestrator.report import column_decimals, fmt_pct, fmt_value, render_report, write_report
from orchestrator.outcome.compare import compare

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
NKS = [(1024, 512), (7168, 2048)]
MS = [1, 16, 63, 64, 512, 513, 8192]
MD_RESULTS_HEADER = r"\|\s+m \|\s+n \|\s+k \| before"


class Html(HTMLParser):
    """Collects structure errors, tag counts, attributes and every table's rows of cell texts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: Counter = Counter()
        self.attrs: list[tuple[str, str | None]] = []
        self.doctype = None
        self.tables: list[dict] = []
        self._open_tables: list[dict] = []
        self._cell: list[str] | None = None
        self.ids: list[str] = []

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        if tag == "title" and "svg" not in self.stack:
            self.tags["doc-title"] += 1
        self.attrs.extend(attrs)
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "table":
            t = {"class": a.get("class", ""), "rows": [], "row_classes": [], "cell_classes": []}
            self.tables.append(t)
            self._open_tables.append(t)
        elif tag == "tr" and self._open_tables:
            self._open_tables[-1]["rows"].append([])
            self._open_tables[-1]["row_classes"].append(a.get("class", ""))
            self._open_tables[-1]["cell_classes"].append([])
        elif tag in ("td", "th") and self._open_tables:
            self._cell = []
            self._open_tables[-1]["cell_classes"][-1].append(a.get("class", ""))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags[tag] += 1
        self.attrs.extend(attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"end tag for void element {tag}")
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}>, open: {self.stack[-3:]}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None and self._open_tables:
            self._open_tables[-1]["rows"][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._open_tables.pop()

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def table(self, cls: str) -> dict:
        found = [t for t in self.tables if cls in t["class"].split()]
        assert len(found) == 1, [t["class"] for t in self.tables]
        return found[0]


def parse_html(html: str) -> Html:
    p = Html()
    p.feed(html)
    p.close()
    return p


def results(higher_is_better=True, metric="ck TFLOPS"):
    before, after = [], []
    for n, k in NKS:
        for i, m in enumerate(MS):
            before.append({"key": {"m": m, "n": n, "k": k}, "value": 100.0 + i})
            if (m, n) != (8192, 7168):
                value = (100.0 + i) * (1.1 if i % 3 else 0.95)
                after.append({"key": {"m": m, "n": n, "k": k}, "value": value})
    return compare(before, after, key_columns=("m", "n", "k"), metric=metric,
                   higher_is_better=higher_is_better)


def full_ctx(cmp=None):
    return {
        "generated_at": "2026-03-21T16:05:15Z",
        "tool_version": "0.1.0",
        "job": {"id": "20260321-143022-ab12", "variant": "a8w8_blockscale", "node": "mi355-07",
                "container": "sglang-dev", "started": "2026-03-21T14:30:22Z",
                "finished": "2026-03-21T16:05:15Z", "state": "succeeded"},
        "environment": {"aiter_version": "0.1.20", "pip_name": "amd-aiter", "install_mode": "develop",
                        "aiter_root": "/sgl-workspace/aiter", "gfx": "gfx950", "cu_num": 256,
                        "gpu_count": 8, "free_gpus": [0, 1, 2, 3, 4, 5], "profile": "current"},
        "shapes": {"source": "server log /var/log/sglang/server.log: 2 (N,K) pairs, M sweep",
                   "list": [{"m": m, "n": n, "k": k} for n, k in NKS for m in MS]},
        "bench": {"before_command": "python3 op_tests/test_gemm_a8w8_blockscale.py -m 1 16 -nk 1024,512",
                  "after_command": "AITER_REBUILD=1 python3 op_tests/test_gemm_a8w8_blockscale.py -m 1 16",
                  "env": {"HIP_VISIBLE_DEVICES": "0"}},
        "tuning": {"command": ["python3", "csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py",
                               "-i", "aiter/configs/a8w8_blockscale_untuned_gemm.csv",
                               "-o", "aiter/configs/a8w8_blockscale_tuned_gemm.csv",
                               "--libtype", "both", "--mp", "6", "--timeout", "600"],
                   "flags": {"--mp": 6, "--batch": 100, "--timeout": 600, "--libtype": "both"},
                   "env": {"HIP_VISIBLE_DEVICES": "0,1,2,3,4,5"},
                   "duration_s": 5693.0, "rc": 0, "rows_written": 13,
                   "no_kernel": [{"m": 8192, "n": 7168, "k": 2048}], "partial": True},
        "comparison": cmp if cmp is not None else results(),
        "warnings": ["MoE bypass on this AITER version: "
                     "tuned rows for token*topk<=128 are ignored at runtime"],
        "notes": ["benchmark script choices patched: ran a patched copy"],
        "shape_notes": [{"key": {"m": 1, "n": 1024}, "note": "served by asm heuristics"}],
        "logs": {"bench_before": {"node": "/tmp/tune-remote/jobs/20260321/bench_before.log",
                                  "local": "runs/20260321/bench_before.log"},
                 "tune": {"node": "/tmp/tune-remote/jobs/20260321/tune.log",
                          "local": "runs/20260321/tune.log"}},
        "tuned_csv": {"node_path": "/sgl-workspace/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv",
                      "backup_path": "/tmp/tune-remote/backup/a8w8_blockscale_tuned_gemm.csv.20260321",
                      "rows_added": 13},
    }


@pytest.fixture(scope="module")
def rendered():
    cmp = results()
    md, html = render_report(full_ctx(cmp))
    return cmp, md, html


# ------------------------------------------------------------------ markdown


def md_table_rows(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(header_start, line))
    out = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split(" | ")])
    return out


def test_markdown_has_every_shape_row_with_exact_numbers(rendered):
    cmp, md, _ = rendered
    rows = md_table_rows(md, MD_RESULTS_HEADER)
    assert len(rows) == len(cmp.rows) == len(NKS) * len(MS)
    for cells, (_, r) in zip(rows, cmp.rows.iterrows()):
        assert cells[:3] == [str(r["m"]), str(r["n"]), str(r["k"])]
        assert cells[3] == fmt_value(r["before"], 2) and cells[4] == fmt_value(r["after"], 2)
        assert cells[5] == fmt_pct(r["speedup_pct"])
        assert cells[6] == r["status"]
    # +10 % and -5 % rows, and the shape that has no after value
    assert ["1", "1024", "512", "100.00", "95.00", "-5.00%", "regressed"] == rows[0][:7]
    assert rows[1][5] == "+10.00%"
    last = rows[-1]
    assert last[:7] == ["8192", "7168", "2048", "106.00", "—", "—", "missing"]
    assert "no kernel found by the tuner" in last[7] and "not in after run" in last[7]
    assert "served by asm heuristics" in rows[0][7]


def test_markdown_states_metric_direction_and_formula(rendered):
    _, md, _ = rendered
    assert "ck TFLOPS, higher is better" in md
    assert "(after / before - 1) x 100: positive = faster" in md
    md_us, html_us = render_report(full_ctx(results(False, "ck us")))
    assert "ck us, lower is better" in md_us and "ck us, lower is better" in html_us
    assert "(before / after - 1) x 100: positive = faster" in md_us


def test_markdown_numbers_right_aligned(rendered):
    _, md, _ = rendered
    lines = md.splitlines()
    i = next(i for i, line in enumerate(lines) if re.match(MD_RESULTS_HEADER, line))
    sep = [c.strip() for c in lines[i + 1].strip("|").split("|")]
    assert all(c.endswith(":") for c in sep[:6])          # m n k before after speedup
    assert not sep[6].endswith(":") and not sep[-1].endswith(":")  # status, note
    # report.md's per-shape table is not padded (it must fit a PR comment: issue 27); its other tables are
    table = [line for line in lines[i:i + 2 + len(NKS) * len(MS)]]
    assert len({len(line) for line in table}) > 1 and all(line.startswith("| ") for line in table)


def test_markdown_sections_and_facts(rendered):
    _, md, html = rendered
    for heading in ("## Warnings", "## Notes", "## Job", "## Environment", "## Summary",
                    "## Per (n, k) by size class of m", "## Per-shape results (14 shapes)",
                    "## Shapes with no kernel", "## Tuning", "## More"):
        assert heading in md, heading
    # report.md fits a PR (issue 27): commands, paths, logs and the input shapes are in report.html only
    for heading in ("## Benchmarks", "## Tuned CSV", "## Input shapes", "## Logs"):
        assert heading not in md, heading
    md_text = md
    md = html   # every fact below is still in what a lead reads (table cells checked in report.md)
    for fact in ("0.1.20", "amd-aiter", "develop", "/sgl-workspace/aiter", "gfx950",
                 "gfx950",
                 "0, 1, 2, 3, 4, 5", "--libtype both --mp 6 --timeout 600", "<td>--batch</td><td>100</td>",
                 "HIP_VISIBLE_DEVICES", "0,1,2,3,4,5", "1h 34m 53s", "MoE bypass on this AITER version",
                 "benchmark script choices patched", "/tmp/tune-remote/jobs/20260321/tune.log",
                 "runs/20260321/tune.log", "a8w8_blockscale_tuned_gemm.csv.20260321", "rows added",
                 "AITER_REBUILD=1 python3", "server log /var/log/sglang/server.log",
                 "tuning was partial", "1 shape(s) found no kernel",
                 "1 shape(s) benchmarked before but missing after"):
        assert fact in md, fact
    assert "| cu_num          | 256" in md_text
    md = md_text
    assert md.index("## Warnings") < md.index("## Per-shape results")


def test_markdown_group_table_by_size_class(rendered):
    cmp, md, _ = rendered
    rows = md_table_rows(md, r"\|\s+n \|\s+k \| class")
    assert [r[:3] for r in rows] == [
        [n, k, cls] for n, k in (("1024", "512"), ("7168", "2048"))
        for cls in ("small", "medium", "large", "all")
    ]
    assert [r[3] for r in rows[:3]] == ["1-63", "64-512", ">512"]
    # small = m 1,16,63 -> -5, +10, +10 ; shapes / compared / improved / regressed columns
    assert rows[0][4:8] == ["3", "3", "2", "1"]
    assert rows[0][10] == "+5.00%"
    assert rows[6][4:10] == ["2", "1", "1", "0", "0", "1"]   # large 7168: 8192 missing
    g = cmp.by_group
    assert len(rows) == len(g) + len(cmp.per_group)


def test_markdown_summary_numbers(rendered):
    cmp, md, _ = rendered
    s = cmp.summary
    assert f"| mean speedup                       | {fmt_pct(s['avg_speedup_pct'])}" in md
    assert f"geomean {fmt_pct(s['geomean_speedup_pct'])}" in md
    assert f"{s['shapes']} shapes: {s['improved']} improved, {s['regressed']} regressed" in md


def test_markdown_escapes_pipes_in_cells():
    ctx = full_ctx()
    ctx["environment"]["aiter_version"] = "0.1|20"
    md, _ = render_report(ctx)
    assert "0.1\\|20" in md


# ------------------------------------------------------------------ HTML


def test_html_is_well_formed(rendered):
    cmp, _, html = rendered
    p = parse_html(html)
    assert p.errors == []
    assert p.stack == []
    assert p.doctype and p.doctype.lower() == "doctype html"
    for tag in ("html", "head", "body", "doc-title", "style", "main"):
        assert p.tags[tag] == 1, tag
    # the speedup chart + one before/after chart per (n, k)
    assert p.tags["svg"] == 1 + len({(r["n"], r["k"]) for _, r in cmp.rows.iterrows()})
    assert len(p.ids) == len(set(p.ids))
    for section in ("warnings", "notes", "job", "environment", "summary", "groups", "shapes-results",
                    "no-kernel", "tuning", "benchmarks", "tuned-csv", "input-shapes", "logs"):
        assert section in p.ids, section


def test_html_is_self_contained(rendered):
    _, _, html = rendered
    p = parse_html(html)
    assert p.tags["script"] == 0 and p.tags["link"] == 0 and p.tags["img"] == 0 and p.tags["iframe"] == 0
    assert not [a for a, _ in p.attrs if a in ("src", "href", "srcset", "action") or a.startswith("on")]
    assert "://" not in html
    assert "url(" not in html and "@import" not in html


def test_html_results_table_has_every_shape(rendered):
    cmp, _, html = rendered
    t = parse_html(html).table("results")
    header, body = t["rows"][0], t["rows"][1:]
    assert header[:6] == ["m", "n", "k", "before (ck TFLOPS)", "after (ck TFLOPS)", "speedup %"]
    assert len(body) == len(cmp.rows)
    for cells, cls, (_, r) in zip(body, t["row_classes"][1:], cmp.rows.iterrows()):
        assert cells[:3] == [str(r["m"]), str(r["n"]), str(r["k"])]
        assert cells[5] == fmt_pct(r["speedup_pct"]) and cells[6] == r["status"]
        assert cls == r["status"]
    # numeric cells are right-aligned through the "num" class, text cells are not
    first = t["cell_classes"][1]
    assert all("num" in c.split() for c in first[:6])
    assert "num" not in first[6].split()


def test_html_states_direction_and_escapes_text():
    ctx = full_ctx()
    ctx["warnings"] = ["<script>alert(1)</script> & more"]
    _, html = render_report(ctx)
    assert "ck TFLOPS, higher is better" in html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html
    assert parse_html(html).errors == []


def test_html_group_and_no_kernel_tables(rendered):
    cmp, _, html = rendered
    p = parse_html(html)
    groups = p.table("groups")
    assert len(groups["rows"]) - 1 == len(cmp.by_group) + len(cmp.per_group)
    assert groups["row_classes"].count("total") == len(NKS)
    no_kernel = [t for t in p.tables if t["rows"] and t["rows"][0] == ["#", "m", "n", "k"]]
    assert ["1", "8192", "7168", "2048"] in no_kernel[0]["rows"]


# ------------------------------------------------------------------ robustness


def test_empty_context_renders():
    md, html = render_report({})
    assert "no comparison" in md
    assert "Not reported by the tuning step." in md
    assert parse_html(html).errors == []


def test_comparison_object_and_dict_render_the_same(rendered):
    cmp, md, html = rendered
    md2, html2 = render_report(full_ctx(cmp.to_dict()))
    assert md2 == md and html2 == html


def test_empty_comparison_and_no_kernel_none():
    empty = compare([], [], key_columns=("m", "n", "k"), metric="us", higher_is_better=False)
    ctx = full_ctx(empty)
    ctx["tuning"]["no_kernel"] = []
    ctx["tuning"]["partial"] = False
    md, html = render_report(ctx)
    assert "## Per-shape results (0 shapes)" in md
    assert "None: the tuner found a kernel for every shape." in md
    p = parse_html(html)
    assert p.errors == [] and p.tags["svg"] == 0


def test_moe_report_groups_by_model_dims():
    dims = dict(model_dim=7168, inter_dim=256, expert=256, topk=8)
    before = [{"key": {"token": t, **dims}, "value": 50.0} for t in (1, 64, 1024)]
    after = [{"key": {"token": t, **dims}, "value": 40.0} for t in (1, 64, 1024)]
    cmp = compare(before, after, key_columns=("token", "model_dim", "inter_dim", "expert", "topk"),
                  metric="us", higher_is_better=False)
    md, _ = render_report({"comparison": cmp, "tuning": {"no_kernel": [
        {"token": 64, "model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8,
         "act_type": "ActivationType.Silu", "q_type": "QuantType.per_1x128"}]}})
    assert "## Per (model_dim, inter_dim, expert, topk) by size class of token" in md
    assert "us, lower is better" in md
    rows = md_table_rows(md, r"\| token \|")
    assert [r[0] for r in rows] == ["1", "64", "1024"]
    assert all(r[7] == "+25.00%" for r in rows)
    assert "no kernel found by the tuner" in rows[1][-1] and rows[0][-1] == ""


def test_repeated_runs_column_only_when_needed():
    one = [{"key": {"m": 1, "n": 8, "k": 8}, "value": 10.0}]
    md, _ = render_report({"comparison": compare(one, one, key_columns=("m", "n", "k"), metric="us",
                                                  higher_is_better=False)})
    assert "runs b/a" not in md
    md, _ = render_report({"comparison": compare(one + one, one, key_columns=("m", "n", "k"), metric="us",
                                                  higher_is_better=False)})
    assert "runs b/a" in md and re.search(r"\|\s+2/1 \|", md)


def test_write_report(tmp_path):
    md_path, html_path = write_report(full_ctx(), tmp_path / "out", stem="a8w8_blockscale_report")
    assert md_path.read_text().startswith("# tune-remote report: a8w8_blockscale on mi355-07/sglang-dev")
    assert html_path.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("x, text", [(None, "—"), (0.0, "0"), (12.3456, "12.346"), (123.456, "123.46"),
                                     (12345.67, "12345.7"), (0.012345, "0.01235")])
def test_fmt_value(x, text):
    assert fmt_value(x) == text


def test_column_decimals():
    assert column_decimals([95.0, 1500.0]) == 2
    assert column_decimals([100.0, 1500.0]) == 1
    assert column_decimals([5.2, 1234.5]) == 3
    assert column_decimals([0.0512, 1500.0, None, 0.0]) == 4
    assert column_decimals([None, float("nan")]) is None
    assert fmt_value(1500.0, 4) == "1500.0000"


def test_context_spellings_in_use_are_accepted(tmp_path):
    """The shape orchestrator/steps/report.py builds today: aliases must not lose information."""
    cmp = results()
    csv = cmp.to_csv(tmp_path / "comparison.csv")
    import pandas as pd
    ctx = {
        "job": {"id": "j1", "variant": "a8w8_blockscale", "node": "n1", "container": "c1",
                "started": "2026-03-21 14:30:22", "finished": "2026-03-21 16:05:15", "state": "done"},
        "environment": {"version": "0.1.20", "gfx": "gfx950"},
        "shapes": [{"m": 1, "n": 1024, "k": 512}],
        "shape_sources": ["/var/log/sglang/server.log"],
        "tuning": {"command": "python3 tune.py -i in.csv -o out.csv --mp 6 --timeout 600 --libtype both -v",
                   "env": {"HIP_VISIBLE_DEVICES": "0,1"}, "rc": 0, "partial": False,
                   "started": "2026-03-21 14:40:00", "no_kernel": [], "rows_before": 100, "rows_after": 113},
        "comparison": {"rows": pd.read_csv(csv).to_dict("records"), "summary": cmp.summary},
        "metric": "ck TFLOPS",
        "notes": ["benchmark script choices patched: ran a patched copy"],
        "logs": {"node": {"baseline": "/aiter/tune_logs/a_bench_before.log"}, "local": "runs/j1/logs"},
        "tuned_csv": {"node": "/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv", "backup": "/tmp/bk.csv"},
    }
    md, html = render_report(ctx)
    assert "| AITER version   | 0.1.20" in md
    assert "Source: /var/log/sglang/server.log" in html   # report.md leaves paths and commands to report.html
    assert "| started   | 2026-03-21 14:30:22 " in md          # local time: no zone invented
    assert "| wall time | 1h 34m 53s" in md
    for flag, value in (("--mp", "6"), ("--timeout", "600"), ("--libtype", "both"), ("-v", "(set)")):
        assert re.search(rf"<td[^>]*>{re.escape(flag)}</td>\s*<td[^>]*>{re.escape(value)}</td>", html), flag
    assert "| tuned rows written            | 13" in md
    assert "/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv" in html
    assert "/aiter/tune_logs/a_bench_before.log" in html and "runs/j1/logs/a_bench_before.log" in html
    assert len(md_table_rows(md, MD_RESULTS_HEADER)) == len(cmp.rows)
    assert "ck TFLOPS, higher is better" in md
    assert parse_html(html).errors == []


def test_wide_moe_key_factors_out_constant_columns():
    from orchestrator.variants import MOE_KEY
    base = dict(model_dim=7168, inter_dim=256, expert=256, topk=8, act_type="ActivationType.Silu",
                dtype="torch.bfloat16", q_dtype_a="torch.float8_e4m3fn", q_dtype_w="torch.float8_e4m3fn",
                q_type="QuantType.per_1x128", use_g1u1=1, doweight_stage1=0)
    grid = [(i, t) for i in (256, 512) for t in (1, 128)]
    before = [{"key": {"token": t, **base, "inter_dim": i}, "value": 50.0} for i, t in grid]
    after = [{"key": {"token": t, **base, "inter_dim": i}, "value": 40.0} for i, t in grid]
    cmp = compare(before, after, key_columns=MOE_KEY, metric="us", higher_is_better=False)
    md, html = render_report({"comparison": cmp, "tuning": {"no_kernel": [{"token": 128, **base}]}})
    assert "Same for every shape (columns left out below): `model_dim=7168, expert=256, topk=8, " \
           "act_type=ActivationType.Silu, dtype=torch.bfloat16" in md
    rows = md_table_rows(md, r"\| token \| inter_dim \| before")
    assert [r[:2] for r in rows] == [["1", "256"], ["128", "256"], ["1", "512"], ["128", "512"]]
    assert "no kernel found by the tuner" in rows[1][-1] and rows[3][-1] == ""
    groups = md_table_rows(md, r"\| inter_dim \| class")
    assert [g[:2] for g in groups] == [["256", "small"], ["256", "medium"], ["256", "all"],
                                       ["512", "small"], ["512", "medium"], ["512", "all"]]
    assert parse_html(html).errors == []


def test_the_no_kernel_warning_says_how_aiter_serves_those_shapes():
    """A user read "AITER keeps its default for them" next to such a shape marked improved: AITER serves a
    shape without its own row from its padded-M row where the table has one (aiter-formats: found padded_M)."""
    from orchestrator.report.view import _derived_warnings
    lines = _derived_warnings({}, [{"m": 72, "n": 7168, "k": 2048}], None)
    assert any("padded M" in w and "can still change" in w for w in lines), lines
