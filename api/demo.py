"""The embedded default's demo cluster and workloads, so a newcomer sees tmc work at once.

Idempotent: loading twice changes nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from api import repositories as repo
from api import services
from api.auth import Role, new_token, token_hash
from api.db import unit_of_work
from api.orm import ApiToken, Reservation
from model import InvalidBundle, MachineShape
from model.resources import GIB

log = logging.getLogger("tmc.demo")


def example_host_kind() -> str:
    """The host kind the example bundles were profiled on: the demo's local nodes run it."""
    first = min(EXAMPLES.glob("*.json"))
    kind: str = json.loads(first.read_text())["host"]["host_kind"]
    return kind


POOLED_KIND = "xeon-12c-48w-dram24g-cxlpool384"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# (node, vCPUs, DRAM GiB, slow GiB, first way, ways): a cluster already partly busy, so that
# packing penalties differ between candidates.
DEMO_RESERVATIONS = [
    ("local-0", 8, 18, 10, 0, 28),
    ("local-1", 6, 20, 4, 0, 20),
    ("local-2", 4, 12, 30, 0, 12),
    ("local-3", 10, 22, 0, 0, 32),
    ("pooled-0", 6, 16, 24, 0, 16),
    ("pooled-1", 8, 20, 40, 0, 24),
]


def load_demo(sessions: sessionmaker[Session]) -> None:
    local_kind = example_host_kind()
    with unit_of_work(sessions) as session:
        services.register_host_kind(
            session,
            local_kind,
            MachineShape(cpus=12, dram_bytes=24 * GIB, slow_bytes=128 * GIB, llc_ways=48),
        )
        services.register_host_kind(
            session,
            POOLED_KIND,
            MachineShape(
                cpus=12, dram_bytes=24 * GIB, slow_bytes=48 * GIB, llc_ways=48, slow_pooled=True
            ),
        )
        services.register_pool(session, "rack-b", 384 * GIB)
        for i in range(8):
            services.register_node(
                session,
                f"local-{i}",
                local_kind,
                cpus=12,
                dram_bytes=24 * GIB,
                slow_bytes=128 * GIB,
                llc_ways=48,
                pool_name=None,
            )
            services.register_node(
                session,
                f"pooled-{i}",
                POOLED_KIND,
                cpus=12,
                dram_bytes=24 * GIB,
                slow_bytes=0,
                llc_ways=48,
                pool_name="rack-b",
            )
        for node, vcpus, dram, slow, first, ways in DEMO_RESERVATIONS:
            uid = f"demo-{node}"
            if any(r.pod_uid == uid for r in repo.list_reservations(session, node)):
                continue
            session.add(
                Reservation(
                    pod_uid=uid,
                    namespace="demo",
                    pod_name=f"batch-{node}",
                    node_name=node,
                    vcpus=vcpus,
                    dram_bytes=dram * GIB,
                    slow_bytes=slow * GIB,
                    slow_from_pool=node.startswith("pooled"),
                    llc_mask=((1 << ways) - 1) << first,
                )
            )
    for path in sorted(EXAMPLES.glob("*.json")):
        try:
            with unit_of_work(sessions) as session:
                upload = services.upload_profile(session, path.read_bytes(), lambda _: None)
                services.fit_profile(session, upload.profile.id)
        except InvalidBundle as exc:
            log.warning("example %s skipped: %s", path.name, exc)


def ensure_operator_token(sessions: sessionmaker[Session], token: str | None) -> str:
    """A token with the operator role for a local session; reuses `token` when given."""
    token = token or new_token()
    with unit_of_work(sessions) as session:
        if repo.find_token(session, token_hash(token)) is None:
            session.add(
                ApiToken(name="local-operator", role=Role.operator, token_hash=token_hash(token))
            )
    return token
