"""a workload has an owner namespace

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 02:40:00

A workload belongs to the Kubernetes namespace whose pods it describes: agents speak for its
bundles and verification runs only from nodes that ran that namespace's pods. Existing workloads
start with none (null): an operator names one, or the first pod placed for the workload does
(`api.services.owners`). The placement log gets an index by node and namespace, the question an
agent's upload asks of it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("workloads", sa.Column("owner", sa.String(length=253), nullable=True))
    op.create_index("ix_placement_log_node_namespace", "placement_log", ["node_name", "namespace"])


def downgrade() -> None:
    op.drop_index("ix_placement_log_node_namespace", table_name="placement_log")
    op.drop_column("workloads", "owner")
