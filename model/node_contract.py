"""What crosses between the scheduler and the node: one definition, imported by both sides.

Three shapes cross that boundary, all as Kubernetes object metadata or a file on the node:

- **Node capacity** (agent -> scheduler): a label and annotations on the Node object that say what
  tiered memory and LLC ways the node has (`NodeCapacity`).
- **Placement** (scheduler -> node): the annotations tmc's Binding writes on the pod, with what
  the pod was given: its configuration, its CAT mask and the per-structure plan (`Placement`),
  sealed with a key only tmc's components hold (`PlacementSealKeys`): a placement whose seal
  does not verify is no placement of tmc's, whoever wrote it.
- **Recommendation** (service -> scheduler): the configuration tmc recommends for a workload and
  objective, published before its pods are scheduled as a `TieredRecommendation` object (or pinned
  on one pod as the `tmc.dev/recommendation` annotation), so that placing a pod needs no call to
  the service (`Recommendation`).
- **Plan file** (agent -> the allocator shim in the pod): per tag, the bytes it may place on the
  fast node (`render_plan_file`; the shim's parser is `parse_plan` in alloc/tmc_alloc.c).
- **Machine pattern** (operator -> scheduler): the `tmc.dev/pattern` annotation on a Node, the
  VMs of each workload and configuration that a capacity plan put on the machine this node
  stands for (`NodePattern`); placement prefers the nodes whose pattern has room for a pod's
  workload (`model/patterns.py`).

Every number is bounded so that no annotation, however it was written, can overflow a computation
downstream: bytes below 2^52 (4 PiB), at most 64 LLC ways (CAT masks are 64-bit at most), at most
4,096 vCPUs. The Python sides (the API, the publisher and its feeder, the agent) parse with these
models and nothing else; the Go sides (the engine behind tmc-scheduler and tmc-extender, and
tmc-nri) parse with the API types of scheduler/plugin/pkg/apis/tmc, whose generated JSON Schema
and the tables in scheduler/conformance hold both to the same answers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

GROUP = "tmc.dev"

# A pod opts in by requesting this extended resource (managedResources, ignoredByScheduler).
OPT_IN_RESOURCE = f"{GROUP}/tiered"
# ...and carries this label, with exactly this value: the admission policies select pods by it
# (nothing else of a pod is selectable before the API server converts it for CEL), so a
# placement is trusted only on a pod carrying it (is_tiered_pod; scheduler/conformance/
# tiered_pods.json holds the API types and the chart to the same rule).
TIERED_POD_LABEL = f"{GROUP}/tiered"
TIERED_POD_LABEL_VALUE = "true"
# Set by whoever writes the pod.
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
OBJECTIVE_ANNOTATION = f"{GROUP}/objective"
# Written by tmc's Binding (either front door).
PLACEMENT_ANNOTATION = f"{GROUP}/placement"
LLC_MASK_ANNOTATION = f"{GROUP}/llc-mask"
# The seal over the two above (`PlacementSealKeys`): "v1:<key id>:<MAC>".
PLACEMENT_SEAL_ANNOTATION = f"{GROUP}/placement-seal"
# Written by the node agent on its Node.
HOST_KIND_LABEL = f"{GROUP}/host-kind"
CPUS_ANNOTATION = f"{GROUP}/cpus"
DRAM_ANNOTATION = f"{GROUP}/dram-bytes"
SLOW_ANNOTATION = f"{GROUP}/slow-bytes"
LLC_WAYS_ANNOTATION = f"{GROUP}/llc-ways"
SLOW_POOL_ANNOTATION = f"{GROUP}/slow-pool"
SLOW_POOL_BYTES_ANNOTATION = f"{GROUP}/slow-pool-bytes"
# What the node cannot enforce (JSON), for an operator reading `kubectl describe node`.
AGENT_STATUS_ANNOTATION = f"{GROUP}/agent-status"
# "true" on a pod that runs the workload's profiled input: when it succeeds, the node agent reports
# its run time as a verification run (model/verification.py).
VERIFICATION_RUN_ANNOTATION = f"{GROUP}/verification-run"
# The problem title the service answers a run with when its placement log holds no such pod.
# The log is the ledger's mirror of the bound pods, written a moment after the bind, so the agent
# retries this refusal for a while (a short run may finish first) and settles any other at once.
RUN_NOT_PLACED = "Run not placed"

RECOMMENDATION_ANNOTATION = f"{GROUP}/recommendation"
# Written by the operator (`tmc plan patterns apply`) on a Node: a capacity plan's machine.
PATTERN_ANNOTATION = f"{GROUP}/pattern"
PATTERN_SCHEMA = "tmc.pattern/v1"
MAX_PATTERN_SLOTS = 64  # (workload, configuration) pairs on one machine
MAX_SLOT_VMS = 4096  # a VM takes at least one vCPU (MAX_CPUS)
MAX_PATTERN_MACHINES = 100_000  # the planner's own bound on VMs at once
MAX_PATTERN_ANNOTATION = 64 * 1024
# The recommendation's wire version: the service's answers (`model.recommendation`) and what the
# scheduler reads carry the same one.
RECOMMENDATION_SCHEMA: Final = "tmc.recommendation/v1"
# The custom resource the recommendation publisher writes and the scheduler plugin watches:
# cluster-scoped, one object per (workload, objective), its spec a `Recommendation`.
RECOMMENDATION_VERSION = "v1alpha1"
RECOMMENDATION_KIND = "TieredRecommendation"
RECOMMENDATION_PLURAL = "tieredrecommendations"

PLACEMENT_SCHEMA = "tmc.placement/v2"
# v1 had no per-structure plan; pods bound by an older extender still carry it.
PLACEMENT_SCHEMAS = ("tmc.placement/v1", PLACEMENT_SCHEMA)
PLAN_FILE_VERSION = "tmc placement plan v1"

MAX_BYTES = 1 << 52
MAX_LLC_WAYS = 64
MAX_CPUS = 4096

Bytes = Annotated[int, Field(ge=0, lt=MAX_BYTES)]
# Kubernetes names: DNS subdomains (nodes, pools) at most 253 characters.
Name = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]
# The bundle's tag alphabet (model.bundle.Tag): no whitespace, so a plan-file line splits cleanly.
Tag = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/()\[\]<>-]+$")]
_HEX_MASK = re.compile(r"^0x[0-9a-fA-F]{1,16}$")


def tiered_pod_labels() -> dict[str, str]:
    """The labels that make a pod one of tmc's, as a new mapping for a pod's metadata."""
    return {TIERED_POD_LABEL: TIERED_POD_LABEL_VALUE}


# The same rule as a label selector, for the API server to apply: a watch or listing of tmc's
# pods only.
TIERED_POD_SELECTOR = f"{TIERED_POD_LABEL}={TIERED_POD_LABEL_VALUE}"


def is_tiered_pod(labels: Mapping[str, Any] | None) -> bool:
    """Whether a pod's labels make it one of tmc's (v1alpha1.IsTieredPod): the tiered label with
    exactly its value. A placement on any other pod was checked by no admission policy."""
    return labels is not None and labels.get(TIERED_POD_LABEL) == TIERED_POD_LABEL_VALUE


class ContractError(ValueError):
    """Metadata that claims to follow the contract but cannot be read; the message says where."""


def _short(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "value"
    return f"{where}: {first['msg']}"


_ASCII_SPACE = " \t\n\v\f\r"


def _int_text(ann: dict[str, str], key: str) -> int | None:
    """A decimal integer annotation, bounded before it is converted (no 10^6-digit strings)."""
    raw = ann.get(key)
    if raw is None or raw == "":
        return None
    # Trimmed of ASCII whitespace only, as the Go engine trims it (str.strip alone would also
    # take \x1c-\x1f and Unicode spaces, which no writer puts around a number).
    text = str(raw).strip(_ASCII_SPACE)
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ContractError(f"{key}: {text[:40]!r} is not a non-negative integer below 2^63")
    return int(text)


# --- node capacity ------------------------------------------------------------------------------


class NodeCapacity(BaseModel):
    """A node's tiered capacity as its agent publishes it. Pooled slow memory is accounted on the
    pool (`slow_pool`, `slow_pool_bytes`), never in `slow_bytes`, which is node-local only."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # A label value, as the agent writes it (the tmc.dev/host-kind label): the annotation form
    # is held to the same grammar, so that every reader counts its 63 characters alike.
    host_kind: Annotated[
        str,
        Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"),
    ] = "unknown"
    cpus: Annotated[int, Field(ge=1, le=MAX_CPUS)] | None = None  # None: the node's allocatable
    dram_bytes: Bytes
    slow_bytes: Bytes = 0
    llc_ways: Annotated[int, Field(ge=1, le=MAX_LLC_WAYS)]
    slow_pool: Name | None = None
    slow_pool_bytes: Bytes | None = None

    def to_metadata(self) -> tuple[dict[str, str], dict[str, str]]:
        """(labels, annotations) for the Node object."""
        ann = {
            DRAM_ANNOTATION: str(self.dram_bytes),
            SLOW_ANNOTATION: str(self.slow_bytes),
            LLC_WAYS_ANNOTATION: str(self.llc_ways),
        }
        if self.cpus is not None:
            ann[CPUS_ANNOTATION] = str(self.cpus)
        if self.slow_pool is not None:
            ann[SLOW_POOL_ANNOTATION] = self.slow_pool
            if self.slow_pool_bytes is not None:
                ann[SLOW_POOL_BYTES_ANNOTATION] = str(self.slow_pool_bytes)
        return {HOST_KIND_LABEL: self.host_kind}, ann

    @classmethod
    def from_metadata(
        cls, labels: dict[str, str] | None, annotations: dict[str, str] | None
    ) -> NodeCapacity | None:
        """None for a node that publishes no tiered capacity (not a tmc node); ContractError for
        one that publishes it unreadably."""
        labels, ann = labels or {}, annotations or {}
        if DRAM_ANNOTATION not in ann or LLC_WAYS_ANNOTATION not in ann:
            return None
        pool = ann.get(SLOW_POOL_ANNOTATION) or None
        try:
            return cls(
                host_kind=str(labels.get(HOST_KIND_LABEL) or ann.get(HOST_KIND_LABEL) or "unknown"),
                cpus=_int_text(ann, CPUS_ANNOTATION),
                dram_bytes=_int_text(ann, DRAM_ANNOTATION),
                slow_bytes=_int_text(ann, SLOW_ANNOTATION) or 0,
                llc_ways=_int_text(ann, LLC_WAYS_ANNOTATION),
                slow_pool=pool,
                slow_pool_bytes=_int_text(ann, SLOW_POOL_BYTES_ANNOTATION) if pool else None,
            )
        except ValidationError as exc:
            raise ContractError(f"node capacity: {_short(exc)}") from exc


# --- placement ----------------------------------------------------------------------------------


class StructurePlan(BaseModel):
    """How much of one tagged structure goes to each tier (the paper's §3.4 plan)."""

    # strict: "5", 5.0 or true is not a count of bytes (the Go readers refuse them too)
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    tag: Tag
    fast_bytes: Bytes
    slow_bytes: Bytes


class PlacedConfiguration(BaseModel):
    # strict: a number's text, an integer written as a float or a boolean is refused (the Go
    # readers refuse them too); an integer is a float, as 0 is 0.0 to Go
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    vcpus: Annotated[int, Field(ge=1, le=MAX_CPUS)]
    dram_bytes: Bytes
    slow_bytes: Bytes
    slow_ratio: Annotated[float, Field(ge=0.0, le=1.0)]
    llc_ways: Annotated[int, Field(ge=1, le=MAX_LLC_WAYS)]


class PlanSource(BaseModel):
    """Where a placement's per-structure plan is published: the `TieredRecommendation` and the
    generation the pod was placed from (the node sizes that object's plan to the placement), with
    the object's uid: an object deleted and made again under the same name counts its generations
    from 1 again. Placements written before the uid was named have none (the node then matches
    name and generation alone)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    recommendation: Annotated[
        str,
        Field(
            min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", strict=True
        ),
    ]
    generation: Annotated[int, Field(ge=1, strict=True)]  # metadata.generation
    # metadata.uid; left out of the JSON when absent, as the engine writes it.
    uid: (
        Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$", strict=True)]
        | None
    ) = None

    @field_validator("generation")
    @classmethod
    def _int64(cls, value: int) -> int:
        # An int64, as Go reads it: a larger number is refused there, so it is here.
        if value >= 1 << 63:
            raise ValueError("must be an int64")
        return value


class Placement(BaseModel):
    """What bind gave a pod: the `tmc.dev/placement` annotation (JSON) and, redundantly for
    tools that read one value, `tmc.dev/llc-mask` (hex). In `tmc.placement/v3` the plan may be
    left on the published recommendation `plan_from` names, so that the pod carries a reference
    rather than the plan."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    schema_: Literal["tmc.placement/v1", "tmc.placement/v2", "tmc.placement/v3"] = Field(
        default="tmc.placement/v2", alias="schema"
    )
    node: Annotated[str, Field(min_length=1, max_length=253)]
    workload: Annotated[str, Field(max_length=253)] | None = None
    objective: Annotated[str, Field(max_length=64)] = "cheapest"
    configuration: PlacedConfiguration
    # hex, "0xf0": a contiguous run of ways
    llc_mask: Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{1,16}$")]
    # strict: "true" is not a boolean (the Go reader refuses it too), and no writer writes it
    slow_from_pool: Annotated[bool, Field(strict=True)] = False
    recommendation_id: Annotated[str, Field(max_length=64)] | None = None
    fallback: Annotated[str, Field(max_length=512)] | None = None  # why, when it was used
    # Per structure, fast and slow bytes; empty for a fallback (all of it in DRAM).
    plan: Annotated[list[StructurePlan], Field(max_length=4096)] = []
    # The fallback's cause as a code (the contract schema's x-tmc-fallback-reasons are the
    # engine's; any CamelCase word is read, for newer engines' codes). Written only with a
    # fallback, and left out of the JSON when absent, as the engine writes it.
    fallback_reason: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z]{0,63}$")] | None = None
    # The published recommendation the node reads the plan from (v3 only; left out when absent).
    plan_from: PlanSource | None = None
    # Whose size the configuration's bytes are: the pod's memory request split by the
    # recommendation ("request"; also when absent, as in placements written before the field),
    # or the recommendation's own bytes, for a pod that requests no memory ("recommendation").
    # The node limits a container to the placement's bytes only when they are its pod's request.
    # Written only as "recommendation", and left out of the JSON when absent, as the engine
    # writes it.
    sized_from: Literal["request", "recommendation"] | None = None

    @field_validator("llc_mask")
    @classmethod
    def _mask(cls, value: str) -> str:
        if not _HEX_MASK.match(value):
            raise ValueError("must be a hex CAT mask such as 0xf0 (at most 64 bits)")
        mask = int(value, 16)
        low = mask & -mask
        if mask == 0 or (mask + low) & mask != 0:
            raise ValueError("must be a non-empty run of contiguous ways")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Placement:
        if self.fallback_reason is not None and self.fallback is None:
            raise ValueError("fallback_reason: given without a fallback")
        if self.plan_from is not None and self.schema_ != "tmc.placement/v3":
            raise ValueError("plan_from: only in tmc.placement/v3")
        if self.plan_from is not None and (self.plan or self.fallback is not None):
            raise ValueError("plan_from: given with a plan or a fallback")
        if self.sized_from == "recommendation" and self.fallback is not None:
            raise ValueError("sized_from: a fallback is the pod's request, not a recommendation's")
        if self.llc_mask_bits.bit_count() != self.configuration.llc_ways:
            raise ValueError("llc_mask and configuration.llc_ways disagree")
        if self.plan:
            fast = sum(s.fast_bytes for s in self.plan)
            slow = sum(s.slow_bytes for s in self.plan)
            if fast > self.configuration.dram_bytes or slow > self.configuration.slow_bytes:
                raise ValueError("the plan places more in a tier than the configuration holds")
        return self

    @property
    def llc_mask_bits(self) -> int:
        return int(self.llc_mask, 16)

    def to_annotations(self) -> dict[str, str]:
        body = self.model_dump(mode="json", by_alias=True)
        for absent_left_out in ("fallback_reason", "plan_from", "sized_from"):
            if body[absent_left_out] is None:
                del body[absent_left_out]
        if "plan_from" in body and body["plan_from"]["uid"] is None:
            del body["plan_from"]["uid"]
        return {
            PLACEMENT_ANNOTATION: json.dumps(body, separators=(",", ":")),
            LLC_MASK_ANNOTATION: self.llc_mask,
        }

    @classmethod
    def from_annotations(cls, annotations: dict[str, Any] | None) -> Placement | None:
        """None when the pod has no placement; ContractError when it has an unreadable one or
        the two annotations disagree."""
        ann = annotations or {}
        raw = ann.get(PLACEMENT_ANNOTATION)
        if not raw:
            return None
        if not isinstance(raw, str) or len(raw) > 256 * 1024:  # the API server's own limit
            raise ContractError(f"{PLACEMENT_ANNOTATION} is not a JSON string under 256 KiB")
        try:
            # By the JSON names only: `schema_` is the Python field's name, never a key the
            # writers write, and the Go readers refuse it as unknown.
            placement = cls.model_validate_json(raw, by_name=False)
        except ValidationError as exc:
            raise ContractError(f"{PLACEMENT_ANNOTATION}: {_short(exc)}") from exc
        # A key given twice: the decoders keep the last value, the Go reader's scan would judge
        # the first; no writer repeats one, so every reader refuses it.
        try:
            json.loads(raw, object_pairs_hook=_once_each)
        except ValueError as exc:
            raise ContractError(f"{PLACEMENT_ANNOTATION}: {exc}") from exc
        side = ann.get(LLC_MASK_ANNOTATION)
        if side is not None:
            text = str(side)
            if not _HEX_MASK.match(text) or int(text, 16) != placement.llc_mask_bits:
                raise ContractError(
                    f"{LLC_MASK_ANNOTATION} {text[:40]!r} disagrees with the placement"
                )
        return placement


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members, refused when one key is given twice."""
    body = dict(pairs)
    if len(body) != len(pairs):
        raise ValueError("a key is given twice")
    return body


# --- placement seal ---------------------------------------------------------------------------

# A Binding's annotations are copied onto its pod, so whoever may bind a pod may write its
# placement. The engine therefore seals each placement it writes: an HMAC-SHA256, under a key only
# tmc's components hold, over the pod's UID and the placement's exact text. Every reader trusts
# only a placement whose seal it verifies. The seal's text and message are the API types'
# (v1alpha1.SealKeys); scheduler/conformance/placement_seals.json holds both sides to them.

SEAL_VERSION: Final = "v1"
# Starts every message, so that a MAC made for anything else is never a seal.
_SEAL_DOMAIN: Final = b"tmc.dev/placement-seal/v1"
# 32 bytes are the MAC's own strength; a key file longer than a few lines is not a key.
MIN_SEAL_KEY_BYTES: Final = 32
MAX_SEAL_KEY_BYTES: Final = 1024
# The keys in use and those being rotated in or out.
MAX_SEAL_KEYS: Final = 16
# A seal is "v1:", a DNS label, ":" and 43 characters of MAC: anything much longer is not one.
MAX_SEAL_BYTES: Final = 200
# How often at most a seal naming a key not held re-reads the key directory: a Secret volume is
# updated in place when a key is added.
SEAL_RELOAD_SECONDS: Final = 10.0
# A key's id: a Secret data key that is also a DNS label, so that it reads the same in a file
# name, a flag and a seal. Matched whole (fullmatch): "$" would let a trailing newline through,
# which the Go reader refuses.
_SEAL_KEY_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


class SealError(ContractError):
    """A placement whose seal does not verify: the message says why. The placement holds
    nothing, as an unreadable one does."""


class SealKeyNotHeld(SealError):
    """A seal naming a key this component does not hold, perhaps not yet: a key added to the
    Secret reaches each reader's volume in its own time, and is read at most every
    `SEAL_RELOAD_SECONDS`. A reader that remembers verdicts verifies such a placement again."""


class SealKeyError(ContractError):
    """Placement seal keys that cannot be used: a directory that cannot be read, a key of the
    wrong size, a file name that is not a key id, too many keys or none."""


def _wire(text: str) -> bytes:
    """A string's bytes as the Go readers hold it: UTF-8, a lone surrogate (which only a JSON
    escape can make, and Go's decoder reads as U+FFFD) as U+FFFD."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()


def seal_message(pod_uid: str, placement: str, llc_mask: str) -> bytes:
    """What a seal's MAC is taken over: the domain, then the pod's UID, the placement annotation
    and the LLC-mask annotation ("" when the pod has none), each after a newline as its length
    in bytes, a colon and its bytes. Lengths first, so that no two triples give one message."""
    parts = [_SEAL_DOMAIN]
    for field in (pod_uid, placement, llc_mask):
        raw = _wire(field)
        parts += [b"\n", str(len(raw)).encode(), b":", raw]
    return b"".join(parts)


def _mac(key: bytes, message: bytes) -> str:
    digest = hmac.new(key, message, "sha256").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _check_seal_key(key_id: str, key: bytes) -> None:
    if not _SEAL_KEY_ID.fullmatch(key_id):
        raise SealKeyError(f"{key_id[:70]!r} is not a placement seal key id (a DNS label)")
    if not MIN_SEAL_KEY_BYTES <= len(key) <= MAX_SEAL_KEY_BYTES:
        raise SealKeyError(
            f"placement seal key {key_id} has {len(key)} bytes,"
            f" not {MIN_SEAL_KEY_BYTES}..{MAX_SEAL_KEY_BYTES}"
        )


def _read_seal_keys(directory: str) -> dict[str, bytes]:
    """Every key of a directory laid out as a mounted Secret: a regular file per key, named by
    its id, its bytes less trailing whitespace the key; names starting with "." (the volume's
    `..data` and its timestamped directories) are the volume's own."""
    try:
        names = sorted(os.listdir(directory))  # in Go's order, so the same file is refused first
    except OSError as exc:
        raise SealKeyError(f"placement seal keys: {directory}: {exc.strerror or exc}") from None
    keys: dict[str, bytes] = {}
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(directory, name)
        try:
            info = os.stat(path)  # followed: a Secret volume's keys are links into its ..data
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_size > MAX_SEAL_KEY_BYTES + 64:
                raise SealKeyError(
                    f"placement seal key {name[:70]}: {info.st_size} bytes is not a key"
                )
            with open(path, "rb") as fh:
                raw = fh.read(MAX_SEAL_KEY_BYTES + 65)
        except OSError as exc:
            raise SealKeyError(f"placement seal keys: {path}: {exc.strerror or exc}") from None
        key = raw.rstrip(b" \t\r\n")
        _check_seal_key(name, key)
        if len(keys) == MAX_SEAL_KEYS:
            raise SealKeyError(f"more than {MAX_SEAL_KEYS} placement seal keys in {directory}")
        keys[name] = key
    return keys


class PlacementSealKeys:
    """The keys that seal placements and verify their seals, and the id of the one that seals
    (None for a reader, which only verifies). Read from a directory (`from_directory`), they are
    read again when a seal names a key not held, at most every `SEAL_RELOAD_SECONDS`, so that a
    key added to the Secret verifies without a restart. Safe to share between threads: the keys
    are replaced whole, never changed in place. No keys at all (None where a reader takes them)
    is sealing off: every placement verifies, as before seals."""

    def __init__(
        self,
        keys: Mapping[str, bytes | str],
        signing: str | None = None,
        *,
        directory: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        accept_unsealed: bool = False,
    ) -> None:
        """`keys`: id -> key (text is its UTF-8 bytes; taken as given, not trimmed).
        `directory`: where they were read, read again for a key not held (None: fixed keys).
        `clock`: seconds, for the re-read's pace. `accept_unsealed`: a placement with no seal
        at all verifies (one with a seal is still checked): for the upgrade from a release that
        did not seal, while the pods it placed run."""
        own: dict[str, bytes] = {}
        for key_id, key in keys.items():
            raw = key.encode() if isinstance(key, str) else bytes(key)
            _check_seal_key(key_id, raw)
            own[key_id] = raw
        where = directory if directory is not None else "the given keys"
        if not own:
            raise SealKeyError(f"no placement seal key in {where}")
        if signing is not None and signing not in own:
            raise SealKeyError(
                f"the signing key {signing[:70]!r} is not one of the keys in {where}"
            )
        self._signing = signing
        self.accept_unsealed = accept_unsealed
        self._directory = directory
        self._clock = clock
        self._keys: Mapping[str, bytes] = MappingProxyType(own)
        self._loaded = clock()
        self._reload_lock = threading.Lock()  # one re-read at a time

    @classmethod
    def from_directory(
        cls,
        directory: str | os.PathLike[str],
        signing: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        accept_unsealed: bool = False,
    ) -> PlacementSealKeys:
        """The keys of a directory laid out as a mounted Secret (one file per key, named by its
        id, its bytes less trailing spaces, tabs, CRs and LFs the key); SealKeyError when it
        cannot be read or holds a file that is not a key, no key, or more than 16."""
        path = os.fspath(directory)
        if path == "":
            # Not the working directory: "" is sealing off, which the caller decides.
            raise SealKeyError("no placement seal key directory given")
        return cls(
            _read_seal_keys(path),
            signing,
            directory=path,
            clock=clock,
            accept_unsealed=accept_unsealed,
        )

    @property
    def signing(self) -> str | None:
        """The id of the key that seals (None: this component only verifies)."""
        return self._signing

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys held now, sorted."""
        return sorted(self._keys)

    def seal(self, pod_uid: str, annotations: Mapping[str, Any] | None) -> str:
        """The seal of a pod's placement annotations (the placement and, when it has one, the
        LLC mask) with the signing key, as the engine writes it."""
        if self._signing is None:
            raise SealKeyError("no signing key: this component only verifies placement seals")
        ann = annotations or {}
        key = self._keys[self._signing]
        message = seal_message(
            pod_uid, _seal_field(ann, PLACEMENT_ANNOTATION), _seal_field(ann, LLC_MASK_ANNOTATION)
        )
        return f"{SEAL_VERSION}:{self._signing}:{_mac(key, message)}"

    def verify(self, pod_uid: str, annotations: Mapping[str, Any] | None) -> None:
        """Nothing when a pod's placement annotations carry a seal made with one of the keys for
        this pod; SealError saying what is wrong otherwise. The MAC is compared in constant
        time. The checks and their order are the Go reader's (v1alpha1.SealKeys.Verify)."""
        ann = annotations or {}
        seal = ann.get(PLACEMENT_SEAL_ANNOTATION)
        if (seal is None or seal == "") and self.accept_unsealed:
            return
        if seal is None or seal == "":
            raise SealError(
                f"the placement carries no {PLACEMENT_SEAL_ANNOTATION}:"
                " tmc's scheduler did not write it"
            )
        if not isinstance(seal, str):
            raise SealError(f"{PLACEMENT_SEAL_ANNOTATION} is not a seal (not text)")
        size = len(_wire(seal))
        if size > MAX_SEAL_BYTES:
            raise SealError(f"{PLACEMENT_SEAL_ANNOTATION} is not a seal ({size} bytes)")
        version, cut, rest = seal.partition(":")
        key_id, cut_again, given = rest.partition(":")
        if (
            not cut
            or not cut_again
            or version != SEAL_VERSION
            or not _SEAL_KEY_ID.fullmatch(key_id)
        ):
            raise SealError(
                f"{PLACEMENT_SEAL_ANNOTATION} {seal[:80]!r} is not a {SEAL_VERSION} seal"
                " (v1:<key id>:<MAC>)"
            )
        key = self._key(key_id)
        if key is None:
            raise SealKeyNotHeld(
                f"{PLACEMENT_SEAL_ANNOTATION} names key {key_id!r}, which this component does"
                f" not hold (keys: {', '.join(self.key_ids)})"
            )
        message = seal_message(
            pod_uid, _seal_field(ann, PLACEMENT_ANNOTATION), _seal_field(ann, LLC_MASK_ANNOTATION)
        )
        if not hmac.compare_digest(_mac(key, message).encode(), _wire(given)):
            raise SealError(
                f"{PLACEMENT_SEAL_ANNOTATION} does not match the placement: written or changed"
                " by someone other than tmc's scheduler"
            )

    def _key(self, key_id: str) -> bytes | None:
        """The key named `key_id`, the directory read again first when it is not held and the
        last read is old enough."""
        key = self._keys.get(key_id)
        if key is not None or self._directory is None:
            return key
        if self._clock() - self._loaded < SEAL_RELOAD_SECONDS:
            return None
        with self._reload_lock:
            if self._clock() - self._loaded >= SEAL_RELOAD_SECONDS:
                self._loaded = self._clock()
                # A directory that cannot be read now keeps the keys read before: a Secret
                # volume being updated is briefly in between.
                try:
                    found = _read_seal_keys(self._directory)
                except SealKeyError:
                    found = {}
                if found and (self._signing is None or self._signing in found):
                    self._keys = MappingProxyType(found)
        return self._keys.get(key_id)


def _seal_field(ann: Mapping[str, Any], name: str) -> str:
    """An annotation the seal covers, "" when absent. Annotations are strings on the wire; any
    other value is no text the engine sealed."""
    value = ann.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SealError(f"{name} is not text")
    return value


# --- machine pattern ---------------------------------------------------------------------------


class PatternSlot(BaseModel):
    """VMs of one workload in one configuration on a planned machine. A pod's configuration is
    what its recommendation decides (DRAM, slow memory, ways); its vCPUs are its own request, so
    they are not part of the slot."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # strict numbers: "5" or 5.0 is not a count (the Go plugin's decoder refuses them too)
    workload: Annotated[str, Field(min_length=1, max_length=253, strict=True)]
    dram_bytes: Annotated[int, Field(ge=0, lt=MAX_BYTES, strict=True)]
    slow_bytes: Annotated[int, Field(ge=0, lt=MAX_BYTES, strict=True)]
    llc_ways: Annotated[int, Field(ge=1, le=MAX_LLC_WAYS, strict=True)]
    count: Annotated[int, Field(ge=1, le=MAX_SLOT_VMS, strict=True)]

    @property
    def key(self) -> tuple[str, int, int, int]:
        """(workload, dram_bytes, slow_bytes, llc_ways): what a placed pod is counted by."""
        return (self.workload, self.dram_bytes, self.slow_bytes, self.llc_ways)


class NodePattern(BaseModel):
    """The `tmc.dev/pattern` annotation: which machine of which capacity plan this node stands
    for, and that machine's slots. `plan` names the plan (a digest of it, so that applying the
    same plan again changes nothing); `machine` is the machine's index in the plan's
    `machines_content`."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    schema_: Literal["tmc.pattern/v1"] = Field(default="tmc.pattern/v1", alias="schema")
    plan: Annotated[
        str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$", strict=True)
    ]
    machine: Annotated[int, Field(ge=0, lt=MAX_PATTERN_MACHINES, strict=True)]
    slots: Annotated[tuple[PatternSlot, ...], Field(max_length=MAX_PATTERN_SLOTS)]

    @model_validator(mode="after")
    def _distinct(self) -> NodePattern:
        keys = [s.key for s in self.slots]
        if len(set(keys)) != len(keys):
            raise ValueError("two slots name the same workload and configuration")
        return self

    def to_annotation(self) -> str:
        body = self.model_dump(mode="json", by_alias=True)
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, Any] | None) -> NodePattern | None:
        """None when the node carries no pattern; ContractError when it carries one that cannot
        be read (the scheduler then treats the node as having none, and logs why)."""
        raw = (annotations or {}).get(PATTERN_ANNOTATION)
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str) or len(raw) > MAX_PATTERN_ANNOTATION:
            raise ContractError(f"{PATTERN_ANNOTATION} is not a JSON string under 64 KiB")
        try:
            return cls.model_validate_json(raw, by_name=False)  # as Placement's: JSON names only
        except ValidationError as exc:
            raise ContractError(f"{PATTERN_ANNOTATION}: {_short(exc)}") from exc


# --- recommendation ----------------------------------------------------------------------------


MAX_ALTERNATIVES = 3


class Alternative(BaseModel):
    """Another configuration within Algorithm 1's cost threshold T of a recommendation's own:
    its ways, and the bytes of each tier at the size the recommendation was priced for. It has
    no plan: a node applies a plan only through the engine's placement, which takes the
    recommendation's own configuration; a plan for a pod placed through DRA is not built yet."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    llc_ways: Annotated[int, Field(ge=1, le=MAX_LLC_WAYS)]
    slow_ratio: Annotated[float, Field(ge=0.0, le=1.0)]
    dram_bytes: Bytes
    slow_bytes: Bytes


class Recommendation(BaseModel):
    """The configuration tmc recommends for a (workload, objective), independent of any one pod:
    the spec of a `TieredRecommendation` object, or a pod's `tmc.dev/recommendation` annotation.
    vCPUs are not in it: a pod gets what it requests. `fallback` set means tmc has no
    configuration for the pair (no usable profile, nothing feasible): the scheduler gives its
    pods the fallback (all memory in DRAM) with this reason at once, rather than waiting."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    schema_: Literal["tmc.recommendation/v1"] = Field(default=RECOMMENDATION_SCHEMA, alias="schema")
    workload: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    objective: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    recommendation_id: Annotated[str, Field(max_length=64)] | None = None
    dram_bytes: Bytes = 0
    slow_bytes: Bytes = 0
    # The footprint the profile traced (0: not said): a pod requesting less is told so.
    profile_bytes: Bytes = 0
    llc_ways: Annotated[int, Field(ge=0, le=MAX_LLC_WAYS)] = 0
    slow_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    plan: Annotated[list[StructurePlan], Field(max_length=4096)] = []
    fallback: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    # Algorithm 1's next configurations within T, in its order after this one (lowest packing
    # penalty first), sized as this one is: a DRA claim template offers them after it. The
    # engine places this one alone. Objects written before them have none.
    alternatives: Annotated[list[Alternative], Field(max_length=MAX_ALTERNATIVES)] = []

    @model_validator(mode="after")
    def _consistent(self) -> Recommendation:
        if self.fallback is not None:
            return self
        if self.llc_ways < 1:
            raise ValueError("llc_ways must be at least 1 (or fallback given)")
        if self.plan:
            fast = sum(s.fast_bytes for s in self.plan)
            slow = sum(s.slow_bytes for s in self.plan)
            if fast > self.dram_bytes or slow > self.slow_bytes:
                raise ValueError("the plan places more in a tier than the configuration holds")
        return self

    def to_object(self) -> dict[str, Any]:
        """The `TieredRecommendation` object for this recommendation (workload and objective
        must be set: they are what the scheduler looks it up by)."""
        if self.workload is None or self.objective is None:
            raise ContractError("a published recommendation names its workload and objective")
        spec = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not spec["alternatives"]:
            # Left out, as the Go types write it: a spec without them is the one written before.
            del spec["alternatives"]
        return {
            "apiVersion": f"{GROUP}/{RECOMMENDATION_VERSION}",
            "kind": RECOMMENDATION_KIND,
            "metadata": {"name": recommendation_object_name(self.workload, self.objective)},
            "spec": spec,
        }

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Recommendation:
        try:
            return cls.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            raise ContractError(f"{RECOMMENDATION_KIND}: {_short(exc)}") from exc


_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def recommendation_object_name(workload: str, objective: str) -> str:
    """A DNS-1123 name for the (workload, objective) pair: readable, and unique by a digest
    (workload names may hold characters an object name cannot, and two may fold together)."""
    digest = hashlib.sha256(f"{workload}\0{objective}".encode()).hexdigest()[:12]
    readable = _NOT_NAME.sub("-", f"{workload}-{objective}".lower()).strip("-")[:48].strip("-")
    return f"{readable}-{digest}" if readable else f"r-{digest}"


# --- the shim's plan file -----------------------------------------------------------------------


def plan_file_text(
    fast_node: int,
    slow_node: int,
    fast_bytes: Mapping[str, int],
    *,
    slow_bytes: Mapping[str, int] | None = None,
    default_fast_bytes: int | None = None,
    who: str = "",
) -> str:
    """The file the allocator shim reads (TMC_PLAN; `parse_plan` in alloc/tmc_alloc.c): the two
    NUMA nodes, and per tag `tag NAME FAST_BYTES [SLOW_BYTES]`: the bytes it may place on the fast
    node (the shim enforces this; the rest goes to the slow node) and, for a reader, the bytes
    the plan expects on the slow node. A tag the file does not name may place
    `default_fast_bytes` on the fast node (no line: no limit)."""
    lines = [f"# {PLAN_FILE_VERSION}" + (f" for {who}" if who else "")]
    lines += [f"fast_node {fast_node}", f"slow_node {slow_node}"]
    if default_fast_bytes is not None:
        lines.append(f"default_fast_bytes {default_fast_bytes}")
    for tag, fast in sorted(fast_bytes.items()):
        slow = "" if slow_bytes is None or tag not in slow_bytes else f" {int(slow_bytes[tag])}"
        lines.append(f"tag {tag} {int(fast)}{slow}")
    return "\n".join(lines) + "\n"


def render_plan_file(placement: Placement, fast_node: int, slow_node: int, who: str) -> str:
    """A placement's plan file: each structure's fast bytes. A tag the plan does not name (an
    untagged or new allocation site) may use what the plan leaves of the pod's DRAM; without a
    plan (a fallback, or a v1 placement) every tag may use the pod's whole DRAM share."""
    dram = placement.configuration.dram_bytes
    fast = {s.tag: s.fast_bytes for s in placement.plan}
    slow = {s.tag: s.slow_bytes for s in placement.plan}
    default = max(0, dram - sum(fast.values())) if fast else dram
    return plan_file_text(
        fast_node, slow_node, fast, slow_bytes=slow, default_fast_bytes=default, who=who
    )


class PlanFile(BaseModel):
    """A plan file read back (tests, `tmc-agent` status): what the shim will enforce."""

    model_config = ConfigDict(frozen=True)
    fast_node: int
    slow_node: int
    default_fast_bytes: int | None = None
    fast_bytes: dict[str, int] = {}
    slow_bytes: dict[str, int] = {}


PLAN_MAX_NODE = 1023  # Linux's largest NUMA node number (MAX_NUMNODES is at most 1024)


def _plan_number(word: str, bound: int, line: str) -> int:
    # ASCII digits only, as the shim reads them: no sign, no "_", no other script's digits.
    if not (word.isascii() and word.isdigit() and len(word) <= 20) or int(word) > bound:
        raise ContractError(f"a plan file's line {line[:80]!r}: {word[:24]!r} is not in 0..{bound}")
    return int(word)


def parse_plan_file(text: str) -> PlanFile:
    """The same grammar as the shim's `parse_plan`. A line of a known keyword with other words or
    a number out of bounds refuses the whole plan; unknown lines are ignored, as the shim does."""
    fields: dict[str, int] = {}
    tags: dict[str, int] = {}
    slow: dict[str, int] = {}
    for line in text.split("\n"):
        # Words as the shim splits them: on spaces, tabs and carriage returns only.
        words = [w for w in re.split(r"[ \t\r]+", line) if w]
        if not words or words[0].startswith("#"):
            continue
        keyword = words[0]
        if keyword in ("fast_node", "slow_node", "default_fast_bytes"):
            if len(words) != 2:
                raise ContractError(f"a plan file's line {line[:80]!r}: {keyword} takes one number")
            bound = PLAN_MAX_NODE if keyword.endswith("_node") else MAX_BYTES - 1
            fields[keyword] = _plan_number(words[1], bound, line)
        elif keyword == "tag":
            if len(words) not in (3, 4):
                raise ContractError(
                    f"a plan file's line {line[:80]!r}: a tag line is `tag NAME FAST [SLOW]`"
                )
            tags[words[1]] = _plan_number(words[2], MAX_BYTES - 1, line)
            if len(words) == 4:
                slow[words[1]] = _plan_number(words[3], MAX_BYTES - 1, line)
    if "fast_node" not in fields or "slow_node" not in fields:
        raise ContractError("a plan file names fast_node and slow_node")
    return PlanFile(
        fast_node=fields["fast_node"],
        slow_node=fields["slow_node"],
        default_fast_bytes=fields.get("default_fast_bytes"),
        fast_bytes=tags,
        slow_bytes=slow,
    )
