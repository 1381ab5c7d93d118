"""The dashboard and HTTP API: API tokens, commands an admin registered per service,
triage of regressions and its audit log, periodic A/A schedules; who submitted an
experiment and why; indexes for the experiments list at 10,000 rows.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(
            sa.Column("submitted_by", sa.String(200), nullable=False, server_default="cli")
        )
        batch.add_column(sa.Column("origin", sa.String(32), nullable=False, server_default=""))
        batch.drop_index("ix_experiments_service_id")
        batch.create_index("ix_experiments_service_id", ["service_id", "id"])
        batch.create_index("ix_experiments_team_id", ["team", "id"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_used_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_table(
        "registered_commands",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("service", sa.String(200), nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("registered_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("service", "kind", "command"),
    )
    op.create_table(
        "triage",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id"),
            nullable=False,
            index=True,
        ),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("candidate", sa.String(100), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("at", sa.Float, nullable=False),
        sa.UniqueConstraint("experiment_id", "metric", "candidate"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
    )
    op.create_table(
        "aa_schedules",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_file", sa.Text, nullable=False, unique=True),
        sa.Column("service", sa.String(200), nullable=False, index=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("every_s", sa.Float, nullable=False),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("last_experiment_id", sa.Integer, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("aa_schedules", "audit_log", "triage", "registered_commands", "api_tokens"):
        op.drop_table(table)
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_team_id")
        batch.drop_index("ix_experiments_service_id")
        batch.create_index("ix_experiments_service_id", ["service_id"])
        batch.drop_column("origin")
        batch.drop_column("submitted_by")
