"""What a profiled server run leaves behind (issue 38), written by the simulated server (``_sim/serve.py``):
a torch.profiler Chrome trace as ``export_chrome_trace`` / ``tensorboard_trace_handler(use_gzip=True)`` write
it with ``record_shapes=True`` (one ``cpu_op`` per AITER op call named as the op registers, ``aiter::<fn>``,
with ``Input Dims`` / ``Input type`` in the schema's order, its ``hipLaunchKernel`` and the ``kernel`` it
launched, correlated), and a rocprofv3 ``--kernel-trace`` CSV of the same kernels. GPU times are the
simulator's own (the figures the benchmarks and the serving loop charge), so a trace's shares are the
serving loop's."""

import csv
import gzip
import json
import os
import socket
import time

# rocprofv3 --kernel-trace --output-format csv: the columns of <pid>_kernel_trace.csv (rocprofiler-sdk 0.6)
KERNEL_TRACE_COLUMNS = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
                        "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size",
                        "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
                        "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")

FP8 = "c10::Float8_e4m3fnuz"


def blockscale_call(m, n, k):
    """``aiter::gemm_a8w8_blockscale(XQ, WQ, x_scale, w_scale, Y)`` as record_shapes writes its arguments."""
    dims = [[m, k], [n, k], [m, (k + 127) // 128], [(n + 127) // 128, (k + 127) // 128], [m, n]]
    return "aiter::gemm_a8w8_blockscale", dims, [FP8, FP8, "float", "float", "c10::BFloat16"]


class Recorder:
    """Op calls on one host thread and the kernels they launch on one GPU stream, laid end to end."""

    def __init__(self, pid=None):
        self.pid = pid or os.getpid()
        self.events = []
        self.kernels = []           # (name, start_ns, end_ns, correlation)
        self.cpu_ts = 1000.0
        self.gpu_ts = 1200.0
        self.correlation = 1

    def call(self, op, dims, types, gpu_us, kernel, host_us=12.0):
        """One op call: its cpu_op span holds its launch; its kernel runs gpu_us on the stream."""
        ts, corr = self.cpu_ts, self.correlation
        self.events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": self.pid, "tid": self.pid, "ts": ts,
                            "dur": host_us, "args": {"External id": corr, "Record function id": 0,
                                                     "Input Dims": dims, "Input type": types,
                                                     "Input Strides": [[]] * len(dims),
                                                     "Concrete Inputs": [""] * len(dims)}})
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": self.pid,
                            "tid": self.pid, "ts": ts + host_us / 3, "dur": host_us / 3,
                            "args": {"External id": corr, "correlation": corr, "cbid": 310}})
        start = max(self.gpu_ts, ts + host_us / 2)
        self.events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": start,
                            "dur": gpu_us, "args": {"External id": corr, "correlation": corr, "device": 0,
                                                    "stream": 7, "queued": 0}})
        self.kernels.append((kernel, round(start * 1000), round((start + gpu_us) * 1000), corr))
        self.cpu_ts = ts + host_us
        self.gpu_ts = start + gpu_us
        self.correlation += 1

    def write_trace(self, directory, worker=None):
        """``<worker>.<ms>.pt.trace.json.gz`` in ``directory`` (the name tensorboard_trace_handler gives)."""
        os.makedirs(directory, exist_ok=True)
        worker = worker or "%s_%d" % (socket.gethostname(), self.pid)
        path = os.path.join(directory, "%s.%d.pt.trace.json.gz" % (worker, int(time.time() * 1000)))
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X (simulated)"}],
               "record_shapes": 1, "with_stack": 0, "traceEvents": self.events,
               "traceName": path, "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}
        with gzip.open(path + ".tmp", "wt") as f:
            json.dump(doc, f)
        os.replace(path + ".tmp", path)
        return path

    def write_kernel_trace(self, directory):
        """``<pid>_kernel_trace.csv`` as ``rocprofv3 --kernel-trace --output-format csv -d DIR`` writes it."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "%d_kernel_trace.csv" % self.pid)
        with open(path + ".tmp", "w", newline="") as f:
            w = csv.writer(f, quoting=csv.QUOTE_ALL)
            w.writerow(KERNEL_TRACE_COLUMNS)
            for i, (name, start, end, corr) in enumerate(self.kernels, 1):
                w.writerow(["KERNEL_DISPATCH", 4, 1, 0, self.pid, i, 17, name, corr, start, end, 0, 0, 256, 1, 1,
                            256, 1, 1])
        os.replace(path + ".tmp", path)
        return path
