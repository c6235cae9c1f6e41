"""The embedded default's demo cluster and workloads, so a newcomer sees tmc work at once.

Idempotent: loading twice changes nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from api import repositories as repo
from api.auth import Role, new_token, token_hash
from api.services import profiles
from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.store import Placed
from ledger.types import Held, NodeCapacity
from model import InvalidBundle, MachineShape
from model.bundle import HostDescription
from model.capacity import SlowTier
from model.resources import GIB
from store.db import unit_of_work
from store.orm import ApiToken

log = logging.getLogger("tmc.demo")


def example_host() -> HostDescription:
    """The host the example bundles were profiled on: the demo's local nodes run its kind."""
    first = min(EXAMPLES.glob("*.json"))
    return HostDescription.model_validate(json.loads(first.read_text())["host"])


def example_host_kind() -> str:
    return example_host().host_kind


POOLED_KIND = "xeon-12c-48w-dram24g-cxlpool384"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# (node, vCPUs, DRAM GiB, slow GiB, ways): a cluster already partly busy, so that packing
# penalties differ between candidates.
DEMO_RESERVATIONS = [
    ("local-0", 8, 18, 10, 28),
    ("local-1", 6, 20, 4, 20),
    ("local-2", 4, 12, 30, 12),
    ("local-3", 10, 22, 0, 32),
    ("pooled-0", 6, 16, 24, 16),
    ("pooled-1", 8, 20, 40, 24),
]


def load_demo(sessions: sessionmaker[Session]) -> None:
    """The cluster through the ledger (as node agents' capacity and the mirror of bound pods
    write it), then the example workloads, uploaded and fitted as the fit task would."""
    host = example_host()
    local_kind = host.host_kind
    with unit_of_work(sessions) as session:
        # Both kinds have the examples' cache (one socket), so their profiles plan on either;
        # the local kind's slow memory is the examples' own technology.
        local_tier: dict[str, SlowTier] = {"optane": "optane", "cxl_local": "cxl_local"}
        ledger_nodes.register_host_kind(
            session,
            local_kind,
            MachineShape(cpus=12, dram_bytes=24 * GIB, slow_bytes=128 * GIB, llc_ways=48),
            llc_size_bytes=host.llc_size_bytes,
            slow_tier=local_tier.get(host.slow_tier.kind),
        )
        ledger_nodes.register_host_kind(
            session,
            POOLED_KIND,
            MachineShape(
                cpus=12, dram_bytes=24 * GIB, slow_bytes=48 * GIB, llc_ways=48, slow_pooled=True
            ),
            llc_size_bytes=host.llc_size_bytes,
            slow_tier="cxl_pool",
        )
        ledger_nodes.register_pool(session, "rack-b", 384 * GIB)
        for i in range(8):
            ledger_nodes.register_node(
                session, NodeCapacity(f"local-{i}", local_kind, 12, 24 * GIB, 128 * GIB, 48, None)
            )
            ledger_nodes.register_node(
                session, NodeCapacity(f"pooled-{i}", POOLED_KIND, 12, 24 * GIB, 0, 48, "rack-b")
            )
        # Pods bound before the demo starts, as the placement engine would have placed them
        # (the lowest ways; slow memory from the node's rack pool when it has one), mirrored
        # as the publisher mirrors bound pods. Idempotent: a pod already recorded is kept.
        ledger.record(
            session,
            [
                Placed(
                    Held(
                        pod_uid=f"demo-{node}",
                        namespace="demo",
                        pod_name=f"batch-{node}",
                        node=node,
                        vcpus=vcpus,
                        dram_bytes=dram * GIB,
                        slow_bytes=slow * GIB,
                        slow_from_pool=node.startswith("pooled-") and slow > 0,
                        llc_mask=(1 << ways) - 1,
                    ),
                    recommendation_id=None,
                    slow_ratio=0.0,
                )
                for node, vcpus, dram, slow, ways in DEMO_RESERVATIONS
            ],
        )
    for path in sorted(EXAMPLES.glob("*.json")):
        try:
            with unit_of_work(sessions) as session:
                upload = profiles.upload_profile(session, path.read_bytes(), None)
            with unit_of_work(sessions) as session:
                profiles.fit_profile(session, upload.profile.id)
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
