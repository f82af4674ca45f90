"""The first schema: jobs, tuned rows, comparison results and their samples, events, the team's rows.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _s(n: int) -> sa.String:
    return sa.String(n)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("uid", _s(40), primary_key=True), sa.Column("job_id", _s(120), nullable=False),
        sa.Column("origin", _s(400), nullable=False), sa.Column("node", _s(200)), sa.Column("container", _s(200)),
        sa.Column("variant", _s(80)), sa.Column("created", sa.Float), sa.Column("updated", sa.Float),
        sa.Column("state", _s(20)), sa.Column("request", sa.Text), sa.Column("targets", sa.Text),
        sa.Column("gfx", _s(40)), sa.Column("cu_num", sa.Integer), sa.Column("gpu_model", _s(120)),
        sa.Column("pci_device_id", _s(20)), sa.Column("aiter_version", _s(60)), sa.Column("aiter_commit", _s(60)),
        sa.Column("rocm_version", _s(60)), sa.Column("tuner_command", sa.Text))
    op.create_table(
        "tuned_rows",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_uid", _s(40), sa.ForeignKey("jobs.uid"), nullable=False),
        sa.Column("table_name", _s(200), nullable=False), sa.Column("gfx", _s(40)), sa.Column("cu_num", sa.Integer),
        sa.Column("row_key", _s(400), nullable=False), sa.Column("row", sa.Text, nullable=False),
        sa.Column("kernel", sa.Text), sa.Column("us", sa.Float),
        sa.UniqueConstraint("job_uid", "table_name", "row_key", name="uq_tuned_rows"))
    op.create_index("ix_tuned_rows_kind", "tuned_rows", ["gfx", "cu_num", "table_name", "row_key"])
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_uid", _s(40), sa.ForeignKey("jobs.uid"), nullable=False),
        sa.Column("row_key", _s(400), nullable=False), sa.Column("metric", _s(60)), sa.Column("before", sa.Float),
        sa.Column("after", sa.Float), sa.Column("speedup_pct", sa.Float), sa.Column("verdict", _s(40)),
        sa.Column("promoted", sa.SmallInteger),
        sa.UniqueConstraint("job_uid", "row_key", name="uq_results"))
    op.create_table(
        "samples",
        sa.Column("result_id", sa.Integer, sa.ForeignKey("results.id"), nullable=False),
        sa.Column("arm", sa.SmallInteger, nullable=False), sa.Column("n", sa.SmallInteger, nullable=False),
        sa.Column("value", sa.Float),
        sa.PrimaryKeyConstraint("result_id", "arm", "n", name="pk_samples"), sqlite_with_rowid=False)
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", _s(20), nullable=False), sa.Column("natural", _s(700), nullable=False),
        sa.Column("job_uid", _s(40)), sa.Column("table_name", _s(200)), sa.Column("row_key", _s(400)),
        sa.Column("gfx", _s(40)), sa.Column("cu_num", sa.Integer), sa.Column("node", _s(200)),
        sa.Column("at", sa.Float), sa.Column("detail", sa.Text),
        sa.UniqueConstraint("kind", "natural", name="uq_events"))
    op.create_table(
        "team_rows",
        sa.Column("gfx", _s(40), nullable=False), sa.Column("cu_num", sa.Integer, nullable=False),
        sa.Column("table_name", _s(200), nullable=False), sa.Column("row_key", _s(400), nullable=False),
        sa.Column("job_uid", _s(40), sa.ForeignKey("jobs.uid"), nullable=False), sa.Column("at", sa.Float),
        sa.PrimaryKeyConstraint("gfx", "cu_num", "table_name", "row_key", name="pk_team_rows"))


def downgrade() -> None:
    for name in ("team_rows", "events", "samples", "results", "tuned_rows", "jobs"):
        op.drop_table(name)
