"""What a published TieredRecommendation says beyond its spec: the decision it holds
(`Decided`), its status for `kubectl get` (the generation it describes, sizes as Kubernetes
quantities, the Published and Fallback conditions), and what the publisher reads back from an
object it finds (when it was written, its fallback's reason, the configuration a pod would
get)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from model.node_contract import ContractError, Recommendation
from model.resources import quantity_text


class Written(dict[str, Any]):
    """An object as the API server wrote it (its generation, and the status it had), with the
    object that write replaced (None when it made a new one): the replaced generation's plan is
    kept from that spec itself, since a status write that failed after it never said it."""

    def __init__(
        self, written: Mapping[str, Any], replaced: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(written)
        self.replaced = replaced


@dataclass(frozen=True)
class Decided:
    """A pair's recommendation, and for a fallback its cause as one CamelCase word (the reason
    of the object's Fallback condition)."""

    recommendation: Recommendation
    fallback_cause: str = ""
    # What the decision log did with the decision: "stored" (a new row), "repeat" (counted on
    # the pair's identical newest one), "" (not logged: a fallback).
    logged: str = ""


def now_stamp() -> str:
    """Now, as Kubernetes writes a time."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_of(
    decided: Decided, written: Mapping[str, Any], now: str | None = None
) -> dict[str, Any]:
    """The object's status for what was just written: the generation it describes, the sizes as
    Kubernetes quantities (for `kubectl get`), the conditions Published and Fallback, and the
    plans kept (`plans_kept`, with the replaced object's when `written` is `Written`). A
    condition's lastTransitionTime moves only when its status changes."""
    rec = decided.recommendation
    generation = int((written.get("metadata") or {}).get("generation") or 1)
    before = {
        str(c.get("type")): c
        for c in ((written.get("status") or {}).get("conditions") or [])
        if isinstance(c, Mapping)
    }
    stamp = now or now_stamp()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        old = before.get(kind)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "observedGeneration": generation,
            "lastTransitionTime": since or stamp,
        }

    fallback = rec.fallback is not None
    published = condition(
        "Published", "True", "Published", f"the publisher wrote generation {generation}"
    )
    if fallback:
        why = condition(
            "Fallback", "True", decided.fallback_cause or "NoRecommendation", rec.fallback or ""
        )
    else:
        why = condition(
            "Fallback",
            "False",
            "Recommended",
            f"{quantity_text(rec.dram_bytes)} DRAM, {quantity_text(rec.slow_bytes)} slow memory,"
            f" {rec.llc_ways} LLC ways",
        )
    return {
        "observedGeneration": generation,
        "dram": "-" if fallback else quantity_text(rec.dram_bytes),
        "slow": "-" if fallback else quantity_text(rec.slow_bytes),
        "conditions": [published, why],
        "plans": plans_kept(
            written, generation, rec, written.replaced if isinstance(written, Written) else None
        ),
    }


# The generations whose plans the status keeps, the current one included: a pod placed from a
# generation the spec has since moved past names it (its placement's plan_from), and its node
# reads the plan there. Pods are bound within seconds of being placed, and the publisher writes
# a pair again only when what a pod would get changed, so a few cover the pods in flight.
KEPT_PLANS = 4


def plans_kept(
    written: Mapping[str, Any],
    generation: int,
    rec: Recommendation,
    replaced: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The status's plans after writing `generation`: its own first (a fallback has none), then
    the replaced object's generation's, read from its spec (a status write that failed after
    that spec was written never kept it; the spec is its truth in any case), then the earlier
    generations' as the status held them, newest first, at most KEPT_PLANS in all."""
    own = [] if rec.fallback is not None else [_generation_plan(generation, rec)]
    # A spec written again as it was (a write retried after its status write failed) keeps its
    # generation: it is the object's own then, not an earlier one.
    before = [p for p in _replaced_plan(replaced) if p["generation"] != generation]
    taken = {generation} | {p["generation"] for p in before}
    earlier = [
        p
        for p in ((written.get("status") or {}).get("plans") or [])
        if isinstance(p, Mapping) and p.get("generation") not in taken
    ]
    rest = sorted(before + earlier, key=lambda p: -_generation(p))
    return (own + rest)[:KEPT_PLANS]


def _generation_plan(generation: int, rec: Recommendation) -> dict[str, Any]:
    return {
        "generation": generation,
        "dram_bytes": rec.dram_bytes,
        "slow_bytes": rec.slow_bytes,
        "plan": [s.model_dump(mode="json") for s in rec.plan],
    }


def _generation(plan: Mapping[str, Any]) -> int:
    value = plan.get("generation")
    return value if isinstance(value, int) else 0


def _replaced_plan(replaced: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The replaced object's plan at its generation, as the status keeps one; none for no
    object, a fallback, or a spec that is not a recommendation (an operator's, say)."""
    if replaced is None:
        return []
    generation = (replaced.get("metadata") or {}).get("generation")
    if not isinstance(generation, int) or generation < 1:
        return []
    try:
        rec = Recommendation.from_object(replaced)
    except ContractError:
        return []
    return [] if rec.fallback is not None else [_generation_plan(generation, rec)]


def written_at(obj: Mapping[str, Any], default: float) -> float:
    """When an object was last written (seconds since the epoch): the newest time of its
    managed fields, else its creation; `default` when it says neither."""
    meta = obj.get("metadata") or {}
    times = [str(f.get("time")) for f in meta.get("managedFields") or [] if isinstance(f, Mapping)]
    times.append(str(meta.get("creationTimestamp")))
    parsed = []
    for text in times:
        try:
            parsed.append(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC))
        except ValueError:
            continue
    return max(parsed).timestamp() if parsed else default


def fallback_reason(obj: Mapping[str, Any]) -> str:
    """The reason of an object's Fallback condition (what a loaded fallback object says)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Fallback" and c.get("status") == "True":
            return str(c.get("reason") or "NoRecommendation")[:64]
    return "NoRecommendation"


def configuration_of(rec: Recommendation) -> dict[str, Any]:
    """What a pod would get: a new decision with the same configuration, plan and alternatives
    (only its decision-log id differs) is not worth rewriting the object and waking every
    scheduler. The alternatives count: a pod placed through DRA may be given one of them."""
    return rec.model_dump(mode="json", exclude={"recommendation_id"})
