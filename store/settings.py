"""What every process that opens the database needs to know, read from TMC_* variables.

The API's settings and the extender's each extend these; neither inherits the other's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TMC_", extra="ignore")

    environment: Literal["dev", "test", "production"] = "dev"
    database_url: str = "sqlite:///./tmc-dev.db"
    # Every wait is bounded. The database: connecting, one statement, one lock wait, and (for a
    # server that stops answering altogether) a connection held past db_hold_seconds is cut.
    db_connect_timeout_seconds: int = Field(default=3, ge=1, le=60)
    db_statement_timeout_ms: int = Field(default=5000, ge=1, le=600_000)
    db_lock_timeout_ms: int = Field(default=2000, ge=1, le=600_000)
    db_hold_seconds: float = Field(default=10.0, gt=0, le=3600)
    sqlite_busy_timeout_seconds: float = Field(default=5.0, gt=0, le=600)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
