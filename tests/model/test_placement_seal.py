"""The placement seal (`tmc.dev/placement-seal`) as model.node_contract makes and verifies it:
every row of the shared table (scheduler/conformance/placement_seals.json, which the Go API types
are held to as well), the keys read from a directory laid out as a mounted Secret, the keys it
refuses, and a key added to the Secret verifying without a restart."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from tmc_agent.placement import BadPlacement, parse_placement

from model.node_contract import (
    LLC_MASK_ANNOTATION,
    MAX_SEAL_KEYS,
    PLACEMENT_ANNOTATION,
    PLACEMENT_SEAL_ANNOTATION,
    SEAL_RELOAD_SECONDS,
    ContractError,
    PlacedConfiguration,
    Placement,
    PlacementSealKeys,
    SealError,
    SealKeyError,
    SealKeyNotHeld,
    seal_message,
)

TABLE = json.loads(
    (Path(__file__).resolve().parents[2] / "scheduler/conformance/placement_seals.json").read_text()
)
KEYS: dict[str, str] = TABLE["keys"]
UID = "3f6c1c1e-7d1b-4b0e-9a57-2f1f7f2b9c10"


class Clock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def placement_annotations(node: str = "node-1") -> dict[str, str]:
    placement = Placement(
        node=node,
        configuration=PlacedConfiguration(
            vcpus=2, dram_bytes=1 << 30, slow_bytes=0, slow_ratio=0.0, llc_ways=2
        ),
        llc_mask="0x3",
    )
    return placement.to_annotations()


def sealed(keys: PlacementSealKeys, uid: str = UID) -> dict[str, str]:
    ann = placement_annotations()
    return {**ann, PLACEMENT_SEAL_ANNOTATION: keys.seal(uid, ann)}


# --- the shared table --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row", TABLE["seals"], ids=lambda r: f"{r['key']}-{len(r['annotations'])}-annotations"
)
def test_the_writer_seals_as_the_shared_table_says(row: dict[str, Any]) -> None:
    keys = PlacementSealKeys(KEYS, signing=row["key"])
    assert keys.seal(row["pod_uid"], row["annotations"]) == row["seal"]
    keys.verify(row["pod_uid"], {**row["annotations"], PLACEMENT_SEAL_ANNOTATION: row["seal"]})


@pytest.mark.parametrize("row", TABLE["verdicts"], ids=lambda r: str(r["case"]))
def test_every_reader_concludes_as_the_shared_table_says(row: dict[str, Any]) -> None:
    keys = PlacementSealKeys(KEYS)  # a reader: no signing key
    if row.get("verified"):
        keys.verify(row["pod_uid"], row["annotations"])
    else:
        with pytest.raises(SealError, match=row["error"]):
            keys.verify(row["pod_uid"], row["annotations"])


def test_the_table_tries_every_refusal() -> None:
    phrases = {row.get("error") for row in TABLE["verdicts"]}
    assert phrases >= {"carries no", "is not a seal", "not a v1 seal", "does not hold"}
    assert "does not match" in phrases and None in phrases


# --- the message and the seal's text -----------------------------------------------------------


def test_the_message_is_the_domain_then_each_field_by_its_length_in_bytes() -> None:
    got = seal_message("u-1", "é", "")
    assert got == b"tmc.dev/placement-seal/v1\n3:u-1\n2:\xc3\xa9\n0:"
    # Lengths first: moving a byte from one field to the next is another message.
    assert seal_message("ab", "c", "") != seal_message("a", "bc", "")


def test_a_seal_is_the_version_the_key_and_an_unpadded_base64url_mac() -> None:
    seal = PlacementSealKeys(KEYS, signing="k1").seal(UID, placement_annotations())
    version, key_id, mac = seal.split(":")
    assert (version, key_id, len(mac)) == ("v1", "k1", 43)
    assert "=" not in mac and "+" not in mac and "/" not in mac


def test_a_placement_written_by_the_contract_verifies_and_any_change_does_not() -> None:
    keys = PlacementSealKeys(KEYS, signing="k2")
    ann = sealed(keys)
    keys.verify(UID, ann)
    PlacementSealKeys(KEYS).verify(UID, ann)  # any holder of the key, signing or not
    moved = {**ann, PLACEMENT_ANNOTATION: placement_annotations("node-2")[PLACEMENT_ANNOTATION]}
    with pytest.raises(SealError, match="does not match"):
        keys.verify(UID, moved)
    with pytest.raises(SealError, match="does not match"):
        keys.verify("another-uid", ann)
    with pytest.raises(SealError, match="does not match"):
        keys.verify(UID, {**ann, LLC_MASK_ANNOTATION: "0x03"})  # the same mask, other text
    with pytest.raises(SealError, match="does not match"):
        PlacementSealKeys({"k2": "another key of the same name, 0123456789"}).verify(UID, ann)


@pytest.mark.parametrize(
    ("seal", "phrase"),
    [
        # "$" in a Python pattern would take "k1\n" for a key id: the Go reader does not.
        ("v1:k1\n:xGUS5LO0rL2QetUaV9dP6_64IFp6-M0iL2GKl4NEN1I", "not a v1 seal"),
        ("v1:-k1:xGUS5LO0rL2QetUaV9dP6_64IFp6-M0iL2GKl4NEN1I", "not a v1 seal"),
        ("v1", "not a v1 seal"),
        ("v1::", "not a v1 seal"),
        ("k1:xGUS5LO0rL2QetUaV9dP6_64IFp6-M0iL2GKl4NEN1I", "not a v1 seal"),
        ("v1:k1:", "does not match"),
        ("v1:k1:xGUS5LO0rL2QetUaV9dP6_64IFp6-M0iL2GKl4NEN1I:", "does not match"),
        ("v1:k1:xGUS5LO0rL2QetUaV9dP6_64IFp6-M0iL2GKl4NEN1é", "does not match"),
        ("v1:k1:" + "é" * 98, "is not a seal"),  # 104 characters, but 202 bytes
        ("v1:" + "k" * 64 + ":mac", "not a v1 seal"),  # longer than a DNS label
    ],
)
def test_seals_the_table_does_not_list_are_refused_as_the_go_reader_refuses_them(
    seal: str, phrase: str
) -> None:
    ann = {**placement_annotations(), PLACEMENT_SEAL_ANNOTATION: seal}
    with pytest.raises(SealError, match=phrase):
        PlacementSealKeys(KEYS).verify(UID, ann)


def test_annotations_that_are_not_text_are_no_seal() -> None:
    keys = PlacementSealKeys(KEYS, signing="k1")
    with pytest.raises(SealError, match="is not a seal"):
        keys.verify(UID, {**placement_annotations(), PLACEMENT_SEAL_ANNOTATION: 7})
    ann = sealed(keys)
    with pytest.raises(SealError):
        keys.verify(UID, {**ann, PLACEMENT_ANNOTATION: {"node": "node-1"}})
    with pytest.raises(SealError, match="carries no"):
        keys.verify(UID, None)
    assert issubclass(SealError, ContractError)  # every reader's refusal of an unreadable one


def test_a_key_given_as_text_is_its_utf8_bytes() -> None:
    as_bytes = PlacementSealKeys({k: v.encode() for k, v in KEYS.items()}, signing="k1")
    as_text = PlacementSealKeys(KEYS, signing="k1")
    assert as_bytes.seal(UID, placement_annotations()) == as_text.seal(UID, placement_annotations())
    assert (as_text.signing, as_text.key_ids) == ("k1", ["k1", "k2"])


def test_a_reader_seals_nothing() -> None:
    with pytest.raises(SealKeyError, match="only verifies"):
        PlacementSealKeys(KEYS).seal(UID, placement_annotations())


@pytest.mark.parametrize(
    ("keys", "signing", "phrase"),
    [
        ({}, None, "no placement seal key"),
        ({"k1": "x" * 31}, None, "31 bytes"),
        ({"k1": "x" * 1025}, None, "1025 bytes"),
        ({"Key_1": "x" * 32}, None, "not a placement seal key id"),
        ({"k1\n": "x" * 32}, None, "not a placement seal key id"),
        ({"k1": "x" * 32}, "k2", "signing key 'k2' is not one of the keys"),
    ],
)
def test_keys_that_cannot_seal_are_refused(
    keys: dict[str, str], signing: str | None, phrase: str
) -> None:
    with pytest.raises(SealKeyError, match=phrase):
        PlacementSealKeys(keys, signing=signing)


# --- a key directory ---------------------------------------------------------------------------


def secret_volume(root: Path, files: dict[str, bytes]) -> Path:
    """A directory laid out as the kubelet lays out a Secret volume: the files in a timestamped
    directory, `..data` a link to it, and each key a link through `..data`."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = root / f"..2030_01_01_00_00_00.{len(list(root.iterdir()))}"
    stamp.mkdir()
    for name, data in files.items():
        (stamp / name).write_bytes(data)
    data_link = root / "..data"
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(stamp.name)
    os.replace(tmp_link, data_link)  # swapped at once, as the kubelet swaps it
    for name in files:
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    return root


def test_keys_are_read_from_a_secret_volume(tmp_path: Path) -> None:
    volume = secret_volume(
        tmp_path / "keys",
        {
            # As `kubectl create secret --from-file` often stores them: with a newline.
            "k1": KEYS["k1"].encode() + b"\n",
            "k2": KEYS["k2"].encode() + b" \t\r\n",
        },
    )
    (volume / "notes").mkdir()  # not a regular file: not a key, and no error
    keys = PlacementSealKeys.from_directory(volume, signing="k1")
    assert keys.key_ids == ["k1", "k2"]
    for row in TABLE["verdicts"]:
        if row.get("verified"):
            keys.verify(row["pod_uid"], row["annotations"])
    assert keys.seal(UID, TABLE["seals"][0]["annotations"]) == TABLE["seals"][0]["seal"]
    # A string names the directory as well as a path.
    assert PlacementSealKeys.from_directory(str(volume)).key_ids == ["k1", "k2"]


def test_a_key_is_trimmed_of_trailing_whitespace_only(tmp_path: Path) -> None:
    volume = secret_volume(tmp_path / "keys", {"k1": b" " + KEYS["k1"].encode() + b"\n"})
    ann = {**TABLE["seals"][0]["annotations"], PLACEMENT_SEAL_ANNOTATION: TABLE["seals"][0]["seal"]}
    with pytest.raises(SealError, match="does not match"):
        PlacementSealKeys.from_directory(volume).verify(UID, ann)


def test_more_than_sixteen_keys_are_refused(tmp_path: Path) -> None:
    files = {f"k{i:02d}": b"x" * 32 for i in range(MAX_SEAL_KEYS)}
    assert len(PlacementSealKeys.from_directory(secret_volume(tmp_path / "a", files)).key_ids) == 16
    files["k99"] = b"x" * 32
    with pytest.raises(SealKeyError, match="more than 16"):
        PlacementSealKeys.from_directory(secret_volume(tmp_path / "b", files))


@pytest.mark.parametrize(
    ("files", "phrase"),
    [
        ({}, "no placement seal key in"),
        ({"k1": b"x" * 31 + b"\n"}, "31 bytes"),  # trimmed first
        ({"k1": b"x" * 2048}, "is not a key"),
        ({"Key_1": b"x" * 32}, "not a placement seal key id"),
        ({"k1": b"x" * 32, "key.txt": b"x" * 32}, "not a placement seal key id"),
    ],
)
def test_a_directory_that_holds_no_usable_keys_is_refused(
    tmp_path: Path, files: dict[str, bytes], phrase: str
) -> None:
    volume = secret_volume(tmp_path / "keys", files)
    with pytest.raises(SealKeyError, match=phrase):
        PlacementSealKeys.from_directory(volume)


def test_a_missing_directory_a_broken_link_or_no_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SealKeyError, match=r"placement seal keys: .*missing"):
        PlacementSealKeys.from_directory(tmp_path / "missing")
    volume = secret_volume(tmp_path / "keys", {"k1": b"x" * 32})
    (volume / "k2").symlink_to("..data/k2")  # a key whose file is not there
    with pytest.raises(SealKeyError, match="k2"):
        PlacementSealKeys.from_directory(volume)
    with pytest.raises(SealKeyError, match="no placement seal key directory"):
        PlacementSealKeys.from_directory("")  # never the working directory
    with pytest.raises(SealKeyError, match="signing key 'k2'"):
        PlacementSealKeys.from_directory(secret_volume(tmp_path / "b", {"k1": b"x" * 32}), "k2")


# --- keys added to the Secret ------------------------------------------------------------------


def test_a_key_added_to_the_secret_verifies_without_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    volume = secret_volume(tmp_path / "keys", {"k1": KEYS["k1"].encode()})
    keys = PlacementSealKeys.from_directory(volume, clock=clock)
    by_k2 = sealed(PlacementSealKeys(KEYS, signing="k2"))
    with pytest.raises(SealKeyNotHeld, match="does not hold"):
        keys.verify(UID, by_k2)

    # The engine seals with k2 before this reader's volume has it: the directory is read again
    # (then still without k2) once SEAL_RELOAD_SECONDS have passed since it was read.
    clock.now += SEAL_RELOAD_SECONDS
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, by_k2)
    secret_volume(volume, {"k1": KEYS["k1"].encode(), "k2": KEYS["k2"].encode()})
    # ... and not again before as long has passed once more, however many seals name k2.
    clock.now += SEAL_RELOAD_SECONDS - 1
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, by_k2)
    clock.now += 1
    keys.verify(UID, by_k2)
    assert keys.key_ids == ["k1", "k2"]
    keys.verify(UID, sealed(PlacementSealKeys(KEYS, signing="k1")))


def test_a_failed_reload_keeps_the_keys_read_before(tmp_path: Path) -> None:
    clock = Clock()
    volume = secret_volume(tmp_path / "keys", {"k1": KEYS["k1"].encode()})
    keys = PlacementSealKeys.from_directory(volume, clock=clock)
    by_k1 = sealed(PlacementSealKeys(KEYS, signing="k1"))
    by_k2 = sealed(PlacementSealKeys(KEYS, signing="k2"))
    # The Secret is changed to hold a key that is not one: the directory no longer reads.
    secret_volume(volume, {"k1": KEYS["k1"].encode(), "k2": b"short"})
    clock.now += SEAL_RELOAD_SECONDS
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, by_k2)
    keys.verify(UID, by_k1)
    # Emptied, then gone: the keys read before still verify.
    secret_volume(volume, {})
    (volume / "k1").unlink()
    (volume / "k2").unlink()
    clock.now += SEAL_RELOAD_SECONDS
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, by_k2)
    keys.verify(UID, by_k1)
    assert keys.key_ids == ["k1"]


def test_a_reload_without_the_signing_key_keeps_the_keys_read_before(tmp_path: Path) -> None:
    clock = Clock()
    volume = secret_volume(tmp_path / "keys", {"k1": KEYS["k1"].encode()})
    keys = PlacementSealKeys.from_directory(volume, signing="k1", clock=clock)
    (volume / "k1").unlink()
    secret_volume(volume, {"k2": KEYS["k2"].encode()})
    clock.now += SEAL_RELOAD_SECONDS
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, sealed(PlacementSealKeys(KEYS, signing="k2")))
    assert keys.seal(UID, placement_annotations()).startswith("v1:k1:")


def test_fixed_keys_are_never_read_again() -> None:
    clock = Clock()
    keys = PlacementSealKeys({"k1": KEYS["k1"]}, clock=clock)
    clock.now += 10 * SEAL_RELOAD_SECONDS
    with pytest.raises(SealKeyNotHeld):
        keys.verify(UID, sealed(PlacementSealKeys(KEYS, signing="k2")))


def test_readers_on_many_threads_share_the_keys_while_they_are_read_again(
    tmp_path: Path,
) -> None:
    clock = Clock()
    volume = secret_volume(tmp_path / "keys", {"k1": KEYS["k1"].encode()})
    keys = PlacementSealKeys.from_directory(volume, clock=clock)
    by_k1 = sealed(PlacementSealKeys(KEYS, signing="k1"))
    by_k2 = sealed(PlacementSealKeys(KEYS, signing="k2"))
    failures: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(200):
                keys.verify(UID, by_k1)
                with contextlib.suppress(SealKeyNotHeld):
                    keys.verify(UID, by_k2)
                clock.now += 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    secret_volume(volume, {"k1": KEYS["k1"].encode(), "k2": KEYS["k2"].encode()})
    for t in threads:
        t.join()
    assert failures == []
    clock.now += SEAL_RELOAD_SECONDS
    keys.verify(UID, by_k2)


# --- the node agent's reader -------------------------------------------------------------------


def test_the_agent_reads_only_sealed_placements_when_it_holds_keys() -> None:
    keys = PlacementSealKeys(KEYS)
    pod: dict[str, Any] = {
        "metadata": {"uid": UID, "name": "p", "namespace": "t", "annotations": {}},
    }
    pod["metadata"]["annotations"] = sealed(PlacementSealKeys(KEYS, signing="k1"))
    assert parse_placement(pod, keys).node == "node-1"
    pod["metadata"]["annotations"] = placement_annotations()
    assert parse_placement(pod).node == "node-1"  # sealing off: as before
    with pytest.raises(BadPlacement, match="carries no"):
        parse_placement(pod, keys)
    pod["metadata"]["annotations"] = {}
    with pytest.raises(BadPlacement, match=r"no tmc\.dev/placement annotation"):
        parse_placement(pod, keys)


def test_accepting_unsealed_placements_still_verifies_every_seal() -> None:
    """The upgrade from a release that did not seal: a placement with no seal verifies, one whose
    seal is there is held to it, as the Go reader does (v1alpha1 seal_test.go)."""
    keys = PlacementSealKeys(KEYS, accept_unsealed=True)
    for case in TABLE["verdicts"]:
        unsealed = not case["annotations"].get(PLACEMENT_SEAL_ANNOTATION)
        if case.get("verified") or unsealed:
            keys.verify(case["pod_uid"], case["annotations"])
        else:
            with pytest.raises(SealError, match=case["error"]):
                keys.verify(case["pod_uid"], case["annotations"])
