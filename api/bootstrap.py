"""Insert a cluster's first API tokens, hashed, from files a Kubernetes Secret mounts.

    python -m api.bootstrap --token operator=bootstrap-operator:/etc/tmc/bootstrap/operator-token \
                            --token agent=node-agent:/etc/tmc/agent/token

The Helm chart runs this as an init container of the API, after the migrations: the operator's
first token and the node agents' token exist before the API answers its first request. It is
idempotent and safe to run from every replica at once: a token already stored (active or revoked)
is left as it is, and two replicas inserting the same token race on the table's unique hash, the
loser seeing the winner's row. A revoked token stays revoked: to rotate one, delete its Secret and
upgrade the release (the chart makes a new random one).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.auth import TOKEN_PREFIX, Role, token_hash
from api.settings import Settings
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken

log = logging.getLogger("tmc.bootstrap")

# A token from the chart is "tmc_" and 43 random characters; anything much shorter is a mistake
# (an empty Secret, a placeholder), anything much longer is not a token.
MIN_TOKEN_CHARS = 24
MAX_TOKEN_CHARS = 256
MAX_NAME_CHARS = 128


class BootstrapError(ValueError):
    """A token file or specification that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class TokenSpec:
    role: Role
    name: str
    path: Path


def parse_spec(text: str) -> TokenSpec:
    """`ROLE=NAME:PATH`, e.g. `operator=bootstrap-operator:/etc/tmc/bootstrap/operator-token`."""
    role_text, sep, rest = text.partition("=")
    name, sep2, path = rest.partition(":")
    if not sep or not sep2 or not name or not path:
        raise BootstrapError(f"--token {text!r}: expected ROLE=NAME:PATH")
    try:
        role = Role(role_text)
    except ValueError:
        roles = ", ".join(r.value for r in Role)
        raise BootstrapError(
            f"--token {text!r}: unknown role {role_text!r} (one of {roles})"
        ) from None
    if len(name) > MAX_NAME_CHARS:
        raise BootstrapError(f"--token {text!r}: the name is over {MAX_NAME_CHARS} characters")
    return TokenSpec(role, name, Path(path))


def read_token(path: Path) -> str:
    """The token in `path`, without surrounding whitespace; checked for shape, never logged."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_TOKEN_CHARS + 64)
    except OSError as exc:
        raise BootstrapError(f"{path}: cannot read the token file ({exc.strerror})") from exc
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise BootstrapError(f"{path}: the token is not ASCII") from None
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS or any(c.isspace() for c in token):
        raise BootstrapError(
            f"{path}: not a token ({len(token)} characters; expected {TOKEN_PREFIX}... of "
            f"{MIN_TOKEN_CHARS}-{MAX_TOKEN_CHARS} characters, no spaces)"
        )
    return token


def ensure_token(sessions: sessionmaker[Session], spec: TokenSpec, token: str) -> str:
    """Store `token` with the spec's role unless its hash is stored already. Returns what
    happened: "created", "present" or "revoked" (present but revoked: left revoked)."""
    digest = token_hash(token)

    def existing() -> ApiToken | None:
        with unit_of_work(sessions) as session:
            return session.scalars(select(ApiToken).where(ApiToken.token_hash == digest)).first()

    row = existing()
    if row is None:
        try:
            with unit_of_work(sessions) as session:
                session.add(ApiToken(name=spec.name, role=spec.role.value, token_hash=digest))
            return "created"
        except IntegrityError:
            row = existing()  # another replica inserted it between our read and our write
            if row is None:
                raise
    if row.role != spec.role.value:
        raise BootstrapError(
            f"{spec.path}: this token is stored with role {row.role!r}, not {spec.role.value!r};"
            " give each role its own Secret"
        )
    return "revoked" if row.revoked_at is not None else "present"


def run(settings: Settings, specs: list[TokenSpec]) -> dict[str, str]:
    tokens = [(spec, read_token(spec.path)) for spec in specs]  # every file checked first
    engine = make_engine(settings)
    try:
        sessions = make_session_factory(engine)
        return {spec.name: ensure_token(sessions, spec, token) for spec, token in tokens}
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m api.bootstrap",
        description="Store the first API tokens (hashed) from token files; idempotent.",
    )
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="ROLE=NAME:PATH",
        help="a token file to store with ROLE under NAME (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        specs = [parse_spec(t) for t in args.token]
        if not specs:
            raise BootstrapError("nothing to do: give at least one --token ROLE=NAME:PATH")
        outcome = run(Settings(), specs)
    except (BootstrapError, ValueError) as exc:
        print(f"tmc bootstrap: {exc}", file=sys.stderr)
        return 2
    except OperationalError as exc:
        # The init container is restarted by the kubelet: a database still starting is retried.
        print(f"tmc bootstrap: cannot reach the database: {exc.orig}", file=sys.stderr)
        return 1
    for name, what in outcome.items():
        if what == "revoked":
            log.warning("token %s is revoked: left revoked (delete its Secret to rotate)", name)
        else:
            log.info("token %s: %s", name, what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
