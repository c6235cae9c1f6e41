"""Stable cursors for list endpoints: a page ends where the next one starts, whatever was
inserted or deleted meanwhile (an offset would skip or repeat rows as the log grows).

A cursor is the sort key of the last row a page returned, opaque to the client (URL-safe base64
of its JSON). The next page's URL is in the `Link` header (RFC 8288, `rel="next"`) and its
cursor alone in `X-Next-Cursor`; a page shorter than its limit is the last, and has neither.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import Query
from starlette.requests import Request
from starlette.responses import Response

from api.errors import InvalidInput

MAX_CURSOR_CHARS = 512
# The fleet's lists (nodes, reservations, placements): a page at most this long, so that one
# request's cost does not grow with the fleet.
LIST_PAGE_DEFAULT = 500
LIST_PAGE_MAX = 5000

ListLimit = Annotated[
    int,
    Query(ge=1, le=LIST_PAGE_MAX, description="rows per page; the Link header names the next"),
]

CursorParam = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_CHARS,
        description="where the page starts: the X-Next-Cursor (or the Link header's next URL)"
        " of the page before; omit for the first page",
    ),
]


def encode_cursor(key: list[Any]) -> str:
    raw = json.dumps(key, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, types: tuple[type, ...]) -> list[Any]:
    """The sort key a cursor holds, checked against the types the endpoint sorts by."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError):
        raise InvalidInput("cursor: not a cursor this endpoint gave") from None
    if (
        not isinstance(key, list)
        or len(key) != len(types)
        or not all(isinstance(k, t) for k, t in zip(key, types, strict=True))
    ):
        raise InvalidInput("cursor: not a cursor this endpoint gave")
    return key


def link_next(request: Request, response: Response, key: list[Any] | None) -> None:
    """Point `response` at the page after the one it holds, when there is one."""
    if key is None:
        return
    cursor = encode_cursor(key)
    url = request.url.remove_query_params("cursor").include_query_params(cursor=cursor)
    response.headers["Link"] = f'<{url}>; rel="next"'
    response.headers["X-Next-Cursor"] = cursor
