"""Registry entry of the FHMoE tuner (fused heterogeneous MoE: routed experts plus one shared expert in one
two-stage FlyDSL call), ``op_tests/tuners/tune_fhmoe.py`` as stored at ROCm/aiter eb326e45 (after the fetchable
v0.1.20.post1 mirror, which had the table ``tuned_fhmoe.csv`` and its runtime ``aiter/fhmoe.py`` but no tuner:
aiter-after-v0.1.20.md §2.2). ``variants.VARIANTS`` takes ``FHMOE_VARIANTS`` whole.

What the tuner is (read whole at eb326e45), and what tune-remote does about it (``steps/fhmoe_input.py``):
- Not the common tuner CLI: ``-i`` and ``-o`` are both the full 22-column tuned table (``CSV_FIELDS``; any other
  header raises), ``--tokens 1,2,..`` names the rows to tune, and every requested token needs an incumbent row
  of its contract in ``-i`` ("missing HY4 FHMoE rows for tokens: [...]" otherwise): it searches the stage-2 and
  then the stage-1 kernels of that row's ``block_m`` against the row's own kernels, keeps the row unless a
  candidate wins by ``--min-improvement-pct`` (1.0), and writes every row of ``-i`` to ``-o`` (tmp + rename)
  once at the end. No ``--batch``/``--timeout``/``-k``; ``--mp`` other than 1 raises.
- One contract: ``Contract()`` = HY4 MXFP8 (6144/256, 257 experts, topk 9, shared expert 256, MXFP8 routed
  weights) on gfx950 with 256 CUs (it raises elsewhere). The shipped table's DSV4 I384 rows are not tunable.
- Its rows have no ``us`` nor error column; it prints ``M=<token>: X ms -> Y ms (s1, s2) -> (b1, b2)`` per row
  (``parsing/fhmoe.py``). ``--baseline-only`` times the rows of ``-i`` as they are (``M=<token>: baseline X
  ms (s1, s2)``), the benchmark of both arms here: the tuner's own do_bench timing, in ms.
- Shapes come from the runtime's raise ``The active FHMoE config does not cover this HY4 MXFP8 token shape: M=``
  (``shapelib/shapefhmoe.py``), ``--shapes-csv`` or ``--log``; no op_test, no ``--run_config``.
"""

from __future__ import annotations

from .variant_spec import MOE_KEY, BenchSpec, KernelVariant

FHMOE_VARIANTS: list[KernelVariant] = [
    KernelVariant(
        name="fhmoe",
        family="fhmoe",       # its own: the fused-MoE rules (buckets, objectives, tuner modes) are not its
        jit_module=None,      # FlyDSL kernels compiled per kernelName
        splitk="refuses",     # no -k at all (its argparse has none)
        splitk_refusal="its argparse has no -k/--splitK: it would stop at once with 'unrecognized arguments'",
        libtypes=(),
        tune_script="op_tests/tuners/tune_fhmoe.py",
        # its -i is the full tuned table (steps/fhmoe_input.py writes it into the job dir)
        untuned_csv="aiter/configs/tuned_fhmoe.csv",
        tuned_csv="aiter/configs/tuned_fhmoe.csv",
        config_env="AITER_CONFIG_FHMOE",
        # the merge key of tuned_fhmoe (gfx, cu_num + the fused-MoE key: aiter-formats.md §2.1)
        untuned_columns=MOE_KEY,
        requires_gfx=frozenset({"gfx950"}),
        # the reference lists it with v0.1.30 (aiter-december-2026.md); no stored note dates it earlier. Whether a
        # node has it is probed (its tuner file), never read from the version
        since=(0, 1, 30),
        bench=BenchSpec(
            script="op_tests/tuners/tune_fhmoe.py",
            style="fhmoe_baseline",
            output="fhmoe_lines",
            metric="ms",
            higher_is_better=False,
            key_columns={"token": "token"},
        ),
    ),
]
