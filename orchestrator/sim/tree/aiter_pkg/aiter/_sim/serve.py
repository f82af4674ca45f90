"""A simulated serving benchmark (``python3 -m aiter._sim.serve --nk N,K [--nk ...] [--m 1,16,...]``):
a fresh process that "serves" a decode loop whose GEMMs are the given a8w8 block-scale shapes, through
the live configuration (whatever table and module AITER picks without overrides), and prints its
figures the way vLLM's benchmark_serving.py does. Throughput follows the kernels' time: tuned rows that
engage make it faster."""

import argparse
import sys

import aiter

TOKENS_PER_STEP = 64
REQUESTS = 200


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--nk", action="append", required=True)
    ap.add_argument("--m", default="1,16,64")
    ap.add_argument("--fail", action="store_true", help="exit 1 without figures (a broken serve command)")
    args = ap.parse_args(argv)
    if args.fail:
        print("RuntimeError: engine core failed to start", file=sys.stderr)
        return 1
    step_us = 0.0
    for nk in args.nk:
        n, k = (int(x) for x in nk.split(","))
        for m in (int(x) for x in args.m.split(",")):
            step_us += aiter.gemm_a8w8_blockscale(m, n, k)
    step_s = step_us * 60 / 1e6            # 60 layers per decode step
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


if __name__ == "__main__":
    sys.exit(main())
