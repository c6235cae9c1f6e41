"""placement log and node-scoped tokens

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 03:40:00

The placement log records every pod tmc placed: on which node, from which decision, in which
configuration. It outlives the reservation (released when the pod ends), so that a verification
run reported after the pod finished can be checked against the placement it claims. An agent
token may name the node it speaks for; such a token reports runs of that node's pods only.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "placement_log",
        sa.Column("pod_uid", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("pod_name", sa.String(length=253), nullable=False),
        sa.Column("node_name", sa.String(length=253), nullable=False),
        sa.Column("recommendation_id", sa.String(length=36), nullable=True),
        sa.Column("slow_ratio", sa.Float(), nullable=False),
        sa.Column("llc_ways", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("pod_uid", name=op.f("pk_placement_log")),
    )
    op.create_index(
        op.f("ix_placement_log_created_at"), "placement_log", ["created_at"], unique=False
    )
    op.add_column("api_tokens", sa.Column("node", sa.String(length=253), nullable=True))


def downgrade() -> None:
    op.drop_column("api_tokens", "node")
    op.drop_index(op.f("ix_placement_log_created_at"), table_name="placement_log")
    op.drop_table("placement_log")
