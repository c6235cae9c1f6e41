"""live profiles

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 05:00:00

A profile is live when a caller that may upload (an agent or an operator) sent it; only live
profiles become what a workload's recommendations use. An inline bundle sent with /recommend by
any other role is kept, for the decision's audit, but never live.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("live", sa.Boolean(), nullable=False, server_default=sa.true())
        )


def downgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_column("live")
