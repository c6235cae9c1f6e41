"""The schema changes only through migrations: the migrated database matches the ORM exactly,
and the migrations go down and up again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from api.migrate import alembic_config, upgrade_to_head
from store.orm import Base, HostKind
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


def test_host_kinds_registered_before_the_cache_columns_keep_working(
    postgres: PostgresServer,
) -> None:
    # A kind stored by the schema before 0013 reads, after it, as one socket whose LLC size and
    # slow tier are not stated; going down drops the columns and keeps the kind.
    config = alembic_config(postgres.url)
    command.downgrade(config, "0012")
    engine = create_engine(postgres.url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM host_kinds WHERE name = 'before-0013'"))
            conn.execute(
                text(
                    "INSERT INTO host_kinds (name, cpus, dram_bytes, slow_bytes, llc_ways,"
                    " slow_pooled, created_at) VALUES ('before-0013', 12, :gib, 0, 20, false,"
                    " now())"
                ),
                {"gib": 1 << 30},
            )
        upgrade_to_head(postgres.url)
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT sockets, llc_size_bytes, slow_tier, llc_ways FROM host_kinds"
                    " WHERE name = 'before-0013'"
                )
            ).one()
        assert tuple(row) == (1, None, None, 20)
        with Session(engine) as session:
            kind = session.get(HostKind, "before-0013")
            assert kind is not None and kind.sockets == 1 and kind.llc_size_bytes is None
        command.downgrade(config, "0012")
        with engine.connect() as conn:
            assert (
                conn.execute(
                    text("SELECT llc_ways FROM host_kinds WHERE name = 'before-0013'")
                ).scalar_one()
                == 20
            )
    finally:
        upgrade_to_head(postgres.url)
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM host_kinds WHERE name = 'before-0013'"))
        engine.dispose()
