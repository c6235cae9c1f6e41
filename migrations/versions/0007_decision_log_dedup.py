"""decisions counted, not repeated; indexes for the decision log's retention

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 01:10:00

A decision that repeats its (workload, objective) pair's last one is counted on that row
(`repeats`, `last_decided_at`) instead of stored again; `decision_key` identifies what it was
decided from and what it chose. The pair's newest decision is found by an index, and the
retention of decisions checks the placement log and the reservations through theirs.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "recommendations",
        sa.Column("decision_key", sa.String(length=64), nullable=False, server_default=""),
    )
    op.add_column(
        "recommendations",
        sa.Column("repeats", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "recommendations",
        sa.Column("last_decided_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_recommendations_pair",
        "recommendations",
        ["workload_id", "objective", "created_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_placement_log_recommendation_id"),
        "placement_log",
        ["recommendation_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_reservations_recommendation_id"),
        "reservations",
        ["recommendation_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_reservations_recommendation_id"), table_name="reservations")
    op.drop_index(op.f("ix_placement_log_recommendation_id"), table_name="placement_log")
    op.drop_index("ix_recommendations_pair", table_name="recommendations")
    op.drop_column("recommendations", "last_decided_at")
    op.drop_column("recommendations", "repeats")
    op.drop_column("recommendations", "decision_key")
