"""The store's tables (SQLAlchemy Core). Every table has a natural key under a unique constraint, so a
re-sync of a job (the same laptop again, or `store import`) writes nothing twice and two laptops writing at
once never duplicate a record: writes are ``INSERT ... ON CONFLICT`` on these keys (see db.py).

The Alembic migrations (migrations/versions/) create exactly these tables; a change here is a new revision
there (tests/unit/test_store.py checks that the migrated schema and this one agree)."""

from __future__ import annotations

from sqlalchemy import (Column, Float, ForeignKey, Index, Integer, MetaData, PrimaryKeyConstraint, SmallInteger,
                        String, Table, Text, UniqueConstraint)

metadata = MetaData()

# uid: sha1 of (job_id, created), stable across re-syncs and imports and unique across laptops
jobs = Table(
    "jobs", metadata,
    Column("uid", String(40), primary_key=True),
    Column("job_id", String(120), nullable=False),
    Column("origin", String(400), nullable=False),        # host:workspace of the laptop that ran it
    Column("node", String(200)), Column("container", String(200)), Column("variant", String(80)),
    Column("created", Float), Column("updated", Float), Column("state", String(20)),
    Column("request", Text), Column("targets", Text),     # JSON
    Column("gfx", String(40)), Column("cu_num", Integer), Column("gpu_model", String(120)),
    Column("pci_device_id", String(20)), Column("aiter_version", String(60)), Column("aiter_commit", String(60)),
    Column("rocm_version", String(60)), Column("tuner_command", Text),
    # sha256 of the variant's kernel-list sources on the node (nodeside/kernellist.py; revision 0002): the
    # validator of a reuse. None: a record of revision 0001, or a node whose tuner directory was unreadable
    Column("kernel_list", String(64)),
)

tuned_rows = Table(
    "tuned_rows", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_uid", String(40), ForeignKey("jobs.uid"), nullable=False),
    Column("table_name", String(200), nullable=False),
    Column("gfx", String(40)), Column("cu_num", Integer),
    Column("row_key", String(400), nullable=False),       # "m=1,n=512,k=7168": the variant's key columns
    Column("row", Text, nullable=False),                  # JSON: the tuned CSV's row, its own columns
    Column("kernel", Text), Column("us", Float),
    UniqueConstraint("job_uid", "table_name", "row_key", name="uq_tuned_rows"),
    Index("ix_tuned_rows_kind", "gfx", "cu_num", "table_name", "row_key"),
)

results = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_uid", String(40), ForeignKey("jobs.uid"), nullable=False),
    Column("row_key", String(400), nullable=False),
    Column("metric", String(60)), Column("before", Float), Column("after", Float), Column("speedup_pct", Float),
    Column("verdict", String(40)), Column("promoted", SmallInteger),
    UniqueConstraint("job_uid", "row_key", name="uq_results"),
)

# one benchmark run of one arm (0 before, 1 after) of one result: the raw measurements, not only winners
samples = Table(
    "samples", metadata,
    Column("result_id", Integer, ForeignKey("results.id"), nullable=False),
    Column("arm", SmallInteger, nullable=False), Column("n", SmallInteger, nullable=False),
    Column("value", Float),
    PrimaryKeyConstraint("result_id", "arm", "n", name="pk_samples"),
    sqlite_with_rowid=False,          # SQLite: the rows are the key's b-tree (no second copy of the key)
)

# promotion, rollback, demotion, audit: `natural` is the event's own key (job uid or recheck id, table, row key)
events = Table(
    "events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(20), nullable=False),
    Column("natural", String(700), nullable=False),
    Column("job_uid", String(40)), Column("table_name", String(200)), Column("row_key", String(400)),
    Column("gfx", String(40)), Column("cu_num", Integer), Column("node", String(200)),
    Column("at", Float), Column("detail", Text),
    UniqueConstraint("kind", "natural", name="uq_events"),
)

# the team's row for a GPU kind and key: who promoted it first holds it (one wins, the other is told)
team_rows = Table(
    "team_rows", metadata,
    Column("gfx", String(40), nullable=False), Column("cu_num", Integer, nullable=False),
    Column("table_name", String(200), nullable=False), Column("row_key", String(400), nullable=False),
    Column("job_uid", String(40), ForeignKey("jobs.uid"), nullable=False),
    Column("at", Float),
    PrimaryKeyConstraint("gfx", "cu_num", "table_name", "row_key", name="pk_team_rows"),
)
