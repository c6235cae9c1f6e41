"""reservation attempt

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 03:20:00

Which bind attempt made a reservation. A failed Binding releases the row only while its own
attempt is the only one relying on it: a retried bind of the same pod to the same node that
reuses the row clears the owner, so a failed attempt never takes away what another is binding
with (should both fail, reconciliation releases the row).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reservations", sa.Column("attempt", sa.String(length=36), nullable=True))


def downgrade() -> None:
    op.drop_column("reservations", "attempt")
