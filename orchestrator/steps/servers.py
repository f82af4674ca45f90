"""Servers that would never read what a job tunes (issue 36): discover lists the vLLM / SGLang servers running
in the container with the AITER switches their own environment holds (``/proc/PID/environ``, never the
helper's); the plan and the report name each one whose rows from this job it would not read.

- vLLM calls AITER's tuned GEMM / fused-MoE path only with ``VLLM_ROCM_USE_AITER=1`` (default off; the stock
  rocm/vllm image leaves it unset, vllm#56945); ``VLLM_ROCM_USE_AITER_LINEAR=0`` / ``_MOE=0`` turn one half off.
- A server whose environment sets the variant's ``AITER_CONFIG_*`` reads the files listed there instead of the
  shipped set (sglang#37072 for ``AITER_CONFIG_FMOE``): a table this job promotes into that is not in the list
  is one it never reads.
- A server started with ``AITER_ONLINE_TUNE=1`` tunes a fused-MoE miss itself: aiter/fused_moe.py (v0.1.11 ..
  v0.1.20 and later, the same code) appends the shape to ``untuned_fmoe.csv`` and runs ``gemm_moe_tune.py -i
  untuned_fmoe.csv -o <the table it read> --last`` under its own lock, rewriting that table in place with no
  backup: a row a job promotes into the same table while it does can be overwritten.
"""
from __future__ import annotations

import os


def _off(env: dict, key: str) -> bool:
    return str(env.get(key, "")).strip().lower() in ("0", "false", "no", "off")


def server_notes(servers: list | None, family: str, config_env: str | None, table: str | None,
                 aiter_root: str | None = None) -> list[str]:
    """One line per server that would never read the rows tuned into ``table`` (a GEMM or a MoE variant)."""
    out = []
    for s in servers or []:
        env, pid, kind = s.get("env") or {}, s.get("pid"), s.get("kind")
        who = s.get("label") or f"the {'vLLM' if kind == 'vllm' else 'SGLang'} server in this container (pid {pid})"
        if kind == "vllm":
            half = "VLLM_ROCM_USE_AITER_MOE" if family == "moe" else "VLLM_ROCM_USE_AITER_LINEAR"
            if str(env.get("VLLM_ROCM_USE_AITER", "")).strip() not in ("1", "true", "True"):
                out.append(f"{who} runs without VLLM_ROCM_USE_AITER=1: it never calls AITER's tuned path, so it "
                           "would never read the rows tuned here (the stock rocm/vllm image leaves it unset, "
                           "vllm#56945); " + ("put VLLM_ROCM_USE_AITER=1 in front of it in --serve-cmd: the "
                                               "serving check measures a server that ignores the tuned rows"
                                               if s.get("label") else "restart it with VLLM_ROCM_USE_AITER=1"))
                continue
            if _off(env, half):
                out.append(f"{who} runs with {half}={env[half]}: it never calls AITER's tuned "
                           f"{'fused-MoE' if family == 'moe' else 'GEMM'} path, so it would never read the rows "
                           "tuned here")
                continue
        if family == "moe" and str(env.get("AITER_ONLINE_TUNE", "")).strip() == "1":   # upstream: == "1"
            out.append(f"{who} runs with AITER_ONLINE_TUNE=1: on a miss it tunes the shape itself "
                       f"(gemm_moe_tune.py --last) and rewrites the fused-MoE table it reads"
                       + (f" ({table})" if table else "") + " in place, with no backup and under AITER's lock, "
                       "not tune-remote's: rows promoted into it while it tunes can be overwritten; promote "
                       "while that server is stopped, or restart it without AITER_ONLINE_TUNE")
        listed = env.get(config_env) if config_env else None
        if listed and table:
            files = [f for f in listed.split(":") if f]
            norm = {os.path.normpath(f if f.startswith("/") or not aiter_root else f"{aiter_root}/{f}")
                    for f in files}
            if os.path.normpath(table) not in norm:
                out.append(f"{who} sets {config_env}={listed}: it reads those files instead of the shipped set "
                           f"(sglang#37072), not {table} which this job would promote into; add the table to "
                           f"{config_env} there (':'-separated), or set {config_env} in the inventory to the file "
                           "the server reads")
    return out
