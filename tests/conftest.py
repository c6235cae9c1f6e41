"""The suite's shared fixtures live in tests/fixtures/, registered here once for every folder."""

pytest_plugins = (
    "tests.fixtures.database",
    "tests.fixtures.service",
    "tests.fixtures.no_skips_in_ci",
)
