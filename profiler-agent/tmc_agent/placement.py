"""What a pod was given: the extender's placement annotations on a pod, read through the
contract both sides import (`model.node_contract`), with the pod they belong to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model import node_contract as contract

PLACEMENT_ANNOTATION = contract.PLACEMENT_ANNOTATION


class BadPlacement(ValueError):
    """A pod's tmc annotations cannot be applied; the reason is logged and the pod skipped."""


@dataclass(frozen=True)
class Placement:
    """A pod's placement (model.node_contract.Placement) with the pod it belongs to."""

    uid: str
    namespace: str
    name: str
    given: contract.Placement

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def node(self) -> str:
        return self.given.node

    @property
    def dram_bytes(self) -> int:
        return self.given.configuration.dram_bytes

    @property
    def slow_bytes(self) -> int:
        return self.given.configuration.slow_bytes

    @property
    def llc_mask(self) -> int:
        return self.given.llc_mask_bits


def _uid(pod: dict[str, Any]) -> str:
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    # The uid names files and directories: never let it climb out of them.
    if not uid or len(uid) > 64 or not all(c.isalnum() or c == "-" for c in uid):
        raise BadPlacement(f"pod uid {uid[:70]!r} is not a Kubernetes uid")
    return uid


def parse_placement(
    pod: dict[str, Any], keys: contract.PlacementSealKeys | None = None
) -> Placement:
    """The extender's placement annotations, read by the contract's own model. With `keys`, a
    placement whose seal (`tmc.dev/placement-seal`) does not verify with them for the pod's uid
    is refused: whoever may bind a pod may write its annotations, and only the seal says tmc's
    scheduler wrote them (None: sealing off)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations")
    try:
        if keys is not None and (annotations or {}).get(PLACEMENT_ANNOTATION):
            keys.verify(str(meta.get("uid") or ""), annotations)
        given = contract.Placement.from_annotations(annotations)
    except contract.ContractError as exc:
        raise BadPlacement(str(exc)) from exc
    if given is None:
        raise BadPlacement(f"no {PLACEMENT_ANNOTATION} annotation")
    return Placement(
        uid=_uid(pod),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        given=given,
    )
