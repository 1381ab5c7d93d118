"""The concurrency guard: events beside experiments (deployments, maintenance) and an index
to find the runs that overlapped an experiment's in time (lab/concurrency.py).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lab_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("host", sa.String(200), nullable=True),
        sa.Column("started_at", sa.Float, nullable=False, index=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("created_by", sa.String(200), nullable=False),
    )
    with op.batch_alter_table("runs") as batch:
        batch.create_index("ix_runs_started_at", ["started_at"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_started_at")
    op.drop_table("lab_events")
