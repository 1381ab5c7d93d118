"""The lab: services, experiments (the queue), arms, builds, trials, hosts, quotas, runs,
verdicts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("service_id", sa.Integer, sa.ForeignKey("services.id"), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("failure", sa.Text, nullable=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("source_file", sa.Text, nullable=False),
        sa.Column("artifacts_dir", sa.Text, nullable=False),
        sa.Column("progress", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", sa.Float, nullable=True),
        sa.Column("claims", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
    )
    op.create_index("ix_experiments_service_id", "experiments", ["service_id"])
    op.create_index("ix_experiments_phase", "experiments", ["phase"])
    op.create_table(
        "arms",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("build_key", sa.String(64), nullable=True),
        sa.Column("build_cached", sa.Boolean, nullable=True),
        sa.Column("artifact", sa.Text, nullable=True),
        sa.Column("build_log", sa.Text, nullable=True),
        sa.UniqueConstraint("experiment_id", "name"),
    )
    op.create_index("ix_arms_experiment_id", "arms", ["experiment_id"])
    op.create_table(
        "builds",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("tree_hash", sa.String(64), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("command", sa.Text, nullable=True),
        sa.Column("artifact", sa.Text, nullable=False),
        sa.Column("log", sa.Text, nullable=True),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("observations", sa.Text, nullable=True),
        sa.Column("processor", sa.String(200), nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.UniqueConstraint("experiment_id", "index"),
    )
    op.create_index("ix_trials_experiment_id", "trials", ["experiment_id"])
    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("machine", sa.String(200), nullable=False),
        sa.Column("cpus", sa.Text, nullable=False),
        sa.Column("facts", sa.Text, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=True),
        sa.Column("team", sa.String(200), nullable=True),
        sa.Column("allocated_at", sa.Float, nullable=True),
        sa.Column("lease_expires_at", sa.Float, nullable=True),
    )
    op.create_index("ix_hosts_experiment_id", "hosts", ["experiment_id"])
    op.create_table(
        "quotas",
        sa.Column("team", sa.String(200), primary_key=True),
        sa.Column("max_hosts", sa.Integer, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("trial", sa.Integer, nullable=False),
        sa.Column("batch", sa.Integer, nullable=False),
        sa.Column("arm", sa.String(100), nullable=False),
        sa.Column("host_id", sa.Integer, sa.ForeignKey("hosts.id"), nullable=False),
        sa.Column("host_index", sa.Integer, nullable=False),
        sa.Column("processor", sa.String(200), nullable=False),
        sa.Column("pgid", sa.Integer, nullable=True),
        sa.Column("port", sa.Integer, nullable=True),
        sa.Column("facts", sa.Text, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("stopped_at", sa.Float, nullable=True),
    )
    op.create_index("ix_runs_experiment_id", "runs", ["experiment_id"])
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("candidate", sa.String(100), nullable=False),
        sa.Column("label", sa.String(16), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("model_reason", sa.Text, nullable=False),
        sa.Column("relative_effect", sa.Float, nullable=True),
        sa.Column("absolute_effect", sa.Float, nullable=True),
        sa.Column("ci_low", sa.Float, nullable=True),
        sa.Column("ci_high", sa.Float, nullable=True),
        sa.Column("p_value", sa.Float, nullable=True),
        sa.Column("threshold", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(32), nullable=False),
    )
    op.create_index("ix_verdicts_experiment_id", "verdicts", ["experiment_id"])


def downgrade() -> None:
    for table in (
        "verdicts", "runs", "quotas", "hosts", "trials", "builds", "arms", "experiments",
        "services",
    ):  # fmt: skip
        op.drop_table(table)
