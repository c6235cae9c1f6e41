"""RFC 9457 problem+json for every error the API returns (extender verbs excepted): the one
place where domain errors (api.errors, model.errors) become HTTP responses."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import PROBLEM, ApiError
from api.planning import ClientGone
from model import TmcError
from model.bundle import field_path

log = logging.getLogger("tmc.api")


def problem(status: int, title: str, detail: str, request: Request, **extra: Any) -> JSONResponse:
    body = {
        "type": f"https://tmc.dev/problems/{title.lower().replace(' ', '-')}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        **extra,
    }
    headers = {"Retry-After": "5"} if status == 503 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _body_not_json(request: Request, exc: RequestValidationError) -> bool:
    """A JSON body refused whole because it came with another Content-Type (or none: curl's -d
    sends a form's), rather than a JSON body with a bad field."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        return False
    return any(tuple(e.get("loc", ())) == ("body",) for e in exc.errors())


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(TmcError)
    async def _tmc(request: Request, exc: TmcError) -> JSONResponse:
        if isinstance(exc, ApiError):
            return problem(exc.status, exc.title, exc.detail, request, **exc.extra)
        problems = getattr(exc, "problems", None)
        extra: dict[str, Any] = {}
        if problems:
            extra["errors"] = [{"field": p.field, "message": p.message} for p in problems]
        return problem(exc.status, exc.title, str(exc), request, **extra)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> JSONResponse:
        # Nobody reads this answer; it closes the exchange for the logs and the metrics.
        return problem(499, "Client closed request", "the client left before the answer", request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if _body_not_json(request, exc):
            # The body was not read as JSON at all: its fields are not what is wrong.
            sent = request.headers.get("content-type") or "none"
            return problem(
                415,
                "Unsupported media type",
                f"the body must be JSON sent with Content-Type: application/json (this request's "
                f"Content-Type is {sent}; with curl, add -H 'Content-Type: application/json')",
                request,
            )
        errors = [{"field": field_path(tuple(e["loc"])), "message": e["msg"]} for e in exc.errors()]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return problem(422, "Invalid request", detail, request, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed"}
        resp = problem(
            exc.status_code, title.get(exc.status_code, "Error"), str(exc.detail), request
        )
        if exc.headers:
            resp.headers.update(exc.headers)
        return resp

    @app.exception_handler(OperationalError)
    async def _db_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc.orig)
        return problem(503, "Service unavailable", "the database is unreachable; retry", request)

    @app.exception_handler(DataError)
    async def _unstorable(request: Request, exc: DataError) -> JSONResponse:
        # Input the schema allows but the database cannot hold, e.g. text with NUL characters.
        return problem(
            422,
            "Invalid request",
            f"a value cannot be stored: {str(exc.orig).splitlines()[0]}",
            request,
        )

    @app.exception_handler(DBAPIError)
    async def _db_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return problem(
                503, "Service unavailable", "the database connection was lost; retry", request
            )
        log.exception("database error")
        return problem(500, "Internal error", "a database error occurred", request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return problem(500, "Internal error", "an unexpected error occurred", request)


class ContainUnexpected:
    """An unexpected error becomes a problem+json 500 here, inside the application.

    Starlette's own last-resort handler answers and then re-raises, and the server closes the
    connection on a re-raised error: every 500 would cost a client its keep-alive connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            if started:  # half a response is out: nothing sound can follow on this connection
                raise
            log.exception("unhandled error")
            await send_problem(
                send, 500, "Internal error", "an unexpected error occurred", scope.get("path", "")
            )


async def send_problem(send: Send, status: int, title: str, detail: str, instance: str) -> None:
    """A problem+json response sent as raw ASGI messages, for middleware that answers before (or
    instead of) the application."""
    body = json.dumps(
        {
            "type": f"https://tmc.dev/problems/{title.lower().replace(' ', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": instance,
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
