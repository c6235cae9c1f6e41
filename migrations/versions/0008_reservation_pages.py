"""reservations paged by node and pod uid

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 04:30:00

`GET /v1/cluster/reservations` and `GET /v1/placements` return a page at a time, ordered by
(node, pod uid); the index serves both the order and the cursor's comparison, so a page costs
the same at 100 reservations or 100,000.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_reservations_node_pod", "reservations", ["node_name", "pod_uid"])


def downgrade() -> None:
    op.drop_index("ix_reservations_node_pod", table_name="reservations")
