"""Scale-out: hosts of many machines (Ray worker nodes), chosen by their facts; health of a
host that died mid-trial; experiment priority and region; team quotas per region.

The facts that allocation matches on are columns (indexed), not only JSON, so that choosing
among 10,000 hosts is one indexed query rather than a scan that parses every row's JSON.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Three-sided experiments: which arm each verdict's candidate was compared with, and
    # whether that comparison decides the outcome (listings count only those).
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("baseline", sa.String(100), nullable=True))
        batch.add_column(
            sa.Column("deciding", sa.Boolean, nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(
            sa.Column("region", sa.String(100), nullable=False, server_default="local")
        )
        batch.add_column(
            sa.Column("server_type", sa.String(200), nullable=False, server_default="unknown")
        )
        batch.add_column(
            sa.Column("cpu_arch", sa.String(64), nullable=False, server_default="unknown")
        )
        batch.add_column(
            sa.Column("cpu_model", sa.String(200), nullable=False, server_default="unknown")
        )
        batch.add_column(
            sa.Column("kernel", sa.String(200), nullable=False, server_default="unknown")
        )
        batch.add_column(
            sa.Column("turbo", sa.String(16), nullable=False, server_default="unknown")
        )
        batch.add_column(sa.Column("healthy", sa.Boolean, nullable=False, server_default=sa.true()))
        batch.add_column(sa.Column("health_note", sa.Text, nullable=True))
        batch.add_column(sa.Column("address", sa.String(200), nullable=True))
        batch.add_column(sa.Column("last_seen_at", sa.Float, nullable=True))
        batch.create_index("ix_hosts_class", ["region", "server_type", "cpu_arch", "kernel"])
        batch.create_index("ix_hosts_team", ["team"])
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("priority", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("region", sa.String(100), nullable=True))
        batch.create_index("ix_experiments_claim", ["phase", "priority", "id"])
        batch.create_index("ix_experiments_lease", ["lease_expires_at"])
    op.create_table(
        "region_quotas",
        sa.Column("team", sa.String(200), primary_key=True),
        sa.Column("region", sa.String(100), primary_key=True),
        sa.Column("max_hosts", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("deciding")
        batch.drop_column("baseline")
    op.drop_table("region_quotas")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_lease")
        batch.drop_index("ix_experiments_claim")
        batch.drop_column("region")
        batch.drop_column("priority")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_index("ix_hosts_team")
        batch.drop_index("ix_hosts_class")
        for name in ("last_seen_at", "address", "health_note", "healthy", "turbo", "kernel",
                     "cpu_model", "cpu_arch", "server_type", "region"):  # fmt: skip
            batch.drop_column(name)
