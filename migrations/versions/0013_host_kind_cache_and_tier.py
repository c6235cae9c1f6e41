"""a host kind states its sockets, one socket's LLC size and its slow tier

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 03:10:00

The capacity planner carries a profile's LLC ways over to a kind's cache by bytes, and says when
a kind's slow memory is another technology than the profile's: a registered host kind now
records what that needs. Existing kinds read as before: one socket, their LLC size and slow tier
not stated (null).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("host_kinds", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("sockets", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )
        batch_op.add_column(sa.Column("llc_size_bytes", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("slow_tier", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("host_kinds", schema=None) as batch_op:
        batch_op.drop_column("slow_tier")
        batch_op.drop_column("llc_size_bytes")
        batch_op.drop_column("sockets")
