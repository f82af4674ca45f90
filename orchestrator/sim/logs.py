"""Simulated inference-server logs with exact expectations, for the shape-log parser's tests.

``generate_logs(dir)`` writes every log of ``log_specs()`` into ``dir`` and returns ``{file name: SimLog}``;
``expected_misses(name)`` gives, per variant, the exact list (first-seen order, deduplicated) of shapes
that the log reports as *not tuned* -- hit lines (``found padded_M``, ``is tuned``, ``[fused_moe] using
2stage (kernelName1=...)``) and ``[GEMM_shape_dump]`` lines are not misses (dumps are listed apart in
``SimLog.shape_dumps``; ``expected_shapes(name)`` adds them as a8w8_blockscale shapes). ``write_large_log(path, nbytes)`` streams a log of at least ``nbytes`` bytes.

Shape dicts follow docs/internals.md: GEMM ``{"m","n","k"}`` (+ ``"q_dtype_w"`` when the line gives it),
batched ``{"b","m","n","k"}``, MoE the 12 key columns (act_type normalised to ``ActivationType.Silu``,
``use_g1u1``/``doweight_stage1`` ints; gfx/cu_num are not part of the key). The MoE token is the one
printed in the tuple (already padded by AITER).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ESC = "\x1b"
SITE = "/usr/local/lib/python3.12/dist-packages/aiter"
MERGED = "/tmp/aiter_configs"

VARIANT_FILES = {
    "a8w8": "a8w8_tuned_gemm.csv",
    "a8w8_bpreshuffle": "a8w8_bpreshuffle_tuned_gemm.csv",
    "a8w8_blockscale": "a8w8_blockscale_tuned_gemm.csv",
    "a8w8_blockscale_bpreshuffle": "a8w8_blockscale_bpreshuffle_tuned_gemm.csv",
    "a4w4_blockscale": "a4w4_blockscale_tuned_gemm.csv",
}

MOE_COLS = ("token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a",
            "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1")


@dataclass
class SimLog:
    name: str
    description: str
    misses: dict = field(default_factory=dict)       # variant -> [shape]
    hits: dict = field(default_factory=dict)         # variant -> number of hit lines
    shape_dumps: list = field(default_factory=list)  # SGLang [GEMM_shape_dump] csv_row shapes
    shapes: dict = field(default_factory=dict)       # misses + dumps (as a8w8_blockscale M,N,K), file order
    lines: int = 0
    bytes: int = 0


class _Builder:
    def __init__(self, name, description):
        self.log = SimLog(name, description)
        self.out = []
        self._seen = {}

    def line(self, text):
        self.out.append(text)

    def miss(self, variant, shape):
        key = tuple(sorted(shape.items()))
        seen = self._seen.setdefault(variant, set())
        if key not in seen:
            seen.add(key)
            self.log.misses.setdefault(variant, []).append(dict(shape))
        self._shape(variant, shape)

    def _shape(self, variant, shape):
        lst = self.log.shapes.setdefault(variant, [])
        if shape not in lst:
            lst.append(dict(shape))

    def hit(self, variant):
        self.log.hits[variant] = self.log.hits.get(variant, 0) + 1

    def dump(self, shape):
        if shape not in self.log.shape_dumps:
            self.log.shape_dumps.append(dict(shape))
        self._shape("a8w8_blockscale", {"m": shape["m"], "n": shape["n"], "k": shape["k"]})

    def text(self):
        return "\n".join(self.out) + "\n"


# ------------------------------------------------------------------------------ message formats

def gemm_miss(variant, m, n, k, path=None, q=None):
    path = path or f"{MERGED}/{VARIANT_FILES[variant]}"
    if q is not None:
        return (f"shape is M:{m}, N:{n}, K:{k}, q_dtype_w:{q}, not found tuned config in {path}, "
                "will use default config!")
    return f"shape is M:{m}, N:{n}, K:{k}, not found tuned config in {path}, will use default config!"


def gemm_hit(variant, m, n, k, padded, path=None, cu_num=256, kernel="a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1"):
    path = path or f"{MERGED}/{VARIANT_FILES[variant]}"
    return (f"shape is M:{m}, N:{n}, K:{k}, found padded_M: {padded}, N:{n}, K:{k} is tuned on cu_num = "
            f"{cu_num} in {path} , kernel name is {kernel}!")


def quant_hit(variant, m, n, k, q, padded, path=None):
    path = path or f"{SITE}/configs/{VARIANT_FILES[variant]}"
    return (f"shape M:{m}, N:{n}, K:{k} q_dtype_w:{q}, found padded_M: {padded}, N:{n}, K:{k} is tuned, in "
            f"{path}! libtype is ck! kernelName is flydsl_bpreshuflle_32x64x512_F8_F8_B16_0x1x4x2_default "
            "(kernelId 7)!")


def batched_miss(b, m, n, k, bf16=False):
    d = " dtype is bf16" if bf16 else ""
    return f"shape is B:{b}, M:{m}, N:{n}, K:{k}{d}, not found tuned config in CKGEMM, will use default config!"


def moe_tuple(s, head, act_style):
    act = {"str": f"'{s['act_type']}'", "enum": "<%s: %d>" % (s["act_type"], _ACT_VALUE[s["act_type"]])}[act_style]
    vals = [repr(h) for h in head] + [str(s[c]) for c in ("token", "model_dim", "inter_dim", "expert", "topk")]
    vals += [act] + [repr(s[c]) for c in ("dtype", "q_dtype_a", "q_dtype_w", "q_type")]
    vals += [str(bool(s["use_g1u1"])), str(bool(s["doweight_stage1"]))]
    return "(" + ", ".join(vals) + ")"


_ACT_VALUE = {"ActivationType.Silu": 0, "ActivationType.Gelu": 1, "ActivationType.Swiglu": 2}


def moe_shape(token, model_dim, inter_dim, expert, topk, q_type, qa, qw, act="ActivationType.Silu",
              dtype="torch.bfloat16", g1u1=1, dw=0):
    return {"token": token, "model_dim": model_dim, "inter_dim": inter_dim, "expert": expert, "topk": topk,
            "act_type": act, "dtype": dtype, "q_dtype_a": qa, "q_dtype_w": qw, "q_type": q_type,
            "use_g1u1": g1u1, "doweight_stage1": dw}


def moe_run1(s, stage1=False, xbf16=True):
    mpe = s["token"] * s["topk"] // s["expert"]
    x = "xbf16 = False, " if xbf16 else ""
    return (f"run_1stage = {stage1}, {x}ksplit = 0 q_type = {s['q_type']} block_m = 32 use_nt = {mpe < 8}, "
            f"estimated_m_per_expert = {mpe}")


# ------------------------------------------------------------------------------ the logs

def _vllm_tp8():
    b = _Builder("vllm_tp8_dsv3.log",
                 "vLLM TP8 (multiproc workers, every rank repeats each aiter line), blockscale/bpreshuffle/"
                 "a8w8 misses, padded and exact hits, JIT build lines with ANSI colours, merge line")
    ranks = [(r, 888 + r) for r in range(8)]

    def w(r, pid, msg, ep=False):
        tag = f"Worker_TP{r}_EP{r}" if ep else f"Worker_TP{r}"
        b.line(f"({tag} pid={pid}) [aiter] {msg}")

    b.line("(APIServer pid=1) INFO 04-10 06:04:58 [api_server.py:1880] vLLM API server version 0.11.1")
    b.line("(APIServer pid=1) INFO 04-10 06:04:58 [utils.py:233] non-default args: {'model': "
           "'deepseek-ai/DeepSeek-V3', 'tensor_parallel_size': 8}")
    for r, pid in ranks:
        w(r, pid, f"merge tuned file under model_configs/ and configs/ {SITE}/configs/a8w8_blockscale_tuned_gemm.csv:"
                  f"{SITE}/configs/model_configs/dsv3_a8w8_blockscale_tuned_gemm.csv")
    w(0, 888, f"start build [module_gemm_a8w8_blockscale] under {SITE}/jit/build/module_gemm_a8w8_blockscale")
    w(0, 888, f"{ESC}[32mfinish build [module_gemm_a8w8_blockscale], cost 23.4s {ESC}[0m")
    for r, pid in ranks:
        w(r, pid, f"import [module_gemm_a8w8_blockscale] under {SITE}/jit/module_gemm_a8w8_blockscale.so")
    nks = [(512, 7168), (7168, 256), (2112, 7168), (3072, 1536), (7168, 2048), (4608, 7168), (7168, 2304)]
    for m in (72, 8192):
        for n, k in nks:
            for r, pid in ranks:
                w(r, pid, gemm_miss("a8w8_blockscale", m, n, k), ep=(m == 8192))
            b.miss("a8w8_blockscale", {"m": m, "n": n, "k": k})
    # exact and padded hits (AITER_LOG_TUNED_CONFIG=1)
    for r, pid in ranks[:2]:
        w(r, pid, gemm_hit("a8w8_blockscale", 2, 2048, 3072, 2))
        b.hit("a8w8_blockscale")
        w(r, pid, gemm_hit("a8w8_blockscale", 3, 2048, 3072, 16))
        b.hit("a8w8_blockscale")
    for m in (16, 48):
        for r, pid in ranks:
            w(r, pid, gemm_miss("a8w8_blockscale_bpreshuffle", m, 1536, 7168))
        b.miss("a8w8_blockscale_bpreshuffle", {"m": m, "n": 1536, "k": 7168})
    w(3, 891, gemm_hit("a8w8_blockscale_bpreshuffle", 20, 512, 7168, 32,
                       kernel="_ZN5aiter42fp8gemm_bf16_blockscale_BpreShuffle_32x128E"))
    b.hit("a8w8_blockscale_bpreshuffle")
    for m in (64, 128):
        for r, pid in ranks:
            w(r, pid, gemm_miss("a8w8", m, 1280, 8192, path=f"{SITE}/configs/a8w8_tuned_gemm.csv", q="torch.int8"))
        b.miss("a8w8", {"m": m, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"})
    for r, pid in ranks:
        w(r, pid, gemm_miss("a8w8_bpreshuffle", 32, 6144, 1536,
                            path=f"{SITE}/configs/a8w8_bpreshuffle_tuned_gemm.csv", q="torch.float8_e4m3fn"))
    b.miss("a8w8_bpreshuffle", {"m": 32, "n": 6144, "k": 1536, "q_dtype_w": "torch.float8_e4m3fn"})
    w(5, 893, quant_hit("a8w8_bpreshuffle", 48, 6144, 4096, "torch.float8_e4m3fn", 64))
    b.hit("a8w8_bpreshuffle")
    b.line("(Worker_TP4 pid=892) ERROR 04-10 06:05:12 [multiproc_executor.py:971] WorkerProc hit an exception.")
    b.line("(APIServer pid=1) INFO:     127.0.0.1:50778 - \"POST /v1/completions HTTP/1.1\" 200 OK")
    return b


def _sglang_tp8():
    b = _Builder("sglang_tp8_glm5.log",
                 "SGLang TP8: each aiter record followed by SGLang's '[<time> TP<r>] ' echo; MoE tuples with "
                 "cu_num first and 'ActivationType.Silu' (legacy AITER); [GEMM_shape_dump] csv_row lines; "
                 "a MoE hit line; HTTP noise")
    ts = "2026-02-17 23:52:11"
    b.line(f"[{ts}] INFO:     Started server process [4012]")

    def rec(r, msg):
        b.line(f"[aiter] {msg}")
        b.line(f"[{ts} TP{r}] {msg}")

    qa = qw = "torch.float8_e4m3fn"
    moe = [moe_shape(t, 6144, 256, 257, 9, "QuantType.per_1x128", qa, qw) for t in (1, 2, 4, 16, 64, 512, 16384)]
    moe += [moe_shape(16384, 6144, 256, 257, 9, "QuantType.No", "torch.bfloat16", "torch.bfloat16")]
    for s in moe:
        for r in range(8):
            rec(r, moe_run1(s, stage1=False, xbf16=False))
            rec(r, f"[fused_moe] using 2stage default for {moe_tuple(s, (256,), 'str')} ")
        b.miss("moe_2stages", s)
        b.line(f"[{ts}] INFO:     127.0.0.1:50778 - \"POST /v1/completions HTTP/1.1\" 200 OK")
    hit = moe_shape(32, 6144, 256, 257, 9, "QuantType.per_1x128", qa, qw)
    rec(0, "[fused_moe] using 2stage (kernelName1='moe_ck2stages_gemm1_256x32x64x128_1x4_MulABScaleExpertWeight"
           "A8W8blkscale_v3_Nswizzle0_Quant4_MulRoutedWeight0_silu_F8_F8_B16', kernelName2='moe_ck2stages_gemm2_"
           "256x32x64x128_1x4_MulABScaleExpertWeightA8W8blkscale_v3_Nswizzle0_Quant4_MulRoutedWeight1_F8_F8_B16') "
           f"for {moe_tuple(hit, (256,), 'str')} ")
    b.hit("moe_2stages")
    for m, n, k, layer in ((72, 1536, 7168, "model.layers.0.self_attn.q_a_proj"),
                           (72, 24576, 1536, "model.layers.0.self_attn.q_b_proj"),
                           (1, 1536, 7168, "model.layers.0.self_attn.q_a_proj")):
        b.line(f"[{ts} TP0] [GEMM_shape_dump] aiter FP8 block GEMM path layer.prefix='{layer}' "
               f"block_size=[128, 128] | x.shape=({m}, {k}) weight.shape=({n}, {k}) | M={m} N={n} K={k} "
               f"(aiter gemm_a8w8_blockscale / bpreshuffle tune CSV) | csv_row: {m},{n},{k},torch.float8_e4m3fn")
        b.dump({"m": m, "n": n, "k": k, "dtype": "torch.float8_e4m3fn"})
    rec(4, gemm_miss("a8w8_blockscale", 72, 1536, 7168))
    b.miss("a8w8_blockscale", {"m": 72, "n": 1536, "k": 7168})
    b.line(f"[{ts} TP0] [Fp8LinearMethod] block_quant w8a8_block_fp8_linear=aiter_w8a8_block_fp8_linear "
           "(sglang.srt.layers.quantization.fp8_utils)")
    return b


def _log_more():
    b = _Builder("aiter_log_more.log",
                 "AITER_LOG_MORE=1 (two physical lines per record), MoE tuple 'gfx950'-first with the raw "
                 "pybind enum <ActivationType.Silu: 0>, a4w4 misses and a padded a4w4 hit")
    n = [0]

    def rec(msg, func="get_CKGEMM_config", path="/sgl-workspace/aiter/aiter/ops/gemm_op_a8w8.py", level="INFO"):
        n[0] += 1
        b.line(f"[aiter {level}] 2026-08-22 12:34:{56 + n[0] % 3:02d}.{(789 + 37 * n[0]) % 1000:03d} - "
               f"MainProcess:1234 - {path}:{400 + n[0]} - {func}")
        b.line(msg)

    a4 = "/sgl-workspace/aiter/aiter/configs/a4w4_blockscale_tuned_gemm.csv"
    for m, nn, k in ((1, 7168, 2048), (16, 7168, 2048), (256, 4608, 7168)):
        rec(gemm_miss("a4w4_blockscale", m, nn, k, path=a4), "get_GEMM_config",
            "/sgl-workspace/aiter/aiter/ops/gemm_op_a4w4.py")
        b.miss("a4w4_blockscale", {"m": m, "n": nn, "k": k})
    rec(f"shape is M:3, N:7168, K:4608, found padded_M: 16, N:7168, K:4608 is tuned on cu_num = 256 in {a4}, "
        "kernel name is _ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128E, splitK is 0!", "get_GEMM_config",
        "/sgl-workspace/aiter/aiter/ops/gemm_op_a4w4.py")
    b.hit("a4w4_blockscale")
    rec(f"{VARIANT_FILES['a8w8_blockscale']} has no 'gfx' column -- falling back to cu_num-only key. "
        "Re-run the tuner or migrate the CSV to add a gfx column.", level="WARNING")
    qa = "torch.float4_e2m1fn_x2"
    for t in (1, 64, 8192):
        s = moe_shape(t, 7168, 256, 256, 8, "QuantType.per_1x32", qa, qa)
        rec(moe_run1(s), "get_2stage_cfgs", "/sgl-workspace/aiter/aiter/fused_moe.py")
        rec(f"[fused_moe] using 2stage default for {moe_tuple(s, ('gfx950', 256), 'enum')} ", "get_2stage_cfgs",
            "/sgl-workspace/aiter/aiter/fused_moe.py")
        b.miss("moe_2stages", s)
    return b


def _moe_wrapped():
    b = _Builder("vllm_moe_wrapped.log",
                 "vLLM TP8 MoE on gfx950: 'gfx950'-first tuples with 'ActivationType.Silu', one tuple wrapped "
                 "over three lines, a hit line, a GPU fault")
    qa = qw = "torch.float8_e4m3fn"
    s64 = moe_shape(64, 4096, 256, 288, 8, "QuantType.per_1x128", qa, qw)
    b.line("[aiter] " + moe_run1(s64, stage1=True))
    b.line("[aiter] [fused_moe] using 1stage default for ('gfx950', 256, 64, 4096, 256, 288, 8,")
    b.line("        'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn',")
    b.line("        'torch.float8_e4m3fn', 'QuantType.per_1x128', True, False) ")
    b.miss("moe_2stages", s64)
    for t in (128, 16384):
        s = moe_shape(t, 4096, 256, 288, 8, "QuantType.per_1x128", qa, qw)
        for r in range(8):
            b.line(f"(Worker_TP{r} pid={2100 + r}) [aiter] {moe_run1(s, stage1=True)}")
            b.line(f"(Worker_TP{r} pid={2100 + r}) [aiter] [fused_moe] using 1stage default for "
                   f"{moe_tuple(s, ('gfx950', 256), 'str')} ")
        b.miss("moe_2stages", s)
    hit = moe_shape(32, 4096, 256, 288, 8, "QuantType.per_1x128", qa, qw)
    b.line("(Worker_TP0 pid=2100) [aiter] [fused_moe] using 1stage (kernelName1='_ZN5aiter50fmoe_bf16_blockscaleFp8"
           "_g1u1_vs_silu_1tg_32x256E', kernelName2='') for " + moe_tuple(hit, ("gfx950", 256), "str") + " ")
    b.hit("moe_2stages")
    b.line("Memory access fault by GPU node-2 (Agent handle: 0x2381c400) on address 0x79eaf1a00000. Reason: Unknown.")
    return b


def _metachar():
    b = _Builder("run 1 $(touch pwned);x.log",
                 "a path with spaces and shell metacharacters; batched a8w8/bf16 misses, a4w4 miss, "
                 "op_test style [perf] lines and checkAllclose colours")
    b.line("Loading CKBatchedGEMM config from: /opt/aiter/aiter/configs/a8w8_tuned_batched_gemm.csv")
    for m in (1, 32, 64):
        b.line("[aiter] " + batched_miss(16, m, 1280, 8192))
        b.miss("batched_a8w8", {"b": 16, "m": m, "n": 1280, "k": 8192})
        b.line(f"[aiter] a,b: [perf] dim: {str((16, m, 1280, 8192)):<20} dtype: torch.bfloat16, torch avg: "
               f"{123.45:<8.2f} us, ck avg: {12.34:<8.2f} us, uplift: {9.004:<5.1%}"
               f"[checkAllclose atol=0.01 rtol=0.01 {ESC}[32mpassed~{ESC}[0m]")
    b.line("[aiter] shape is B:16, M:128, N:1280, K:8192, is tuned on cu_num = 256 in "
           "/opt/aiter/aiter/configs/a8w8_tuned_batched_gemm.csv, kernel name is a8w8_batched_rowwise_256x32x128x256_"
           "32x32_1x1_16x16x1_16x16x1_1x32x1x8_8x8x1_1x1_intrawave_v3, splitK is 0!")
    b.hit("batched_a8w8")
    for bb, m in ((8, 16), (4, 1024)):
        b.line("[aiter] " + batched_miss(bb, m, 1024, 4096, bf16=True))
        b.miss("batched_bf16", {"b": bb, "m": m, "n": 1024, "k": 4096})
    b.line("[aiter] " + gemm_miss("a4w4_blockscale", 32, 106496, 16384,
                                  path="/opt/aiter/aiter/configs/a4w4_blockscale_tuned_gemm.csv"))
    b.miss("a4w4_blockscale", {"m": 32, "n": 106496, "k": 16384})
    b.line(f"[aiter] [checkAllclose atol=0.01 rtol=0.01 {ESC}[31mfailed!{ESC}[0m]")
    return b


_BUILDERS = (_vllm_tp8, _sglang_tp8, _log_more, _moe_wrapped, _metachar)


def log_specs() -> list:
    """All simulated logs (SimLog without writing files)."""
    out = []
    for fn in _BUILDERS:
        b = fn()
        text = b.text()
        b.log.lines = text.count("\n")
        b.log.bytes = len(text.encode("utf-8"))
        out.append(b.log)
    return out


def generate_logs(logs_dir) -> dict:
    """Write every simulated log into logs_dir; returns {file name: SimLog}."""
    d = Path(logs_dir)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for fn in _BUILDERS:
        b = fn()
        text = b.text()
        data = text.encode("utf-8")
        (d / b.log.name).write_bytes(data)
        b.log.lines = text.count("\n")
        b.log.bytes = len(data)
        out[b.log.name] = b.log
    return out


def expected_misses(name: str) -> dict:
    """{variant: [shape, ...]} of the log file ``name`` (exact, deduplicated, first-seen order)."""
    for log in log_specs():
        if log.name == name:
            return {v: [dict(s) for s in shapes] for v, shapes in log.misses.items()}
    raise KeyError(name)


def expected_shapes(name: str) -> dict:
    """Like expected_misses, plus the SGLang ``[GEMM_shape_dump] ... csv_row: M,N,K,dtype`` shapes counted as
    a8w8_blockscale shapes (``{"m","n","k"}``), all in first-seen file order."""
    for log in log_specs():
        if log.name == name:
            return {v: [dict(s) for s in shapes] for v, shapes in log.shapes.items()}
    raise KeyError(name)


def write_large_log(path, nbytes: int) -> SimLog:
    """Stream a vLLM-style log of at least ``nbytes`` bytes to ``path`` (never held in memory).

    It cycles through blockscale misses (M = 1..512, four (N, K) pairs), MoE misses (token powers of
    two), hit lines and noise; the returned SimLog has the exact miss shapes that were written.
    """
    b = _Builder(os.path.basename(str(path)), f"large synthetic log of >= {nbytes} bytes")
    nks = [(512, 7168), (7168, 256), (2112, 7168), (3072, 1536)]
    noise = ("(APIServer pid=1) INFO 04-10 06:05:12 [loggers.py:123] Engine 000: Avg prompt throughput: "
             "1234.5 tokens/s, Avg generation throughput: 56.7 tokens/s, Running: 8 reqs")
    written = 0
    i = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        while written < nbytes:
            m = 1 + (i % 512)
            n, k = nks[(i // 512) % len(nks)]
            r = i % 8
            lines = [f"(Worker_TP{r} pid={888 + r}) [aiter] " + gemm_miss("a8w8_blockscale", m, n, k), noise]
            b.miss("a8w8_blockscale", {"m": m, "n": n, "k": k})
            if i % 7 == 0:
                lines.append(f"(Worker_TP{r} pid={888 + r}) [aiter] " + gemm_hit("a8w8_blockscale", m, 2048, 3072, m))
                b.hit("a8w8_blockscale")
            if i % 11 == 0:
                t = 1 << (i // 11 % 15)
                s = moe_shape(t, 7168, 256, 257, 9, "QuantType.per_1x128", "torch.float8_e4m3fn",
                              "torch.float8_e4m3fn")
                lines.append(f"(Worker_TP{r} pid={888 + r}) [aiter] [fused_moe] using 2stage default for "
                             f"{moe_tuple(s, ('gfx950', 256), 'str')} ")
                b.miss("moe_2stages", s)
            chunk = "\n".join(lines) + "\n"
            fh.write(chunk)
            written += len(chunk.encode("utf-8"))
            b.log.lines += len(lines)
            i += 1
    b.log.bytes = written
    return b.log
