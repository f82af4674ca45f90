"""Campaigns: one job over many targets (containers on nodes) and variants. See driver.py and lifecycle.py.

The seam other backends plug into is in targets.py: a *target source* (``targets()``, ``runner()``; release,
cancel, close) and a *runner* per target (``open``, ``run``, ``cancel``); sources.py finds a saved campaign's
source by its kind. ``InventorySource`` is the inventory's.
"""

from .targets import InventoryRunner, InventorySource, PooledRunner, Runner, TargetRef, TargetSource

__all__ = ["InventoryRunner", "InventorySource", "PooledRunner", "Runner", "TargetRef", "TargetSource"]
