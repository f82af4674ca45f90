"""parsing.bench: every fixture under tests/fixtures/bench/ gives exactly its .expected.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.parsing.bench import bench_results, parse_bench_log, parse_markdown_tables, parse_perf_lines
from orchestrator.variants import VARIANTS, get_variant, parse_version, profile_for

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
CASES = json.loads((BENCH / "cases.json").read_text())
IDS = [f"{c['file'][:-4]}-{c['variant']}" for c in CASES]


def _bench(case):
    return get_variant(case["variant"]).resolve(profile_for(parse_version(case["version"]))).bench


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fixture_exact(case):
    bench = _bench(case)
    name = case["file"]
    expected = json.loads((BENCH / f"{name[:-4]}.{case['variant']}.expected.json").read_text())
    rows = parse_bench_log((BENCH / name).read_text(), bench)
    assert rows == expected["rows"]
    assert bench_results(rows, bench) == expected["results"]


def test_every_variant_output_style_has_a_fixture():
    styles = set()
    for case in CASES:
        styles.add((case["variant"], _bench(case).output))
    for v in VARIANTS.values():
        if v.bench is None:  # a6w6: op_tests/test_gemm_a6w6.py's output is not in the reference
            continue
        assert any(name == v.name for name, _ in styles), v.name
    assert ("batched_a8w8", "perf_lines") in styles


def test_markdown_columns_as_printed_and_nan():
    rows = parse_markdown_tables((BENCH / "gemm_a8w8_blockscale_head.log").read_text())
    assert "ck TFLOPS" in rows[0] and "asm/ck" in rows[0]
    assert rows[0]["triton us"] is None
    assert rows[0]["ck_preshuffle"] == "False"
    assert rows[-1]["ck us"] is None


def test_two_tables_and_prefixed_table_lines_last_row_wins():
    bench = get_variant("a8w8_blockscale").bench
    rows = parse_bench_log((BENCH / "gemm_a8w8_blockscale_v0112_two_runs.log").read_text(), bench)
    assert len(rows) == 4      # the cut-off row (3 cells) is skipped
    res = bench_results(rows, bench)
    assert res[1] == {"key": {"m": 72, "n": 2112, "k": 7168}, "value": 271.99}


def test_row_filter():
    bench = dataclasses.replace(get_variant("a8w8_blockscale_bpreshuffle").bench,
                                row_filter={"ck_preshuffle": "True"})
    rows = parse_bench_log((BENCH / "gemm_a8w8_blockscale_head.log").read_text(), bench)
    assert bench_results(rows, bench) == [
        {"key": {"m": 16, "n": 1536, "k": 7168}, "value": 40.21},
        {"key": {"m": 8192, "n": 1536, "k": 7168}, "value": None},
    ]
    bf16 = get_variant("batched_bf16").bench
    rows = parse_bench_log((BENCH / "batched_gemm_bf16_head.log").read_text(), bf16)
    assert [r["key"]["b"] for r in bench_results(rows, bf16)] == [16, 8]
    # a filter column missing from the output (older AITER) keeps the row
    old = [{"b": 16.0, "m": 1.0, "n": 1024.0, "k": 4096.0, "ck us": 3.0}]
    assert bench_results(old, bf16) == [{"key": {"b": 16, "m": 1, "n": 1024, "k": 4096}, "value": 3.0}]


def test_a4w4_without_metric_columns_gives_none():
    bench = get_variant("a4w4_blockscale").bench
    rows = parse_bench_log((BENCH / "gemm_a4w4_gfx942_args_only.log").read_text(), bench)
    assert [r["value"] for r in bench_results(rows, bench)] == [None, None]


def test_perf_lines_exact_keys():
    rows = parse_perf_lines((BENCH / "batched_gemm_a8w8_perf.log").read_text())
    assert rows[0] == {"b": 16, "m": 1, "n": 1280, "k": 8192, "dtype": "torch.bfloat16",
                       "torch avg": 123.45, "ck avg": 12.34, "uplift": 900.4}
    assert rows[2]["uplift"] == -4.7
    legacy_bf16 = get_variant("batched_bf16").resolve(profile_for((0, 1, 16))).bench
    assert legacy_bf16.output == "perf_lines"
    assert len(parse_bench_log((BENCH / "batched_gemm_a8w8_perf.log").read_text(), legacy_bf16)) == 3


def test_q_dtype_key_normalised():
    bench = get_variant("a8w8").bench
    rows = [{"m": 1.0, "n": 2.0, "k": 3.0, "quantDtype": "i8", "ck us": 1.5},
            {"m": 1.0, "n": 2.0, "k": 3.0, "quantDtype": "float8_e4m3fnuz", "ck us": float("nan")}]
    assert bench_results(rows, bench) == [
        {"key": {"m": 1, "n": 2, "k": 3, "q_dtype_w": "torch.int8"}, "value": 1.5},
        {"key": {"m": 1, "n": 2, "k": 3, "q_dtype_w": "torch.float8_e4m3fnuz"}, "value": None},
    ]


def test_unknown_output_style():
    with pytest.raises(ValueError):
        parse_bench_log("", dataclasses.replace(get_variant("a8w8").bench, output="xml"))


def test_pre_0110_pandas_repr_summary_wrapped_blocks_and_spaced_names():
    # v0.1.5-v0.1.9 op_tests print `summary:\n{df}` (a pandas repr); the fixture is pandas' own repr at
    # display.width 80, wrapped into two blocks joined by index; 'ck us' keeps its space
    text = (BENCH / "gemm_a8w8_blockscale_v019_pandas.log").read_text()
    assert parse_markdown_tables(text) == []
    rows = parse_bench_log(text, get_variant("a8w8_blockscale").bench)
    assert len(rows) == 4 and rows[1]["ck us"] == 13.01 and rows[1]["asm TFLOPS"] == 62.94
    assert rows[0]["asm us"] is None and rows[2]["ck_preshuffle"] == "True"
    # the tuner's 'Tuning results Summary:' banner is not a table
    assert parse_bench_log("[aiter] ============= Tuning results Summary: ==============\n",
                           get_variant("a8w8").bench) == []
