"""A simulated serving benchmark (``python3 -m aiter._sim.serve --nk N,K [--nk ...] [--m 1,16,...]``):
a fresh process that "serves" a decode loop whose GEMMs are the given a8w8 block-scale shapes, through
the live configuration (whatever table and module AITER picks without overrides), and prints its
figures the way vLLM's benchmark_serving.py does. Throughput follows the kernels' time: tuned rows that
engage make it faster. With ``VLLM_TORCH_PROFILER_DIR`` (or ``--profile-dir``) it also writes a torch.profiler
trace of one decode step, and with ``--kernel-trace-dir`` a rocprofv3 kernel-trace CSV of it (``_sim/profiler.py``);
``--other-us`` adds GPU time no AITER op holds (attention, norms) to every layer, in the figures and the trace.

``--workers N`` serves as vLLM's multiproc executor does: N worker processes (TP ranks), each its own AITER
(lookup caches, once-per-process miss lines, AITER_TUNE_GEMM rows), their log lines re-printed with vLLM's
``(Worker_TP<r> pid=<pid>) `` prefix; ``--nk0 N,K`` shapes only rank 0 runs, ``--steps S`` decode steps (each
one looks every shape up again); the figures are rank 0's.

``--moe T,D,I,E,K`` adds a fused-MoE layer (token T, model_dim D, inter_dim I, E experts, top-K, bf16 with FP8
per-token quant, as DeepSeek-style FP8 checkpoints run it) looked up through ``aiter.fused_moe`` like the GEMMs:
with ``AITER_ONLINE_TUNE=1`` AITER tunes its misses on the fly (and says which it could not).

``--mx a6w4:N,K`` (or ``a4w6:N,K``, ``a16w8_mxfp8:N,K``; newest/head profiles) adds a mixed-MXFP asm GEMM to every layer, at each M,
through its runtime (aiter/ops/gemm_op_<family>.py: exact, then the padded shape; with
``AITER_LOG_TUNED_CONFIG=1`` its lookup lines, once per shape per process)."""

import argparse
import importlib
import os
import subprocess
import sys

import aiter

TOKENS_PER_STEP = 64
REQUESTS = 200
LAYERS = 60                                # per decode step


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--nk", action="append", default=[])
    ap.add_argument("--moe", action="append", default=[])
    ap.add_argument("--mx", action="append", default=[], help="FAMILY:N,K of an MX asm GEMM (a6w4, a4w6, a16w8_mxfp8)")
    ap.add_argument("--m", default="1,16,64")
    ap.add_argument("--fail", action="store_true", help="exit 1 without figures (a broken serve command)")
    ap.add_argument("--other-us", type=float, default=0.0, help="GPU time per layer outside AITER's GEMMs")
    ap.add_argument("--profile-dir", default=os.environ.get("VLLM_TORCH_PROFILER_DIR"))
    ap.add_argument("--kernel-trace-dir", default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--nk0", action="append", default=[])
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.fail:
        print("RuntimeError: engine core failed to start", file=sys.stderr)
        return 1
    if args.workers > 1 and args.rank is None:
        step_us = _workers(argv if argv is not None else sys.argv[1:], args.workers)
        layer = None
    else:
        layer = []                         # (m, n, k, us): one layer's GEMMs, as the live configuration runs them
        for _ in range(max(1, args.steps)):
            layer = []
            for nk in args.nk + (args.nk0 if not args.rank else []):
                n, k = (int(x) for x in nk.split(","))
                for m in (int(x) for x in args.m.split(",")):
                    layer.append((m, n, k, aiter.gemm_a8w8_blockscale(m, n, k)))
        step_us = sum(us for _, _, _, us in layer) + args.other_us + sum(_moe(spec) for spec in args.moe) \
            + sum(_mx(spec, args.m) for spec in args.mx)
        if args.rank is not None:
            print("step_us %r" % step_us)
            return 0
    step_s = step_us * LAYERS / 1e6
    if layer and (args.profile_dir or args.kernel_trace_dir):
        _profile(layer, args)
    tok_s = TOKENS_PER_STEP / step_s
    duration = REQUESTS * 128 / tok_s
    print("============ Serving Benchmark Result ============")
    print("%-40s %-10d" % ("Successful requests:", REQUESTS))
    print("%-40s %-10.2f" % ("Benchmark duration (s):", duration))
    print("%-40s %-10.2f" % ("Request throughput (req/s):", REQUESTS / duration))
    print("%-40s %-10.2f" % ("Output token throughput (tok/s):", tok_s))
    print("%-40s %-10.2f" % ("Total Token throughput (tok/s):", tok_s * 2))
    print("---------------Time to First Token----------------")
    print("%-40s %-10.2f" % ("Mean TTFT (ms):", step_s * 1000 * 4))
    print("-----Time per Output Token (excl. 1st token)------")
    print("%-40s %-10.2f" % ("Mean TPOT (ms):", step_s * 1000))
    print("==================================================")
    return 0


def _moe(spec):
    from aiter import QuantType, dtypes
    t, d, i, e, k = (int(x) for x in spec.split(","))
    return aiter.fused_moe(t, d, i, e, k, dtypes.bf16, dtypes.fp8, dtypes.fp8, QuantType.per_Token)


def _mx(spec, ms):
    """One layer's GEMM of a mixed-MXFP family at each M (its op: aiter.gemm_<family>)."""
    family, _, nk = spec.partition(":")
    mod = importlib.import_module("aiter.ops.gemm_op_" + family)
    op = getattr(mod, "gemm_" + family, None) or getattr(mod, "gemm_" + family + "_asm")   # a16w8_mxfp8: _asm
    n, k = (int(x) for x in nk.split(","))
    return sum(op(m, n, k) for m in (int(x) for x in ms.split(",")))


def _workers(argv, n):
    """Run the ranks one after the other (each a fresh process), re-print their log lines with vLLM's worker
    prefix; -> rank 0's step time."""
    step_us = 0.0
    for rank in range(n):
        proc = subprocess.Popen([sys.executable, "-m", "aiter._sim.serve", *argv, "--rank", str(rank)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        out, err = proc.communicate()
        tag = "(Worker_TP%d pid=%d) " % (rank, proc.pid)
        for line in err.splitlines():
            print(tag + line, file=sys.stderr)
        for line in out.splitlines():
            if line.startswith("step_us ") and rank == 0:
                step_us = float(line.split()[1])
        if proc.returncode:
            print(tag + "worker exited %d" % proc.returncode, file=sys.stderr)
    sys.stderr.flush()
    return step_us


def _profile(layer, args):
    """One decode step as the profiler saw it: every layer's GEMMs, then the rest of the layer's GPU time."""
    from .profiler import Recorder, blockscale_call
    rec = Recorder()
    for _ in range(LAYERS):
        for m, n, k, us in layer:
            op, dims, types = blockscale_call(m, n, k)
            rec.call(op, dims, types, us, "a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_intrawave_v1")
        if args.other_us:
            rec.call("aten::scaled_dot_product_attention", [[1, 8, 64, 128]] * 3, ["c10::BFloat16"] * 3,
                     args.other_us, "fmha_fwd_d128_bf16_batch")
    if args.profile_dir:
        print("profile: %s" % rec.write_trace(args.profile_dir), file=sys.stderr)
    if args.kernel_trace_dir:
        print("kernel trace: %s" % rec.write_kernel_trace(args.kernel_trace_dir), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
