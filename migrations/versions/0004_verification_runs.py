"""verification runs

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 12:40:00

Measured runs of a workload in configurations tmc chose, kept per profile: the recommendations
of that profile's workload correct the model with them (model/verification.py).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verification_runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("profile_id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("slow_ratio", sa.Float(), nullable=False),
        sa.Column("llc_ways", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_verification_runs_profile_id_profiles"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verification_runs")),
        sa.UniqueConstraint("profile_id", "run_id", name=op.f("uq_verification_runs_profile_id")),
    )
    op.create_index(
        op.f("ix_verification_runs_profile_id"), "verification_runs", ["profile_id"], unique=False
    )
    op.create_index(
        op.f("ix_verification_runs_created_at"), "verification_runs", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_verification_runs_created_at"), table_name="verification_runs")
    op.drop_index(op.f("ix_verification_runs_profile_id"), table_name="verification_runs")
    op.drop_table("verification_runs")
