"""The schema changes only through migrations: the migrated database matches the ORM exactly,
and the migrations go down and up again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from api.migrate import alembic_config, upgrade_to_head
from store.orm import Base
from tests.services import PostgresServer


def test_migrated_schema_matches_the_models(postgres: PostgresServer) -> None:
    engine = create_engine(postgres.url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_downgrade_and_upgrade_again(postgres: PostgresServer) -> None:
    config = alembic_config(postgres.url)
    command.downgrade(config, "base")
    upgrade_to_head(postgres.url)
    engine = create_engine(postgres.url)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()
