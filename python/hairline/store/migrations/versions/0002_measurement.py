"""Measurement you can trust: the calibrated rate of an experiment, and why a trial was left
out (its batches spoiled in every attempt) or not needed (a sequential design had settled).

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
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("rate_per_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("calibration", sa.Text, nullable=True))
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("note", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("note")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("calibration")
        batch.drop_column("rate_per_s")
