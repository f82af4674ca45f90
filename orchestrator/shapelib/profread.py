"""A server's profile -> each AITER GEMM / fused-MoE shape's GPU time and share of the trace's GPU time.

Stdlib only, Python >= 3.8: the node helper's ``profile`` op streams a trace where it lives; the laptop
imports it for ``local:`` paths. Fields used (docs/profile.md):

- torch.profiler Chrome trace (``.json`` / ``.json.gz``): ``cpu_op`` events (``name``, ``pid``, ``tid``,
  ``ts``, ``dur``, ``args["Input Dims"|"Input type"|"Concrete Inputs"]``); launch events (``cuda_runtime`` /
  ``cuda_driver``, ``args["correlation"]``, ``pid``, ``tid``, ``ts``); ``kernel`` events (``dur``,
  ``args["correlation"]``); ``gpu_memcpy`` / ``gpu_memset`` count as GPU time too. A kernel belongs to the
  outermost AITER op on the launching thread whose [ts, ts + dur] holds its launch. The whole GPU time is
  the sum of every kernel / memcpy / memset ``dur``.
- rocprofv3 ``--kernel-trace`` CSV (``*_kernel_trace.csv``): ``Kernel_Name``, ``Start_Timestamp``,
  ``End_Timestamp`` (ns). It names kernels, not op arguments: with a torch trace of the same run its GPU
  time is the whole (a HIP-graph replay the torch trace does not see is in it); alone it maps nothing.

``read_profiles(paths, variant=None) -> dict``: ``shapes`` {variant: [{"shape", "gpu_us", "calls"}]}
(first-seen order), ``total_gpu_us``, ``variant_gpu_us``, ``ops``, ``files``, ``warnings``; raises
``ProfileError`` (one line, what is missing) for a truncated file, a trace without ``record_shapes``, or one
where no AITER op of the variant ran.
"""

import bisect
import csv
import os

from . import chrometrace, profops

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
_GRAPH_LAUNCH = ("cudaGraphLaunch", "hipGraphLaunch")
SAME_RUN_TOLERANCE = 0.001   # a kernel trace of the run holds its torch trace's GPU time to the rounding


class ProfileError(Exception):
    def __init__(self, error, hint=None):
        Exception.__init__(self, error)
        self.error = error
        self.hint = hint


def is_rocprof_csv(path):
    return path.endswith(".csv")


class _Acc(object):
    """Shapes met so far, in first-seen order, with their GPU time and call count."""

    def __init__(self, variant):
        self.variant = variant
        self.index = {}
        self.rows = {}
        self.ops = {}
        self.total_us = 0.0
        self.rocprof_us = 0.0
        self.graph_launches = 0
        self.unlinked_us = 0.0
        self.files = []
        self.no_shapes = 0

    def add(self, variant, shape, us, calls):
        key = (variant, tuple(sorted((k, str(v)) for k, v in shape.items())))
        row = self.index.get(key)
        if row is None:
            row = {"shape": shape, "gpu_us": 0.0, "calls": 0}
            self.index[key] = row
            self.rows.setdefault(variant, []).append(row)
        row["gpu_us"] += us
        row["calls"] += calls


def _torch_trace(path, acc):
    reader = chrometrace.TraceReader(path)
    ops = {}                  # (pid, tid) -> [(ts, end, variant, shape)]
    launches = {}             # correlation -> (pid, tid, ts)
    kernels = {}              # correlation -> GPU us
    total = 0.0
    for ev in reader.events():
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        if cat == "cpu_op":
            name = ev.get("name")
            if name in profops.ALL_OPS:
                acc.ops[name] = acc.ops.get(name, 0) + 1
                try:
                    got = profops.shape_of(name, ev.get("args"))
                except profops.NoShapes:
                    acc.no_shapes += 1
                    continue
                if got:
                    ts = float(ev.get("ts", 0))
                    ops.setdefault((ev.get("pid"), ev.get("tid")), []).append(
                        (ts, ts + float(ev.get("dur", 0)), got[0], got[1]))
        elif cat in _LAUNCH_CATS:
            args = ev.get("args") or {}
            if "correlation" in args:
                launches[args["correlation"]] = (ev.get("pid"), ev.get("tid"), float(ev.get("ts", 0)))
            if ev.get("name") in _GRAPH_LAUNCH:
                acc.graph_launches += 1
        elif cat in _GPU_CATS:
            us = float(ev.get("dur", 0) or 0)
            total += us
            if cat == "kernel":
                corr = (ev.get("args") or {}).get("correlation")
                if corr is not None:
                    kernels[corr] = kernels.get(corr, 0.0) + us
    if reader.meta.get("record_shapes") in (0, False) and acc.no_shapes:
        raise ProfileError("%s: the trace was recorded without record_shapes (its AITER op calls carry no "
                           "Input Dims)" % path,
                           hint="profile again with record_shapes=True (vLLM: VLLM_TORCH_PROFILER_RECORD_SHAPES=1; "
                                "SGLang: /start_profile with record_shapes)")
    # each thread's outermost AITER ops (a *_ck stub inside its Python wrapper is the same call)
    spans = {}
    for thread, calls in ops.items():
        calls.sort(key=lambda c: (c[0], -c[1]))
        outer = []
        for c in calls:
            if outer and c[0] < outer[-1][1] and c[1] <= outer[-1][1]:
                continue
            outer.append(c)
        spans[thread] = ([c[0] for c in outer], outer, [0.0] * len(outer))
    for corr, us in kernels.items():
        where = launches.get(corr)
        span = spans.get(where[:2]) if where else None
        if span is None:
            continue
        i = bisect.bisect_right(span[0], where[2]) - 1
        if i >= 0 and span[1][i][0] <= where[2] <= span[1][i][1]:
            span[2][i] += us
    for starts, outer, times in spans.values():
        for (ts, end, variant, shape), us in zip(outer, times):
            if acc.variant is None or variant == acc.variant:
                acc.add(variant, shape, us, 1)
    acc.total_us += total


def _rocprof_csv(path, acc):
    try:
        with open(path, newline="") as f:
            rows = csv.DictReader(f)
            cols = set(rows.fieldnames or ())
            if not {"Kernel_Name", "Start_Timestamp", "End_Timestamp"} <= cols:
                raise ProfileError("%s: not a rocprofv3 kernel trace (no Kernel_Name, Start_Timestamp, "
                                   "End_Timestamp columns)" % path,
                                   hint="give rocprofv3 --kernel-trace's *_kernel_trace.csv")
            for r in rows:
                try:
                    acc.rocprof_us += (int(r["End_Timestamp"]) - int(r["Start_Timestamp"])) / 1000.0
                except (TypeError, ValueError):
                    raise ProfileError("%s: truncated or broken row %d (timestamps are not integers)"
                                       % (path, rows.line_num),
                                       hint="copy the kernel trace again once rocprofv3 has finished writing it")
    except csv.Error as exc:
        raise ProfileError("%s: broken CSV (%s)" % (path, exc))


def expand_paths(paths):
    """Files as given, a directory's trace files (sorted), and the ones not found."""
    out, missing = [], []
    for p in paths:
        if os.path.isdir(p):
            out.extend(sorted(os.path.join(p, n) for n in os.listdir(p)
                              if n.endswith((".json", ".json.gz", ".csv")) and os.path.isfile(os.path.join(p, n))))
        elif os.path.isfile(p):
            out.append(p)
        else:
            missing.append(p)
    return out, missing


def read_profiles(paths, variant=None):
    files, missing = expand_paths(paths)
    if missing:
        raise ProfileError("profile not found: %s" % missing[0],
                           hint="paths without a prefix are inside the container; node:PATH on the node's "
                                "host, local:PATH on this machine")
    if not files:
        raise ProfileError("no trace files (.json, .json.gz, .csv) in %s" % ", ".join(paths))
    acc = _Acc(variant)
    traces = [p for p in files if not is_rocprof_csv(p)]
    for p in files:
        try:
            (_rocprof_csv if is_rocprof_csv(p) else _torch_trace)(p, acc)
        except chrometrace.TraceFormatError as exc:
            raise ProfileError(str(exc), hint="copy the trace again once the profiler has finished writing it")
        except OSError as exc:
            raise ProfileError("%s: cannot read (%s)" % (p, exc))
        acc.files.append(p)
    if not traces:
        raise ProfileError("a rocprofv3 kernel trace names kernels, not the op arguments AITER looks shapes up by",
                           hint="give the torch-profiler trace of the same run too (--profile TRACE.json.gz)")
    if not acc.ops:
        raise ProfileError("no AITER GEMM or fused-MoE op call in %s (a trace of another model or backend?)"
                           % ", ".join(traces),
                           hint="profile the server with AITER's ops enabled (e.g. VLLM_ROCM_USE_AITER=1); "
                                "ops looked for: aiter::gemm_a8w8*, aiter::gemm_a4w4*, aiter::batched_gemm_*, "
                                "aiter::fused_moe_")
    if acc.no_shapes and not acc.rows:
        raise ProfileError("%s: the AITER op calls carry no Input Dims: the trace was recorded without "
                           "record_shapes" % ", ".join(traces),
                           hint="profile again with record_shapes=True (vLLM: VLLM_TORCH_PROFILER_RECORD_SHAPES=1)")
    if variant is not None and variant not in acc.rows:
        seen = sorted(acc.ops)
        raise ProfileError("no %s op call in the profile (it has %s)" % (variant, ", ".join(seen)),
                           hint="ops of %s: %s" % (variant, ", ".join(profops.VARIANT_OPS.get(variant, ["none"]))))
    warnings = []
    total = acc.total_us
    if acc.rocprof_us:
        if acc.rocprof_us >= total:
            total = acc.rocprof_us
        elif acc.rocprof_us < total * (1 - SAME_RUN_TOLERANCE):   # ns vs us rounding of one run is not less
            warnings.append("the rocprofv3 kernel trace holds less GPU time than the torch trace: not the same "
                            "run; the torch trace's GPU time is the whole")
    if acc.graph_launches:
        warnings.append("%d graph launch(es) in the trace: kernels replayed from a HIP graph belong to no op "
                        "call, so their shapes' share is undercounted (profile with enforce-eager for the "
                        "whole picture)" % acc.graph_launches)
    if acc.no_shapes:
        warnings.append("%d AITER op call(s) without Input Dims were left out" % acc.no_shapes)
    variant_us = {}
    for v, rows in acc.rows.items():
        variant_us[v] = sum(r["gpu_us"] for r in rows)
    return {"shapes": acc.rows, "total_gpu_us": total, "variant_gpu_us": variant_us, "ops": acc.ops,
            "files": acc.files, "warnings": warnings}
