"""The service tests' fixtures (real PostgreSQL and Redis, migrations applied), for the commands
that talk to the service's database or its API."""

from tests.api.conftest import client, postgres, redis_server, settings  # noqa: F401
