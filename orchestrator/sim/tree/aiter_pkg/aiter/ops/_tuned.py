"""Shared tuned-CSV lookup of the simulated ops (python-side table and built-module snapshot)."""

import functools

from .. import logger
from .._sim import LEGACY
from .._sim.frame import norm, read_csv
from .._sim.lookups import padded_m_candidates
from ..jit.utils.chip_info import get_cu_num, get_gfx

LEGACY_CU_NUM_TO_GFX = {256: "gfx950", 80: "gfx942", 304: "gfx942"}


class TunedTable(object):
    """Rows of one tuned CSV keyed like the runtime does: (gfx, cu_num, *shape) or (cu_num, *shape)."""

    def __init__(self, cols, rows, shape_cols, path, warn=False):
        self.path = path
        self.shape_cols = list(shape_cols)
        self.has_gfx = ("gfx" in cols) and not LEGACY
        if warn and not LEGACY and cols and "gfx" not in cols:
            logger.warning(f"{path} has no 'gfx' column -- falling back to cu_num-only key. "
                           "Re-run the tuner or migrate the CSV to add a gfx column.")
        self.map = {}
        for r in rows:
            if any(c not in r for c in ["cu_num"] + self.shape_cols):
                continue
            k = self._key(r.get("gfx"), r["cu_num"], [r[c] for c in self.shape_cols])
            self.map.setdefault(k, r)

    def _key(self, gfx, cu_num, shape_vals):
        vals = tuple(norm(v) for v in shape_vals)
        if self.has_gfx:
            return (str(gfx), norm(cu_num)) + vals
        return (norm(cu_num),) + vals

    def find(self, shape_vals):
        return self.map.get(self._key(get_gfx(), get_cu_num(), shape_vals))

    def find_padded(self, M, N, K, extra=()):
        """GEMM lookup: exact M, then getPaddedM(gl=0), then getPaddedM(gl=1). -> (row, padded_M)."""
        for padded_M in padded_m_candidates(int(M), int(N), int(K)):
            row = self.find([padded_M, N, K] + list(extra))
            if row is not None:
                return row, padded_M
        return None, None


@functools.lru_cache(maxsize=None)
def python_table(path, shape_cols):
    """The CSV as the Python-side lookup sees it: read at first use in this process."""
    cols, rows = read_csv(path)
    return TunedTable(cols, rows, shape_cols, path, warn=True)


def module_table(mod, shape_cols):
    """The rows compiled into a built module (snapshot taken at build time)."""
    return TunedTable(mod.get("columns", []), mod.get("rows", []), shape_cols, mod.get("tune_file"))
