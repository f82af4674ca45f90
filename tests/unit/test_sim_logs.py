"""The simulated server logs agree with their declared expectations (checked with the reference regexes)."""

import ast
import re

from orchestrator.sim import SimSpec, install
from orchestrator.sim.logs import expected_misses, expected_shapes, log_specs, write_large_log

ANSI = re.compile(r"\x1b\[[0-9;]*m")
GEMM_MISS = re.compile(r"shape is M:(\d+), N:(\d+), K:(\d+),(?: q_dtype_w:(\S+),)? not found tuned config in (\S+), "
                       r"will use default config!")
BATCH_MISS = re.compile(r"shape is B:(\d+), M:(\d+), N:(\d+), K:(\d+)( dtype is bf16)?, not found tuned config")
FMOE = re.compile(r"\[fused_moe\] using (1stage|2stage)( xbf16)? (default|\(kernelName1=.*?\)) for (\(.*\))")
FILES = {"a8w8_tuned_gemm": "a8w8", "a8w8_bpreshuffle_tuned_gemm": "a8w8_bpreshuffle",
         "a8w8_blockscale_tuned_gemm": "a8w8_blockscale",
         "a8w8_blockscale_bpreshuffle_tuned_gemm": "a8w8_blockscale_bpreshuffle",
         "a4w4_blockscale_tuned_gemm": "a4w4_blockscale"}
MOE_COLS = ("token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a", "q_dtype_w",
            "q_type", "use_g1u1", "doweight_stage1")


def reference_parse(lines):
    """A small, independent parser following aiter-formats.md §3.4 (joins wrapped MoE tuples)."""
    out = {}

    def add(v, s):
        lst = out.setdefault(v, [])
        if s not in lst:
            lst.append(s)

    pending = None
    for raw in lines:
        line = ANSI.sub("", raw.rstrip("\n"))
        if pending is not None:
            pending += " " + line.strip()
            if pending.count("(") > pending.count(")"):
                continue
            line, pending = pending, None
        elif "[fused_moe] using" in line and line.count("(") > line.count(")"):
            pending = line
            continue
        m = GEMM_MISS.search(line)
        if m:
            base = m.group(5).rsplit("/", 1)[-1].rsplit(".", 1)[0]
            s = {"m": int(m.group(1)), "n": int(m.group(2)), "k": int(m.group(3))}
            if m.group(4):
                s["q_dtype_w"] = m.group(4)
            add(FILES[base], s)
            continue
        m = BATCH_MISS.search(line)
        if m:
            add("batched_bf16" if m.group(5) else "batched_a8w8",
                {"b": int(m.group(1)), "m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4))})
            continue
        m = FMOE.search(line)
        if m and m.group(3) == "default":
            text = re.sub(r"<(ActivationType\.\w+): -?\d+>", r"'\1'", m.group(4))
            vals = list(ast.literal_eval(text))
            if isinstance(vals[0], str):
                vals = vals[1:]
            vals = vals[1:]  # cu_num
            s = dict(zip(MOE_COLS, vals))
            s["use_g1u1"], s["doweight_stage1"] = int(s["use_g1u1"]), int(s["doweight_stage1"])
            add("moe_2stages", s)
    return out


def test_generated_logs_match_expectations(tmp_path):
    inst = install(tmp_path / "n", SimSpec())
    names = {log.name for log in log_specs()}
    assert "run 1 $(touch pwned);x.log" in names and set(inst.logs) == names
    for name in names:
        with open(f"{inst.host_dir}/logs/{name}", encoding="utf-8") as fh:
            got = reference_parse(fh)
        assert got == expected_misses(name), name
    all_variants = set()
    for log in log_specs():
        all_variants |= set(log.misses)
    assert all_variants == {"a8w8", "a8w8_bpreshuffle", "a8w8_blockscale", "a8w8_blockscale_bpreshuffle",
                            "a4w4_blockscale", "batched_a8w8", "batched_bf16", "moe_2stages"}
    sg = next(log for log in log_specs() if log.name.startswith("sglang"))
    assert sg.shape_dumps and sg.hits["moe_2stages"] == 1
    # dumps are shapes (not misses): expected_shapes lists them as a8w8_blockscale, in file order
    assert expected_shapes(sg.name)["a8w8_blockscale"] == [
        {"m": 72, "n": 1536, "k": 7168}, {"m": 72, "n": 24576, "k": 1536}, {"m": 1, "n": 1536, "k": 7168}]
    assert expected_misses(sg.name)["a8w8_blockscale"] == [{"m": 72, "n": 1536, "k": 7168}]
    text = open(f"{inst.host_dir}/logs/{sg.name}", encoding="utf-8").read()
    assert "[2026-02-17 23:52:11 TP4] run_1stage" in text and "[aiter] run_1stage" in text
    vl = open(f"{inst.host_dir}/logs/vllm_tp8_dsv3.log", encoding="utf-8").read()
    assert "(Worker_TP7 pid=895) [aiter] shape is M:72" in vl and "\x1b[32mfinish build" in vl
    assert "found padded_M: 16, N:2048" in vl


def test_large_log_is_streamed_and_exact(tmp_path):
    p = tmp_path / "big.log"
    spec = write_large_log(p, 3_000_000)
    assert p.stat().st_size == spec.bytes >= 3_000_000
    with open(p, encoding="utf-8") as fh:
        got = reference_parse(fh)
    assert got == spec.misses
    assert len(spec.misses["a8w8_blockscale"]) > 1000
