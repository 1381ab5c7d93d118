"""Autotuning: tuning runs and their evaluations (docs/tuning.md).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tuning_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("service", sa.String(200), nullable=False, index=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("searcher", sa.String(32), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("source_file", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("clusters", sa.Text, nullable=False, server_default=""),
        sa.Column("aa_experiment_id", sa.Integer, nullable=True),
        sa.Column("driver", sa.String(200), nullable=False, server_default=""),
        sa.Column("heartbeat_at", sa.Float, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_table(
        "tuning_evaluations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("tuning_runs.id"), nullable=False, index=True
        ),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("batch", sa.Integer, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("experiment_id", sa.Integer, nullable=True),
        sa.Column("arm", sa.String(100), nullable=False, server_default=""),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("se", sa.Float, nullable=True),
        sa.Column("effect_rel", sa.Float, nullable=True),
        sa.Column("ci_low", sa.Float, nullable=True),
        sa.Column("ci_high", sa.Float, nullable=True),
        sa.Column("mean_control", sa.Float, nullable=True),
        sa.Column("mean_candidate", sa.Float, nullable=True),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.UniqueConstraint("run_id", "position"),
    )


def downgrade() -> None:
    op.drop_table("tuning_evaluations")
    op.drop_table("tuning_runs")
