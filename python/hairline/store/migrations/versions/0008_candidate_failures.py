"""A tuning evaluation's count of experiments in which the candidate's own arm failed (and
the default's did not): the candidate is infeasible only after ``infeasible_after_failures``
of them (tune/outcome.py), so one noisy failure does not bar it for the rest of the run.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_evaluations") as batch:
        batch.add_column(
            sa.Column("candidate_failures", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("tuning_evaluations") as batch:
        batch.drop_column("candidate_failures")
