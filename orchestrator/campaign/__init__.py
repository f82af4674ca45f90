"""Campaigns: one job over many targets (containers on nodes) and variants. See driver.py.

The seam other backends plug into is in targets.py: a *target source* (``targets()``, ``runner()``) and a
*runner* per target (``open``, ``run``, ``cancel``). ``InventorySource`` is the inventory's.
"""

from .targets import InventoryRunner, InventorySource, Runner, TargetRef, TargetSource

__all__ = ["InventoryRunner", "InventorySource", "Runner", "TargetRef", "TargetSource"]
