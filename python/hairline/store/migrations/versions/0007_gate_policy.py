"""A service's gate policy: whether an inconclusive deciding verdict passes its gate
(web/queries.gate_of). It does not unless an admin says so.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(
            sa.Column("gate_inconclusive", sa.String(8), nullable=False, server_default="fail")
        )


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.drop_column("gate_inconclusive")
