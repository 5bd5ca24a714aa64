"""Signed decisions (``schemas.signing``): only what a trusted key vouches for is released, in log order."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ordo.arbiter.replay import DecisionRecord, authenticate
from ordo.schemas import decode, encode
from ordo.schemas.signing import (
    SIGNATURE_HEADER,
    ChainVerifier,
    Signer,
    SigningError,
    Trust,
    prev_hash_of,
    signature_of,
    write_keypair,
)
from ordo.services.audit import audit

from .test_replay import history

BATCH = 3


def signed_log(signers: list[Signer], switch_at: int | None = None) -> list[DecisionRecord]:
    """The faithful log of ``history()``, the last record of every batch of ``BATCH`` signed.

    ``signers[0]`` signs records before offset ``switch_at``, ``signers[1]`` the rest (a key rotation).
    """
    _, log = history()
    out = []
    for record in log:
        last_of_batch = (record.offset + 1) % BATCH == 0 or record.offset == len(log) - 1
        signer = signers[0] if switch_at is None or record.offset < switch_at else signers[1]
        header = signer.header("t", record.value) if last_of_batch else None
        out.append(DecisionRecord(record.offset, record.value, header))
    return out


def run(verifier: ChainVerifier[DecisionRecord], log: list[DecisionRecord]) -> tuple[list[int], list[int]]:
    released, refused = [], []
    for record in log:
        out, refusals = verifier.push(record.offset, record.value, record.signature, record)
        released += [r.offset for r in out]
        refused += [r.offset for r in refusals]
    return released, refused


def forge_after(log: list[DecisionRecord], index: int, signature: bytes | None = None) -> list[DecisionRecord]:
    """A forged decision with a correct ``prev_hash`` (it chains to record ``index``), inserted right after it."""
    from ordo.schemas import chain_hash

    template = decode(log[index + 1].value)
    forged = template.model_copy(
        update={"message": "forged", "writer": "mallory", "prev_hash": chain_hash(log[index].value)}
    )
    shifted = [DecisionRecord(r.offset + 1, r.value, r.signature) for r in log[index + 1 :]]
    return [*log[: index + 1], DecisionRecord(log[index].offset + 1, encode(forged), signature), *shifted]


def test_a_signed_log_is_released_whole_and_in_order() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw])), log)
    assert released == [r.offset for r in log] and refused == []


def test_records_wait_for_their_batch_signature() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    verifier: ChainVerifier[DecisionRecord] = ChainVerifier("t", Trust.of([signer.public_raw]))
    assert run(verifier, log[: BATCH - 1]) == ([], [])
    assert verifier.pending == BATCH - 1
    assert run(verifier, log[BATCH - 1 : BATCH]) == ([0, 1, 2], [])


@pytest.mark.parametrize("how", ["unsigned", "unknown key", "bad signature", "malformed header"])
def test_a_forged_decision_with_a_correct_prev_hash_is_refused(how: str) -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    mallory = Signer.generate()
    signature = {
        "unsigned": None,
        "unknown key": mallory.header("t", b"placeholder"),
        "bad signature": signer.key_id + bytes(64),
        "malformed header": b"\x01\x02",
    }[how]
    forged = forge_after(log, 1, signature)
    if how == "unknown key":  # a real signature of the forged bytes, by a key nobody trusts
        forged[2] = DecisionRecord(2, forged[2].value, mallory.header("t", forged[2].value))
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw])), forged)
    assert 2 in refused and 2 not in released
    assert released == [r.offset for r in forged if r.offset != 2], "every authentic record is still released"


def test_a_forged_decision_signed_with_a_trusted_key_for_another_table_is_refused() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    forged = forge_after(log, 2)
    forged[3] = DecisionRecord(3, forged[3].value, signer.header("other", forged[3].value))
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw])), forged)
    assert 3 in refused and 3 not in released


def test_a_replayed_signed_record_is_refused() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    copy = DecisionRecord(len(log), log[2].value, log[2].signature)
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw])), [*log, copy])
    assert released == [r.offset for r in log] and refused == [len(log)]


def test_pending_records_are_bounded_and_serving_goes_on() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    verifier: ChainVerifier[DecisionRecord] = ChainVerifier("t", Trust.of([signer.public_raw]), pending_limit=5)
    head = log[:BATCH]
    assert run(verifier, head)[0] == [0, 1, 2]
    flood = forge_after(log, BATCH - 1)[BATCH]  # an unsigned record chaining to the verified head
    refused: list[int] = []
    for i in range(100):
        _, refusals = verifier.push(1000 + i, flood.value + bytes([i]), None, flood)
        refused += [r.offset for r in refusals]
        assert verifier.pending <= 5
    assert len(refused) == 95
    released, more = run(verifier, log[BATCH:])
    assert released == [r.offset for r in log[BATCH:]] and len(more) == 5


def test_a_log_signed_by_two_keys_verifies_with_both_trusted() -> None:
    key1, key2 = Signer.generate(), Signer.generate()
    log = signed_log([key1, key2], switch_at=4)
    released, refused = run(ChainVerifier("t", Trust.of([key1.public_raw, key2.public_raw])), log)
    assert released == [r.offset for r in log] and refused == []


def test_with_only_the_new_key_trusted_the_old_keys_prefix_is_refused() -> None:
    key1, key2 = Signer.generate(), Signer.generate()
    log = signed_log([key1, key2], switch_at=4)
    released, refused = run(ChainVerifier("t", Trust.of([key2.public_raw])), log)
    authentic, problems = authenticate("t", log, Trust.of([key2.public_raw]))
    assert authentic == [] and {0, 1, 2} <= {p.decision_offset for p in problems}
    assert set(refused) <= {p.decision_offset for p in problems}
    assert not set(released) & {0, 1, 2}, "a later signature does not vouch for a record signed by an untrusted key"
    assert released == []  # the new key's records chain on that prefix: nothing of this log can be trusted
    # with only the old key, the prefix verifies and the new key's records are refused
    released, _ = run(ChainVerifier("t", Trust.of([key1.public_raw])), log)
    assert released == [0, 1, 2]


def test_a_legacy_unsigned_prefix_is_vouched_for_by_the_first_signature() -> None:
    signer = Signer.generate()
    log = [DecisionRecord(r.offset, r.value, None) for r in signed_log([signer])]
    log[-1] = DecisionRecord(log[-1].offset, log[-1].value, signer.header("t", log[-1].value))
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw])), log)
    assert released == [r.offset for r in log] and refused == []


def test_signatures_not_required_releases_everything_at_once() -> None:
    _, log = history()
    released, refused = run(ChainVerifier("t", Trust(required=False)), log)
    assert released == [r.offset for r in log] and refused == []


def test_a_reader_starting_mid_log_is_anchored_by_the_first_signature() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    forged = forge_after(log, 4)
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw]), anchor=None), forged[4:])
    assert 5 in refused and 5 not in released
    assert released == [r.offset for r in forged[4:] if r.offset != 5]


def test_an_unanchored_reader_is_not_held_back_by_a_record_its_fetch_lost() -> None:
    signer = Signer.generate()
    log = signed_log([signer])
    lossy = [r for r in log if r.offset != BATCH - 1]  # the first batch's signed record never arrives
    anchored, _ = run(ChainVerifier("t", Trust.of([signer.public_raw])), lossy)
    assert anchored == []  # a chain-keeping reader cannot connect what follows to what it verified
    released, refused = run(ChainVerifier("t", Trust.of([signer.public_raw]), anchored=False), lossy)
    assert released == [r.offset for r in lossy if r.offset >= BATCH] and set(refused) == {0, 1}


def test_required_signatures_with_no_trusted_key_fail_closed() -> None:
    with pytest.raises(SigningError, match="ORDO_TRUSTED_KEYS"):
        Trust.from_spec("")
    assert not Trust.from_spec("", required=False).required


def test_keygen_writes_a_private_key_0600_and_its_public_key(tmp_path: Path) -> None:
    path = tmp_path / "arbiter.key"
    signer = write_keypair(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert Signer.from_file(path).key_id == signer.key_id
    trust = Trust.from_spec(str(tmp_path))  # a directory: every *.pub in it
    assert trust.verify("t", b"x", signer.header("t", b"x")) is None
    assert trust.verify("t", b"y", signer.header("t", b"x")) is not None
    with pytest.raises(SigningError):
        write_keypair(path)  # never overwrites a key


def test_signature_header_and_prev_hash_extraction() -> None:
    _, log = history()
    assert signature_of([("other", b"1"), (SIGNATURE_HEADER, b"sig")]) == b"sig"
    assert signature_of(None) is None
    for record in log:
        assert prev_hash_of(record.value) == decode(record.value).prev_hash


@pytest.mark.parametrize("restore_version", [None, 0, 1, 63, 64, 2**40])
@pytest.mark.parametrize(
    "metrics",
    [
        {},
        {"numTargetRowsInserted": 0, "numTargetRowsUpdated": 2, "numTargetRowsDeleted": 0},
        {"x" * 31: 0},
        {"x" * 33: 0},
    ],
)
def test_the_link_read_from_a_decisions_tail_is_its_prev_hash(
    restore_version: int | None, metrics: dict[str, int]
) -> None:
    """0.5 decisions end with restore_version and operation_metrics: the tail shortcut takes exactly the link
    when both are null and empty and decodes otherwise, even for a prev_hash whose bytes look like a tail."""
    _, log = history()
    decision = decode(log[-1].value)
    for prev_hash in (bytes(32), b"\x02\x40" + bytes(30), b"\x02\x40" * 16, bytes(range(32))):
        forged = decision.model_copy(
            update={"prev_hash": prev_hash, "restore_version": restore_version, "operation_metrics": metrics}
        )
        assert prev_hash_of(encode(forged)) == prev_hash


def test_a_metric_name_of_32_bytes_would_fool_the_tail_and_no_operation_may_claim_one() -> None:
    """The one tail the shortcut cannot tell from a link: a metrics map whose last entry is a 32-byte name with
    the value 0. The arbiter accepts only the registry's names, none of 32 bytes."""
    from ordo.schemas.operations import REGISTRY

    _, log = history()
    decision = decode(log[-1].value).model_copy(update={"operation_metrics": {"y" * 32: 0}})
    assert prev_hash_of(encode(decision)) == b"y" * 32 != decision.prev_hash
    assert all(len(name.encode()) != 32 for spec in REGISTRY.values() for name in spec.metrics)


def test_audit_reports_forged_and_unsigned_records_with_their_offsets() -> None:
    signer = Signer.generate()
    intents, _ = history()
    log = signed_log([signer])
    trust = Trust.of([signer.public_raw])
    assert audit("t", intents, log, trust=trust).ok
    forged = forge_after(log, 1)
    result = audit("t", intents, forged, trust=trust)
    assert not result.ok
    assert [(p.kind, p.decision_offset) for p in result.problems if p.kind == "unsigned"] == [("unsigned", 2)]
    # an exact repeat of an authentic record (Tansu shows aborted transactions) is not a problem
    repeat = [
        *log[:2],
        DecisionRecord(2, log[0].value),
        *[DecisionRecord(r.offset + 1, r.value, r.signature) for r in log[2:]],
    ]
    authentic, problems = authenticate("t", repeat, trust)
    assert problems == [] and len(authentic) == len(log)
