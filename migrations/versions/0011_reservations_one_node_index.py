"""reservations keep one index by node

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 19:40:00

`ix_reservations_node_pod` (node, pod) serves every read by node that `ix_reservations_node_name`
served, and the foreign key's checks as well; the single-column index only cost one more index
entry written and removed for every placed pod.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_reservations_node_name", table_name="reservations")


def downgrade() -> None:
    op.create_index("ix_reservations_node_name", "reservations", ["node_name"])
