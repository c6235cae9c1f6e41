"""`tmc serve`, `tmc token create|list|revoke`, `tmc db upgrade`: the commands that need the server
extra.

The database is named explicitly: `--database URL` or `TMC_DATABASE_URL` (default
`sqlite:///./tmc-dev.db`, relative to the current folder). A command never creates a database by
accident: a SQLite file that does not exist is refused, with the fix named, unless the command
is asked to create it (`tmc db upgrade`, `tmc serve --create`); the token commands also refuse a
database whose schema is not at the latest revision.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
import uvicorn
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from pydantic import ValidationError
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from api import tokens
from api import workers as api_workers
from api.app import create_app
from api.auth import Role
from api.demo import ensure_operator_token, load_demo
from api.migrate import alembic_config, upgrade_to_head
from api.settings import Settings
from cli.common import fail, settings_problem, tmc_command
from cli.render import OutputFormat, print_rows
from store.db import make_engine, make_session_factory, unit_of_work

server_app = typer.Typer(add_completion=False)
token_app = typer.Typer(help="API tokens (stored hashed; shown once).", no_args_is_help=True)
db_app = typer.Typer(help="The service's database.", no_args_is_help=True)

T = TypeVar("T")

DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database",
        envvar="TMC_DATABASE_URL",
        show_envvar=True,
        help="The service's database (SQLAlchemy URL), e.g. postgresql+psycopg://tmc@db/tmc or "
        "sqlite:////var/lib/tmc/tmc.db. Default: sqlite:///./tmc-dev.db in the current folder.",
    ),
]
OutputOpt = Annotated[OutputFormat, typer.Option("--output", "-o", help="table | json | yaml")]


# -- the database, named and checked ---------------------------------------------------------


def settings_for(database: str | None) -> Settings:
    try:
        return Settings(database_url=database) if database else Settings()
    except ValidationError as exc:
        fail(settings_problem(exc))


def shown(url: str) -> str:
    """The URL as it may be printed: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (absolute), or None for another database or in-memory."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        fail(
            f"{url!r} is not a database URL; give --database or TMC_DATABASE_URL as e.g. "
            "postgresql+psycopg://user@host/tmc or sqlite:////absolute/path/tmc.db"
        )
    if not parsed.drivername.startswith("sqlite"):
        return None
    if parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).resolve()


def check_database(url: str, *, create: bool) -> None:
    """Refuse a SQLite database that does not exist unless asked to create it."""
    path = sqlite_file(url)
    if path is None or path.exists():
        return
    if not create:
        fail(
            f"no database at {path}; point --database or TMC_DATABASE_URL at the service's "
            f"database, or create a new one there with `{tmc_command()} db upgrade --database {url}`"
        )
    if not path.parent.is_dir():
        fail(f"cannot create {path}: the folder {path.parent} does not exist")


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """A database that cannot be reached, or a migration that fails, is one line."""
    try:
        yield
    except (SQLAlchemyError, CommandError) as exc:
        cause = getattr(exc, "orig", None) or exc
        detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(exc).__name__
        fail(
            f"the database at {shown(url)} cannot be used: {detail} (check that it is running "
            "and that --database or TMC_DATABASE_URL names it)"
        )


def require_latest_schema(engine: Engine, url: str) -> None:
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current != head:
        state = "has no tmc schema" if current is None else f"is at revision {current}"
        fail(
            f"the database at {shown(url)} {state}, not {head}; "
            f"run `{tmc_command()} db upgrade` with the same --database first"
        )


def with_database(database: str | None, action: Callable[[Engine, Settings], T]) -> T:
    """Run a token command against an existing database at the latest revision."""
    settings = settings_for(database)
    url = settings.database_url
    check_database(url, create=False)
    with database_errors(url):
        engine = make_engine(settings)
        try:
            require_latest_schema(engine, url)
            return action(engine, settings)
        finally:
            engine.dispose()


# -- serve ------------------------------------------------------------------------------------


def bind_or_fail(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed: a port that is taken is one line
    with the fix, and no token or banner."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"cannot listen on {host!r}: {exc.strerror} (give --host an address of this machine)")
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    # As uvicorn does: a port in TIME_WAIT from a previous run may be reused; a listening one not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(
                f"port {port} on {host} is already in use; choose a free one with --port N "
                "(./dev start --port N), or stop what listens there"
            )
        if exc.errno == errno.EACCES:
            fail(f"port {port} needs privileges; choose one above 1023 with --port N")
        fail(f"cannot listen on {host}:{port}: {exc.strerror} (check --host and --port)")
    return sock


def reachable_base(host: str, port: int) -> str:
    """The URL a person on this machine opens: a wildcard address is not one."""
    shown_host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in shown_host and not shown_host.startswith("["):
        shown_host = f"[{shown_host}]"
    return f"http://{shown_host}:{port}"


def banner(base: str, settings: Settings, token: str, tmc: str = "tmc") -> str:
    """What `tmc serve --demo` prints first; every command under "Try:" runs as printed from the
    folder the service was started in (`tmc` is how that folder runs this tmc)."""
    tasks = (
        "Celery via " + shown(settings.effective_broker_url)
        if settings.effective_broker_url
        else "in-process"
    )
    return f"""
tmc is starting on {base}  (database: {shown(settings.database_url)}, tasks: {tasks})

Operator token (shown once):  {token}
Dashboard:                    {base}/dashboard/  (sign in with the token)
API documentation:            {base}/docs  and  {base}/redoc  (served locally, no CDN)

Try:
  export TMC_TOKEN={token} TMC_SERVER={base}
  {tmc} get nodes
  {tmc} get placements
  {tmc} verify list graph500
  curl -s {base}/v1/workloads -H "Authorization: Bearer $TMC_TOKEN" | python3 -m json.tool | head -30
  curl -s {base}/recommend -H "Authorization: Bearer $TMC_TOKEN" -H 'Content-Type: application/json' \\
       -d '{{"workload": "graph500", "objective": "slo:5%"}}' | python3 -m json.tool | head -40
"""


@server_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, envvar="TMC_PORT", show_envvar=True, help="Port to listen on."
        ),
    ] = 8000,
    demo: Annotated[
        bool, typer.Option(help="Load the demo cluster and example workloads.")
    ] = False,
    workers: Annotated[
        int,
        typer.Option(min=1, max=64, help="API processes, each with its own socket on the port."),
    ] = 1,
    database: DatabaseOpt = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create the SQLite database if it does not exist.")
    ] = False,
) -> None:
    """Run the API. Migrations are applied first; with --demo, demo data and a token are loaded."""
    sock = bind_or_fail(host, port)
    try:
        settings = settings_for(database)
        check_database(settings.database_url, create=create)
        with database_errors(settings.database_url):
            upgrade_to_head(settings.database_url)
            if demo:
                sessions = make_session_factory(make_engine(settings))
                load_demo(sessions)
                token = ensure_operator_token(sessions, settings.bootstrap_operator_token)
        if demo:
            typer.echo(banner(reachable_base(host, port), settings, token, tmc_command()))
    except BaseException:
        sock.close()
        raise
    if workers > 1:
        # Each worker builds its app from the environment: it must name the same database. Each
        # has its own SO_REUSEPORT socket, so the kernel spreads connections over them (api.workers).
        sock.close()
        os.environ["TMC_DATABASE_URL"] = settings.database_url
        raise typer.Exit(api_workers.serve(host, port, workers))
    else:
        config = uvicorn.Config(create_app(settings), host=host, port=port)
        uvicorn.Server(config).run(sockets=[sock])


# -- tokens -----------------------------------------------------------------------------------


@token_app.command("create")
def token_create(
    role: Annotated[Role, typer.Option(help="agent | scheduler | operator | viewer")],
    name: Annotated[str, typer.Option(help="Who or what holds it.")] = "unnamed",
    node: Annotated[
        str | None,
        typer.Option(
            help="An agent token for this node only: it reports the runs of that node's pods."
        ),
    ] = None,
    database: DatabaseOpt = None,
) -> None:
    """Mint a token; only its hash is stored, so this is the only time it is shown."""
    if node is not None and role is not Role.agent:
        fail("--node is for agent tokens only (--role agent)")

    def create(engine: Engine, _settings: Settings) -> str:
        with unit_of_work(make_session_factory(engine)) as session:
            _info, token = tokens.mint(session, role, name, node)
        return token

    typer.echo(with_database(database, create))


@token_app.command("list")
def token_list(
    database: DatabaseOpt = None,
    include_revoked: Annotated[
        bool, typer.Option("--all", help="Also list revoked tokens.")
    ] = False,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """The tokens (never the tokens themselves): id, name, role, when minted and revoked."""

    def listed(engine: Engine, _settings: Settings) -> list[dict[str, object]]:
        with unit_of_work(make_session_factory(engine)) as session:
            found = tokens.list_tokens(session, include_revoked=include_revoked)
        return [
            {
                "id": t.id,
                "name": t.name,
                "role": t.role,
                "created_at": t.created_at.isoformat(timespec="seconds"),
                "revoked_at": t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else None,
                "node": t.node,
            }
            for t in found
        ]

    rows = with_database(database, listed)
    columns = ["id", "name", "role", "node", "created_at", "revoked_at"]
    print_rows(rows, columns, output, title="Tokens")


@token_app.command("revoke")
def token_revoke(
    name_or_id: Annotated[
        str,
        typer.Argument(metavar="NAME-OR-ID", help="The token's id, or its name if unique."),
    ],
    database: DatabaseOpt = None,
) -> None:
    """Revoke a token: every API process refuses it within 2 seconds."""

    def revoke(engine: Engine, _settings: Settings) -> tokens.TokenInfo:
        try:
            with unit_of_work(make_session_factory(engine)) as session:
                return tokens.revoke(session, name_or_id)
        except tokens.TokenNotFound:
            fail(
                f"unknown or revoked token {name_or_id!r} (see `{tmc_command()} token list --all`)"
            )
        except tokens.AmbiguousToken:
            fail(
                f"several live tokens are named {name_or_id!r}; revoke one by its id "
                f"(see `{tmc_command()} token list`)"
            )

    done = with_database(database, revoke)
    typer.echo(f"revoked token {done.name!r} ({done.role}, id {done.id})")


# -- the database -----------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(database: DatabaseOpt = None) -> None:
    """Apply every pending migration; creates a SQLite database that does not exist yet."""
    url = settings_for(database).database_url
    path = sqlite_file(url)
    created = path is not None and not path.exists()
    check_database(url, create=True)
    with database_errors(url):
        upgrade_to_head(url)
    if created:
        typer.echo(f"created a new database at {path}")
    typer.echo(f"database {shown(url)} at the latest revision")
