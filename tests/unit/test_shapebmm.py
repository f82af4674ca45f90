"""The MXFP8 BMM runtime's miss line as a shape source (shapelib/shapebmm.py): both forms of
lookup_mxscale_bmm_config's logger.info (stored ROCm/aiter aiter/ops/opus/policy.py), the w_scale block a key
column, through the per-line and the file (bytes prefilter) parsers alike."""

from pathlib import Path

import pytest

from orchestrator.shapelib import shapelog
from orchestrator.shapelib.shapebmm import BMM_VARIANT, parse_miss
from orchestrator.shapelib.shapepar import parse_files

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "bmm_mxscale_misses.log"
EXPECTED = [
    {"b": 4, "m": 16, "n": 2048, "k": 8192, "w_scale_block": "32x32"},
    {"b": 4, "m": 16, "n": 2048, "k": 8192, "w_scale_block": "128x128"},    # same shape, the other block
    {"b": 16, "m": 64, "n": 1024, "k": 4096, "w_scale_block": "1x32"},
    {"b": 16, "m": 1, "n": 1024, "k": 4096, "w_scale_block": "128x128"},     # the older form: 128x128 only
]


@pytest.mark.parametrize("parse", [lambda: shapelog.parse_stream(LOG.read_text().splitlines()),
                                   lambda: parse_files([LOG])], ids=["stream", "files"])
def test_both_forms_give_the_bmm_shapes_with_their_scale_block(parse):
    r = parse()
    assert r.shapes[BMM_VARIANT] == EXPECTED
    assert r.counts[BMM_VARIANT] == [2, 1, 1, 1]          # the first shape logged by two processes
    assert r.misses[BMM_VARIANT] == 5
    # the AITER_LOG_TUNED_CONFIG hit line is no miss; the malformed one is said, not guessed
    assert BMM_VARIANT not in r.hit_shapes
    assert any("has no MXFP8 BMM tuned row' line(s) were not understood" in w for w in r.warnings), r.warnings


def test_parse_miss_keeps_the_key_order_of_the_table():
    variant, shape = parse_miss("shape B:2 M:128 N:512 K:7168 w_scale 128x128 has no MXFP8 BMM tuned row")
    assert variant == BMM_VARIANT and list(shape) == ["b", "m", "n", "k", "w_scale_block"]
    assert parse_miss("shape is B:2, M:128, N:512, K:7168, not found tuned config in CKGEMM") is None


def test_a_variant_filter_keeps_only_the_bmm_lines():
    lines = LOG.read_text().splitlines() + [
        "[aiter] shape is B:16, M:32, N:1280, K:8192, not found tuned config in CKGEMM, will use default config!"]
    r = shapelog.parse_stream(lines, BMM_VARIANT)
    assert list(r.shapes) == [BMM_VARIANT] and len(r.shapes[BMM_VARIANT]) == 4
    assert shapelog.parse_stream(lines).shapes["batched_a8w8"] == [{"b": 16, "m": 32, "n": 1280, "k": 8192}]
