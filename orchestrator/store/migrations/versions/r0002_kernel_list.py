"""jobs.kernel_list: the fingerprint of the variant's kernel list on the job's node (the validator of a reuse).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("kernel_list", sa.String(64)))     # ALTER TABLE ADD COLUMN: both dialects


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("kernel_list")
