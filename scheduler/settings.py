"""The publisher's settings: the database's (store.settings) plus its own, from TMC_* variables.

They do not inherit the API's: the publisher runs no HTTP API, no Celery and no Redis."""

from __future__ import annotations

import re
from typing import TypeVar

from pydantic import Field, ValidationError, field_validator

from model.node_contract import MAX_BYTES, PlacementSealKeys, SealKeyError
from model.objectives import DEFAULT_THRESHOLD
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE, BadPod, parse_quantity
from scheduler.tenants import TenantSelectorError, parse_tenant_namespace_labels, selector_text
from store.settings import DatabaseSettings


class FeederSettings(DatabaseSettings):
    # A hung database costs a decision at most a 1 s connect plus a 2 s statement; the pair is
    # then tried again, and the last published object stays in use.
    db_connect_timeout_seconds: int = Field(default=1, ge=1, le=60)
    db_statement_timeout_ms: int = Field(default=2000, ge=1, le=600_000)
    db_lock_timeout_ms: int = Field(default=1000, ge=1, le=600_000)
    # Algorithm 1's cost threshold T for the decisions published.
    default_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1)
    # The extended resource a pod requests to opt in (the engine's optInResource).
    opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE
    kubeconfig: str | None = Field(default=None, description="unset: in-cluster service account")
    resync_seconds: float = Field(default=300.0, gt=0)
    # While the ledger's database is unreachable, the mirror tries again this often.
    mirror_retry_seconds: float = Field(default=2.0, gt=0)
    # How long the mirror gathers a burst's changes before it writes them in one transaction.
    # Its cost is mostly per batch: a burst's rows written every second cost the publisher
    # 0.08 ms of CPU per tiered pod, against 0.20 ms written every 0.2 s (bench.feeder_events
    # --batch), and the mirror is off the placement path.
    mirror_batch_seconds: float = Field(default=1.0, gt=0, le=60)
    watch_timeout_seconds: int = Field(default=240, ge=1)
    # The rack pools' sizes the operator sets (the chart's rackPools, as JSON: {"rack-a":
    # "256Gi"}), authoritative over what nodes publish, as they are for the placement engine.
    rack_pools: dict[str, int] = Field(default_factory=dict, max_length=10_000)
    # The labels of tmc's tenant namespaces (the chart's admission.tenantNamespaceLabels, as
    # key=value pairs): pods elsewhere are neither mirrored nor published for. "": every one.
    tenant_namespace_labels: str = ""
    # The DRA door is on (the chart's dra.enabled): the feeder lists and watches ResourceClaims
    # and mirrors what tmc's allocated ones hold. Off, it asks the API server for none.
    mirror_dra_claims: bool = False
    # The directory of the placement seal keys (the chart's mounted Secret, one file per key):
    # a bound pod's placement counts only when its seal verifies with one of them. "": sealing
    # off, every placement counts.
    placement_seal_keys: str = ""
    # A placement with no seal at all counts too (one with a seal is still verified): for the
    # upgrade from a release that did not seal, while the pods it placed run.
    placement_seal_accept_unsealed: bool = False

    @field_validator("placement_seal_keys")
    @classmethod
    def _seal_keys(cls, directory: str) -> str:
        # Read once here, so that a directory the publisher could not verify with stops it at
        # start, naming the variable, rather than holding every placement to nothing.
        if directory:
            try:
                PlacementSealKeys.from_directory(directory)
            except SealKeyError as exc:
                raise ValueError(str(exc)) from None
        return directory

    def seal_keys(self) -> PlacementSealKeys | None:
        """The keys placements are verified with, read from their directory now (None: sealing
        off). SealKeyError when the directory no longer reads."""
        if not self.placement_seal_keys:
            return None
        return PlacementSealKeys.from_directory(
            self.placement_seal_keys, accept_unsealed=self.placement_seal_accept_unsealed
        )

    @field_validator("tenant_namespace_labels")
    @classmethod
    def _tenant_selector(cls, text: str) -> str:
        try:
            return selector_text(parse_tenant_namespace_labels(text))
        except TenantSelectorError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("rack_pools", mode="before")
    @classmethod
    def _pool_sizes(cls, given: object) -> dict[str, int]:
        if not isinstance(given, dict):
            raise ValueError("a JSON object of pool name to size")
        sizes: dict[str, int] = {}
        for name, text in given.items():
            if not isinstance(name, str) or len(name) > 253 or not _DNS_NAME.match(name):
                raise ValueError(f"{str(name)[:40]!r} is not a DNS subdomain name")
            try:
                size = parse_quantity(text)
            except BadPod as exc:
                raise ValueError(f"{name}: {exc}") from None
            if size != int(size) or not 0 <= size < MAX_BYTES:
                raise ValueError(f"{name}: {str(text)[:40]} must be whole bytes in 0..2^52")
            sizes[name] = int(size)
        return sizes


_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


SettingsT = TypeVar("SettingsT", bound=FeederSettings)


def load_settings(kind: type[SettingsT], who: str) -> SettingsT:
    """The settings from TMC_* variables, or an exit naming each bad variable."""
    try:
        return kind()
    except ValidationError as exc:
        problems = "; ".join(
            f"TMC_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"{who}: bad setting: {problems}") from None
