"""Sealed placements in the publisher's feeder: with keys, a bound pod's placement counts only
when its seal (`tmc.dev/placement-seal`) verifies for the pod; an unsealed, changed or another
pod's seal holds nothing, logged, whether it comes from a listing or an event; without keys
every placement of tmc's pods counts, as before. A seal naming a key not held yet is verified
again on the pod's next event. And the publisher refuses to start on a key directory it cannot
read, naming the variable. (No database: the feeder's own counts are what is checked; the
ledger's mirror of them is test_ledger's.)"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from model.node_contract import (
    PLACEMENT_ANNOTATION,
    PLACEMENT_SEAL_ANNOTATION,
    SEAL_RELOAD_SECONDS,
    PlacementSealKeys,
)
from scheduler.feeder import Feeder, claim_pod, placed_of
from scheduler.settings import FeederSettings, load_settings
from tests.scheduler.test_ledger import TIERED_NODE, ListedCluster, bound_pod

KEYS: dict[str, str] = json.loads(
    (Path(__file__).resolve().parents[2] / "scheduler/conformance/placement_seals.json").read_text()
)["keys"]
ENGINE = PlacementSealKeys(KEYS, signing="k1")  # what tmc's scheduler seals with
READER = PlacementSealKeys(KEYS)  # what the publisher verifies with


def sealed_pod(uid: str, mask: int = 0x3, keys: PlacementSealKeys = ENGINE) -> dict[str, Any]:
    pod = bound_pod(uid, "node-7", mask)
    ann = pod["metadata"]["annotations"]
    ann[PLACEMENT_SEAL_ANNOTATION] = keys.seal(uid, ann)
    return pod


def unsealed(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    del pod["metadata"]["annotations"][PLACEMENT_SEAL_ANNOTATION]
    return pod


def tampered(pod: dict[str, Any], mask: int = 0xFFFF) -> dict[str, Any]:
    """The pod with another placement under the seal it had."""
    other = bound_pod(pod["metadata"]["uid"], "node-7", mask)["metadata"]["annotations"]
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"].update(other)
    return pod


def with_seal_of(pod: dict[str, Any], donor: dict[str, Any]) -> dict[str, Any]:
    """The pod carrying another pod's placement and seal: both verbatim."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"] = copy.deepcopy(donor["metadata"]["annotations"])
    return pod


# --- placed_of ---------------------------------------------------------------------------------


def test_with_keys_a_sealed_placement_counts(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "tmc.scheduler.feeder"):
        placed = placed_of(sealed_pod("p1", 0x3C), READER)
    assert placed is not None
    assert (placed.held.pod_uid, placed.held.node, placed.held.llc_mask) == ("p1", "node-7", 0x3C)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("pod", "phrase"),
    [
        (unsealed(sealed_pod("p1")), "carries no"),
        (tampered(sealed_pod("p1")), "does not match"),
        (with_seal_of(bound_pod("p1", "node-7", 0x3), sealed_pod("p2")), "does not match"),
        (sealed_pod("p1", keys=PlacementSealKeys({"k9": "x" * 32}, "k9")), "does not hold"),
    ],
    ids=["unsealed", "tampered", "another pods seal", "an unknown key"],
)
def test_with_keys_any_other_placement_holds_nothing_and_says_why(
    pod: dict[str, Any], phrase: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "tmc.scheduler.feeder"):
        assert placed_of(pod, READER) is None
    [record] = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "pod default/p1: its placement holds nothing" in message and phrase in message


def test_without_keys_an_unsealed_placement_counts_as_before() -> None:
    placed = placed_of(unsealed(sealed_pod("p1", 0xF0)))
    assert placed is not None and placed.held.llc_mask == 0xF0
    assert placed_of(tampered(sealed_pod("p1")), None) is not None  # sealing off: no seal read


def test_an_unreadable_placement_is_still_logged_as_one(caplog: pytest.LogCaptureFixture) -> None:
    pod = sealed_pod("p1")
    pod["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "{not json"
    pod["metadata"]["annotations"][PLACEMENT_SEAL_ANNOTATION] = ENGINE.seal(
        "p1", pod["metadata"]["annotations"]
    )
    with caplog.at_level(logging.WARNING, "tmc.scheduler.feeder"):
        assert placed_of(pod, READER) is None
    [record] = caplog.records
    assert "holds nothing" not in record.getMessage()
    assert PLACEMENT_ANNOTATION in record.getMessage()


def test_a_pods_claims_count_unless_its_placement_is_sealed() -> None:
    """A pod with ResourceClaims counts what they hold, unless tmc's scheduler placed it: with
    keys, a placement anyone else wrote does not take that away."""
    pod = sealed_pod("p1")
    pod["spec"]["resourceClaims"] = [{"name": "tiered", "resourceClaimName": "c"}]
    assert claim_pod(pod, READER) is None
    assert claim_pod(pod) is None
    forged = unsealed(pod)
    found = claim_pod(forged, READER)
    assert found is not None and (found.name, found.node) == ("p1", "node-7")
    assert claim_pod(forged) is None  # sealing off: the placement is what it holds
    assert claim_pod(tampered(pod), READER) is not None


# --- the feeder --------------------------------------------------------------------------------


def test_a_listing_counts_only_sealed_placements() -> None:
    listed = ListedCluster()
    listed.nodes = [TIERED_NODE]
    good = sealed_pod("good")
    listed.pods = {
        "good": good,
        "unsealed": unsealed(sealed_pod("unsealed")),
        "tampered": tampered(sealed_pod("tampered")),
        "copied": with_seal_of(bound_pod("copied", "node-7", 0x3), good),
    }
    feeder = Feeder(listed, None, seal_keys=READER)  # type: ignore[arg-type]
    assert feeder.sync().bound == 1
    assert feeder.figures().bound_pods == 1
    # Without keys, every one of them is a placement of tmc's.
    assert Feeder(listed, None).sync().bound == 4  # type: ignore[arg-type]


def test_events_count_a_placement_once_its_seal_verifies() -> None:
    listed = ListedCluster()
    feeder = Feeder(listed, None, seal_keys=READER)  # type: ignore[arg-type]
    feeder.sync()
    pod = sealed_pod("p1")
    feeder.on_pod("MODIFIED", tampered(pod))
    feeder.on_pod("MODIFIED", unsealed(pod))
    assert feeder.figures().bound_pods == 0
    # The same placement text, now with its seal: read again, and counted.
    feeder.on_pod("MODIFIED", pod)
    assert feeder.figures().bound_pods == 1
    feeder.on_pod("MODIFIED", with_seal_of(bound_pod("p2", "node-7", 0x3), pod))
    assert feeder.figures().bound_pods == 1


def test_a_seal_with_a_key_added_later_counts_on_the_pods_next_event(tmp_path: Path) -> None:
    """The engine may seal with a key that reaches this process's Secret volume after the pod
    was bound: the pod's next event verifies it again, rather than the next full listing."""
    now = [1000.0]
    directory = tmp_path / "keys"
    directory.mkdir()
    (directory / "k1").write_text(KEYS["k1"] + "\n")
    keys = PlacementSealKeys.from_directory(directory, clock=lambda: now[0])
    feeder = Feeder(ListedCluster(), None, seal_keys=keys)  # type: ignore[arg-type]
    feeder.sync()
    pod = sealed_pod("p1", keys=PlacementSealKeys(KEYS, signing="k2"))
    feeder.on_pod("MODIFIED", pod)
    assert feeder.figures().bound_pods == 0
    (directory / "k2").write_text(KEYS["k2"] + "\n")
    now[0] += SEAL_RELOAD_SECONDS
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))  # a status event: the same texts
    assert feeder.figures().bound_pods == 1


def test_a_refused_seal_is_not_verified_again_on_every_status_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    feeder = Feeder(ListedCluster(), None, seal_keys=READER)  # type: ignore[arg-type]
    feeder.sync()
    forged = unsealed(sealed_pod("p1"))
    with caplog.at_level(logging.WARNING, "tmc.scheduler.feeder"):
        for _ in range(3):
            feeder.on_pod("MODIFIED", copy.deepcopy(forged))
    assert len(caplog.records) == 1


# --- the setting -------------------------------------------------------------------------------


def test_a_key_directory_that_does_not_read_stops_the_publisher_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TMC_PLACEMENT_SEAL_KEYS", str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match=r"TMC_PLACEMENT_SEAL_KEYS: .*missing"):
        load_settings(FeederSettings, "tmc publisher")
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "k1").write_text("too short\n")
    monkeypatch.setenv("TMC_PLACEMENT_SEAL_KEYS", str(tmp_path / "short"))
    with pytest.raises(SystemExit, match=r"TMC_PLACEMENT_SEAL_KEYS: .*k1 has 9 bytes"):
        load_settings(FeederSettings, "tmc publisher")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("TMC_PLACEMENT_SEAL_KEYS", str(tmp_path / "empty"))
    with pytest.raises(SystemExit, match=r"TMC_PLACEMENT_SEAL_KEYS: .*no placement seal key"):
        load_settings(FeederSettings, "tmc publisher")


def test_the_setting_names_the_keys_placements_are_verified_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_settings(FeederSettings, "tmc publisher").seal_keys() is None  # off by default
    (tmp_path / "k1").write_text(KEYS["k1"] + "\n")
    monkeypatch.setenv("TMC_PLACEMENT_SEAL_KEYS", str(tmp_path))
    settings = load_settings(FeederSettings, "tmc publisher")
    assert settings.placement_seal_keys == str(tmp_path)
    keys = settings.seal_keys()
    assert keys is not None and keys.key_ids == ["k1"] and keys.signing is None
    keys.verify("p1", sealed_pod("p1")["metadata"]["annotations"])
    assert not keys.accept_unsealed
    monkeypatch.setenv("TMC_PLACEMENT_SEAL_ACCEPT_UNSEALED", "true")
    upgrading = load_settings(FeederSettings, "tmc publisher").seal_keys()
    assert upgrading is not None and upgrading.accept_unsealed
