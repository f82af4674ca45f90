"""The team's memory (issue 39): every job, tuned row, benchmark sample and promotion in one database.

``Store.open(url)`` (db.py) over the tables of schema.py, migrated by Alembic (migrations/); sync.py writes
a job's records from its state and directory; query.py answers `tune-remote rows`. docs/store.md."""

from .db import PromotionConflict, Store, StoreTooNew, StoreUnreachable, default_url, resolve_url, shown

__all__ = ["PromotionConflict", "Store", "StoreTooNew", "StoreUnreachable", "default_url", "resolve_url", "shown"]
