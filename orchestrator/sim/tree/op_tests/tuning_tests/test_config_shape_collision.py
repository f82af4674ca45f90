# SPDX-License-Identifier: MIT
# Simulated AITER op_tests/tuning_tests/test_config_shape_collision.py (level 0, no GPU): for every tuned-table
# family AITER merges at runtime (aiter/configs/<name>.csv plus model_configs/*<name>*.csv), no key may be held
# by two of the merged files: the runtime merge would resolve it, rewrite the table and raise (aiter#5184).
# Run: python3 -m unittest op_tests.tuning_tests.test_config_shape_collision
import csv
import glob
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "aiter", "configs")
FAMILIES = ("a4w4_blockscale_tuned_gemm", "a6w6_blockscale_tuned_gemm", "a8w8_tuned_gemm",
            "a8w8_bpreshuffle_tuned_gemm", "a8w8_blockscale_tuned_gemm", "a8w8_blockscale_bpreshuffle_tuned_gemm",
            "a8w8_tuned_batched_gemm", "bf16_tuned_batched_gemm", "bf16_tuned_gemm", "tuned_fmoe")
RESULT_COLS = {"libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio", "block_m",
               "ksplit", "us1", "kernelName1", "err1", "us2", "kernelName2", "err2", "run_1stage", "_tag",
               "xbf16", "flat", "nt", "gfx"}


def merged_files(name):
    main = os.path.join(CONFIGS, name + ".csv")
    extra = sorted(f for f in glob.glob(os.path.join(CONFIGS, "model_configs", "*%s*.csv" % name))
                   if "untuned" not in os.path.basename(f))
    return ([main] if os.path.isfile(main) else []) + extra


class TestConfigShapeCollision(unittest.TestCase):
    def test_families(self):
        for name in FAMILIES:
            files = merged_files(name)
            if len(files) < 2:
                continue
            with self.subTest(family=name):
                owner = {}
                for path in files:
                    with open(path) as fh:
                        rows = list(csv.DictReader(fh))
                    keys = [c for c in (rows[0].keys() if rows else []) if c not in RESULT_COLS]
                    for row in rows:
                        k = tuple((c, row[c]) for c in keys)
                        other = owner.setdefault(k, path)
                        if other != path:
                            self.fail("%s: runtime merge of configs/ + model_configs/ reports duplicate shapes "
                                      "(same key across files): %s in %s and %s" % (
                                          name, dict(k), os.path.relpath(other, ROOT), os.path.relpath(path, ROOT)))


if __name__ == "__main__":
    unittest.main()
