"""`tmc serve`, `tmc token create`, `tmc db upgrade`: the commands that need the server extra."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from api.app import create_app
from api.auth import Role, new_token, token_hash
from api.db import make_engine, make_session_factory, unit_of_work
from api.demo import ensure_operator_token, load_demo
from api.migrate import upgrade_to_head
from api.orm import ApiToken
from api.settings import get_settings

server_app = typer.Typer(add_completion=False)
token_app = typer.Typer(help="API tokens (stored hashed; shown once).", no_args_is_help=True)
db_app = typer.Typer(help="The service's database.", no_args_is_help=True)


@server_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    demo: Annotated[
        bool, typer.Option(help="Load the demo cluster and example workloads.")
    ] = False,
    workers: Annotated[int, typer.Option(min=1, max=64, help="uvicorn worker processes.")] = 1,
) -> None:
    """Run the API. Migrations are applied first; with --demo, demo data and a token are loaded."""
    settings = get_settings()
    upgrade_to_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings))
    if demo:
        load_demo(sessions)
        token = ensure_operator_token(sessions, settings.bootstrap_operator_token)
        base = f"http://{host}:{port}"
        typer.echo(
            f"""
tmc is starting on {base}  (database: {settings.database_url}, tasks: \
{"Celery via " + settings.effective_broker_url if settings.effective_broker_url else "in-process"})

Operator token (shown once):  {token}
Dashboard:                    {base}/dashboard/  (sign in with the token)

Try:
  export TMC_TOKEN={token}
  curl -s {base}/v1/workloads -H "Authorization: Bearer $TMC_TOKEN" | python3 -m json.tool | head -30
  curl -s {base}/recommend -H "Authorization: Bearer $TMC_TOKEN" -H 'Content-Type: application/json' \\
       -d '{{"workload": "graph500", "objective": "slo:5%"}}' | python3 -m json.tool | head -40
  curl -s {base}/v1/cluster/utilization -H "Authorization: Bearer $TMC_TOKEN"
  open {base}/docs for the OpenAPI documentation
"""
        )
    if workers > 1:
        uvicorn.run("api.app:create_app", factory=True, host=host, port=port, workers=workers)
    else:
        uvicorn.run(create_app(settings), host=host, port=port)


@token_app.command("create")
def token_create(
    role: Annotated[Role, typer.Option(help="agent | scheduler | operator | viewer")],
    name: Annotated[str, typer.Option(help="Who or what holds it.")] = "unnamed",
) -> None:
    """Mint a token; only its hash is stored, so this is the only time it is shown."""
    settings = get_settings()
    upgrade_to_head(settings.database_url)
    token = new_token()
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        session.add(ApiToken(name=name, role=role.value, token_hash=token_hash(token)))
    typer.echo(token)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration."""
    upgrade_to_head(get_settings().database_url)
    typer.echo("database at the latest revision")
