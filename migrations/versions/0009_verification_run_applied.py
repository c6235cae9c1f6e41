"""a verification run says what the node enforced

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 04:50:00

A node agent whose runtime plugin (tmc-nri) applied a run's configuration at its containers'
creation reports what was applied with the run; the run keeps it (null for runs reported
without it, as an operator's measured outside the cluster).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("verification_runs", sa.Column("applied", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("verification_runs", "applied")
