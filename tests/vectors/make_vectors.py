"""Write the log-format test vectors into ``tests/vectors/`` (docs/log-format.md).

Run from the repository root::

    PYTHONPATH=. .venv/bin/python tests/vectors/make_vectors.py

Deterministic: the intents are fixed, the decisions are what the arbiter's pure core derives from them
(``arbiter.core``), and Ed25519 signatures are deterministic, so a run rewrites identical files
(``tests/unit/test_log_vectors.py`` checks that). The signing keys come from the fixed seeds below:
TEST-ONLY keys, public in this file; nothing may ever trust them.

Each vector is the faithful log (or a variant) with the verdict every record must get. The verdicts are
written here by hand; before writing, the script checks that ordo's own verifier gives exactly them
(``tests.unit.log_vectors.ordo_verdicts``) and stops otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fastavro
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ordo.arbiter.core import apply, evaluate_record, new_state
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, TableMetadata, encode
from ordo.schemas.codec import MAGIC, _to_record, chain_hash, decode
from ordo.schemas.history import HISTORY_DIR, wire_fingerprint
from ordo.schemas.signing import SIGNATURE_HEADER, Signer
from tests.unit.log_vectors import VECTORS_DIR, ordo_verdicts

# TEST-ONLY signing keys: their seeds are public, right here. Never trust them outside these vectors.
SEED = hashlib.sha256(b"ordo log-format test vectors: TEST-ONLY key, never trust it").digest()
OTHER_SEED = hashlib.sha256(b"ordo log-format test vectors: a second TEST-ONLY key, trusted by no vector").digest()
PREFIX, TABLE = "audit", "sales"
TOPIC = f"{PREFIX}.{TABLE}.decisions"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z: intent i has CreateTime T0 + 1000 i
LOCATION = "/warehouse/audit/sales"


def signer(seed: bytes) -> Signer:
    """A signer of a TEST-ONLY key derived from ``seed``."""
    return Signer(Ed25519PrivateKey.from_private_bytes(seed))


SIGNER, OTHER = signer(SEED), signer(OTHER_SEED)


def data_file(name: str, dt: str) -> DataFile:
    return DataFile(
        path=f"dt={dt}/{name}-0.parquet",
        partition={"dt": dt},
        record_count=10,
        size_bytes=1000,
        min_key="1",
        max_key="9",
    )


def metadata(
    schema: str = "id BIGINT, amount DOUBLE, dt STRING", partitions: tuple[str, ...] = ("dt",)
) -> TableMetadata:
    return TableMetadata(
        location=LOCATION,
        schema=schema,
        primary_key=("id",),
        partition_columns=partitions,
        properties={"owner": "audit"},
    )


def intent(txn: str, operation: Operation, read_version: int, **fields: Any) -> bytes:
    return encode(CommitIntent(txn_id=txn, table=TABLE, operation=operation, read_version=read_version, **fields))


DAY1, DAY2, DAY3 = "2026-01-01", "2026-01-02", "2026-01-03"
INTENTS: list[bytes | None] = [
    intent("create", Operation.CREATE_TABLE, 0, metadata=metadata()),  # v0
    intent("ins1", Operation.INSERT_INTO, 0, partitions=({"dt": DAY1},), added_files=(data_file("ins1", DAY1),)),
    intent("ins2", Operation.INSERT_INTO, 1, partitions=({"dt": DAY2},), added_files=(data_file("ins2", DAY2),)),
    intent(
        "upd1",
        Operation.UPDATE,
        2,
        partitions=({"dt": DAY1},),
        added_files=(data_file("upd1", DAY1),),
    ),  # v3
    b"not avro",  # rejected MALFORMED_INTENT
    intent(
        "compact1",
        Operation.MINOR_COMPACT,
        3,
        partitions=({"dt": DAY2},),
        added_files=(data_file("compact1", DAY2),),
        removed_files=(f"dt={DAY2}/ins2-0.parquet",),
    ),  # v4
    intent("alter1", Operation.ALTER_TABLE, 4, metadata=metadata("id BIGINT, amount DOUBLE, dt STRING, note STRING")),
    intent(
        "merge1",
        Operation.UPDATE,
        5,
        partitions=({"dt": DAY3},),
        added_files=(data_file("merge1", DAY3),),
        operation_metrics={"numTargetRowsInserted": 6, "numTargetRowsUpdated": 3, "numTargetRowsDeleted": 1},
    ),  # v6: a MERGE with its metrics (since 0.5)
    intent(
        "check1",
        Operation.ADD_CONSTRAINT,
        6,
        metadata=metadata("id BIGINT, amount DOUBLE, dt STRING, note STRING").model_copy(
            update={"properties": {"owner": "audit", "delta.constraints.positive_amount": "amount > 0"}}
        ),
    ),  # v7: a CHECK constraint (since 0.6)
]


@dataclass
class Record:
    """One Kafka record of a decisions topic."""

    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] | None = None
    timestamp: int = 0

    def json(self) -> dict[str, Any]:
        b64 = lambda data: None if data is None else base64.b64encode(data).decode("ascii")  # noqa: E731
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_type": 1,
            "key": b64(self.key),
            "headers": None if self.headers is None else [[name, b64(value)] for name, value in self.headers],
            "value": b64(self.value),
        }


def encode_as(decision: CommitDecision, release: str) -> bytes:
    """``decision`` single-object encoded with ``release``'s writer schema (as that release's arbiter wrote it)."""
    schema = json.loads((HISTORY_DIR / f"CommitDecision.{release}.avsc").read_text())
    buffer = io.BytesIO()
    buffer.write(MAGIC + wire_fingerprint(schema, release))
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), _to_record(decision))
    data = buffer.getvalue()
    assert decode(data) == decision, f"{release} cannot write {decision}"
    return data


def sig(signer_: Signer, value: bytes, table: str = TABLE) -> list[tuple[str, bytes | None]]:
    return [(SIGNATURE_HEADER, signer_.header(table, value))]


def decide(transactions: list[tuple[str, list[int]]]) -> tuple[list[Record], list[CommitDecision]]:
    """The decisions of ``INTENTS`` as arbiters of the given releases wrote them, one Kafka transaction per entry.

    ``(release, intent indexes)``: 0.1 wrote no signatures; later releases sign the last record of each
    transaction. Each transaction is followed by its commit marker, which takes an offset.
    """
    state, records, decisions, offset = new_state(TABLE), [], [], 0
    for release, indexes in transactions:
        for position, index in enumerate(indexes):
            decision = evaluate_record(state, INTENTS[index], T0 + 1000 * index, index)
            data = encode_as(decision, release)
            apply(state, decision, data)
            last = position == len(indexes) - 1
            headers = sig(SIGNER, data) if last and release != "0.1" else None
            key = decision.txn_id.encode() if decision.txn_id else None
            records.append(Record(offset, data, key, headers, T0 + 1000 * index + 500))
            decisions.append(decision)
            offset += 1
        offset += 1  # the transaction's commit marker
    return records, decisions


BATCHES = [("0.6", [0]), ("0.6", [1, 2, 3]), ("0.6", [4, 5]), ("0.6", [6, 7])]  # decisions at 0 | 2 3 4 | 6 7 | 9 10
SIGNED, DECIDED = decide(BATCHES)
LAST = SIGNED[-1].offset  # 10


def intents_json(count: int = len(INTENTS)) -> list[dict[str, Any]]:
    return [Record(i, INTENTS[i], None, None, T0 + 1000 * i).json() for i in range(count)]


def at(records: list[Record], offset: int) -> Record:
    return next(r for r in records if r.offset == offset)


def with_record(records: list[Record], offset: int, **changes: Any) -> list[Record]:
    """``records`` with the record at ``offset`` changed."""
    return [replace(r, **changes) if r.offset == offset else r for r in records]


def flip(data: bytes, position: int) -> bytes:
    """``data`` with one bit of byte ``position`` flipped."""
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


def forged(template: CommitDecision, prev: bytes, **changes: Any) -> bytes:
    """A decision like ``template`` chaining to the record ``prev`` (bytes), changed by ``changes``."""
    return encode(template.model_copy(update={"prev_hash": chain_hash(prev), **changes}))


def at_ms(i: float) -> datetime:
    """The time version of intent ``i`` (its CreateTime)."""
    return datetime.fromtimestamp((T0 + 1000 * i) / 1000, tz=UTC)


# The template of the records the key holder forges after the faithful log: its last decision (merge1, an UPDATE).
FORGED = DECIDED[-1].model_copy(update={"txn_id": "forged", "message": "signed by the key holder"})


def appended(base: list[Record], variants: list[dict[str, Any]], *, sign: bool = True) -> list[Record]:
    """``base`` and after it one record per variant (``FORGED`` changed by it), each chaining to the one before
    (a ``prev_hash`` in the variant overrides the link) and, with ``sign``, signed by the trusted key as its own
    batch. A variant's ``release`` picks the writer schema (default: the current one)."""
    records, prev, offset = list(base), base[-1].value, base[-1].offset + 2
    for variant in variants:
        changes = dict(variant)
        release = changes.pop("release", None)
        assert prev is not None
        decision = FORGED.model_copy(update={"prev_hash": chain_hash(prev), **changes})
        value = encode(decision) if release is None else encode_as(decision, release)
        records.append(Record(offset, value, b"forged", sig(SIGNER, value) if sign else None))
        prev, offset = value, offset + 2
    return records


def signed_invalid() -> list[Record]:
    """After the faithful log, records the key holder signed (each its own batch), each breaking one invariant.

    A signature vouches for authorship, not correctness: each is released, and the fold names its problem.
    """
    variants: list[dict[str, Any]] = [
        {"table": "other", "intent_offset": 8},
        {"intent_offset": 7},
        {"intent_offset": 5},
        {"intent_offset": 8, "id_version": 8, "time_version": at_ms(8)},
        {"intent_offset": 9, "id_version": 8, "time_version": at_ms(9)},
        {"intent_offset": 10, "id_version": 9, "time_version": None},
        {"intent_offset": 11, "id_version": 10, "operation": Operation.ALTER_TABLE, "time_version": at_ms(11)},
        {
            "intent_offset": 12,
            "id_version": 11,
            "time_version": at_ms(12),
            "added_files": (data_file("insx", DAY3).model_copy(update={"partition": {"region": "eu"}}),),
        },
        {
            "intent_offset": 13,
            "id_version": 12,
            "time_version": at_ms(13),
            "added_files": (data_file("insy", DAY3),) * 2,
        },
        {
            "intent_offset": 14,
            "id_version": 13,
            "time_version": None,
            "operation": Operation.MINOR_COMPACT,
            "added_files": (),
            "removed_files": (f"dt={DAY3}/merge1-0.parquet",) * 2,
        },
        {
            "intent_offset": 15,
            "id_version": 14,
            "time_version": at_ms(15),
            "operation": Operation.CREATE_TABLE,
            "added_files": (),
            "metadata": metadata(),
        },
        {"intent_offset": 16, "id_version": None, "time_version": at_ms(16)},
    ]
    return appended(SIGNED, variants)


@dataclass
class Vector:
    name: str
    description: str
    records: list[Record]
    expected: dict[int, str] = field(default_factory=dict)  # offset -> verdict; every other record: ok
    require_signatures: bool = True
    intents: int = len(INTENTS)

    def document(self) -> dict[str, Any]:
        log = {
            "description": self.description,
            "topic": TOPIC,
            "table": TABLE,
            "require_signatures": self.require_signatures,
            "public_keys": [SIGNER.public_pem().decode()],
            "records": [r.json() for r in self.records],
            "intents": intents_json(self.intents),
        }
        verdicts = ordo_verdicts(log)
        want = {r.offset: self.expected.get(r.offset, "ok") for r in self.records}
        got = {offset: verdict for offset, verdict, _ in verdicts}
        if got != want:
            raise SystemExit(f"{self.name}: ordo's verdicts differ from the expected ones:\n got {got}\nwant {want}")
        log["expected"] = [{"offset": o, "verdict": v, "signature": s} for o, v, s in verdicts]
        return log


def chain_of(offsets: list[int], verdict: str) -> dict[int, str]:
    return dict.fromkeys(offsets, verdict)


def vectors() -> list[Vector]:
    """Every vector: the faithful logs, then one forgery of each kind the verifier tells apart."""
    NS, NC = "unsigned:no_signature", "unsigned:not_chained"
    upgrade, _ = decide(
        [
            ("0.1", [0]),
            ("0.1", [1]),
            ("0.1", [2]),
            ("0.2", [3]),
            ("0.2", [4]),
            ("0.3", [5]),
            ("0.4", [6]),
            ("0.5", [7]),
            ("0.6", [8]),
        ]
    )
    v1_log, v1_decisions = decide([("0.1", [i]) for i in range(6)])  # decisions at 0 2 4 6 8 10
    bad = {**chain_of([2, 3, 4, 6, 9], NS), **chain_of([7, 10], NC)}  # a bad claim on 4 stops every later walk
    rec4 = at(SIGNED, 4)
    header4 = (rec4.headers or [("", b"")])[0][1] or b""
    tampered_3 = flip(at(SIGNED, 3).value or b"", 40)
    forged_1 = forged(DECIDED[1], at(SIGNED, 0).value or b"", message="forged", writer="mallory")
    forged_12 = forged(DECIDED[-1], at(SIGNED, LAST).value or b"", intent_offset=8, id_version=7, txn_id="forged")
    v1_edit = v1_decisions[3].model_copy(update={"prev_hash": b"\x11" * 32})
    no_create = encode(DECIDED[1].model_copy(update={"intent_offset": 0, "id_version": 0, "prev_hash": bytes(32)}))
    trailing = (at(v1_log, 10).value or b"") + b"\x00"
    return [
        Vector(
            "valid",
            "A faithful signed log (the current release's schema): four Kafka transactions, the last record of each signed.",
            SIGNED,
        ),
        Vector(
            "upgrade",
            "One table's log across releases: 0.1 decisions (v1 schema, unsigned), 0.2 (v2, signed), 0.3 (v3), 0.4 "
            "(v4), 0.5 (v5: a MERGE with its operation metrics), 0.6 (v6: an ADD_CONSTRAINT). The first signed record "
            "vouches for the unsigned "
            "history behind it.",
            upgrade,
        ),
        Vector(
            "unsigned_v1",
            "A 0.1 log (v1 schema, no signatures) read with signatures not required (--allow-unsigned).",
            v1_log,
            require_signatures=False,
            intents=6,
        ),
        Vector(
            "missing_signature_mid",
            "The signature of a batch's last record (offset 4) is missing: the next signed record (7) vouches for "
            "both batches through the chain.",
            with_record(SIGNED, 4, headers=None),
        ),
        Vector(
            "missing_signature_last",
            "The last batch's signature (offset 10) is missing: nothing vouches for 9 and 10.",
            with_record(SIGNED, LAST, headers=None),
            chain_of([9, 10], NS),
        ),
        Vector(
            "malformed_signature",
            "The ordo-sig header of offset 4 is 71 bytes, not 72. A record with a signature that does not verify is a "
            "barrier: no later signature vouches through it, so every later record is refused.",
            with_record(SIGNED, 4, headers=[(SIGNATURE_HEADER, header4[:71])]),
            bad,
        ),
        Vector(
            "unknown_key",
            "Offset 4 is signed by a key no reader trusts (a well-formed signature, another key id).",
            with_record(SIGNED, 4, headers=sig(OTHER, rec4.value or b"")),
            bad,
        ),
        Vector(
            "signed_for_another_table",
            "Offset 4 carries the trusted key's valid signature of the same bytes for table 'other' (a record copied "
            "from another table's topic): the table name is in the signed message, so it is a bad signature here.",
            with_record(SIGNED, 4, headers=sig(SIGNER, rec4.value or b"", "other")),
            bad,
        ),
        Vector(
            "bad_signature",
            "One bit of offset 4's signature is flipped.",
            with_record(SIGNED, 4, headers=[(SIGNATURE_HEADER, flip(header4, 20))]),
            bad,
        ),
        Vector(
            "tampered_signed_value",
            "One bit of the value of offset 4 (a signed record) is flipped: its signature no longer verifies.",
            with_record(SIGNED, 4, value=flip(rec4.value or b"", 40)),
            bad,
        ),
        Vector(
            "tampered_value",
            "One bit of the value of offset 3 (unsigned, inside a batch) is flipped: the batch's signed record (4) "
            "chains to the original bytes, so it does not chain to the last verified record; nor does any later one.",
            with_record(SIGNED, 3, value=tampered_3),
            {**chain_of([2, 3, 6, 9], NS), **chain_of([4, 7, 10], NC)},
        ),
        Vector(
            "dropped",
            "The record at offset 3 is gone: the signed record 4 does not chain to the last verified record.",
            [r for r in SIGNED if r.offset != 3],
            {**chain_of([2, 6, 9], NS), **chain_of([4, 7, 10], NC)},
        ),
        Vector(
            "reordered_in_batch",
            "Offsets 2 and 3 swapped inside their batch. The signed record 4 walks back through both to the last "
            "verified record: a reader releases a batch in chain order, which is the order the arbiter wrote.",
            with_record(
                with_record(SIGNED, 2, value=at(SIGNED, 3).value, key=at(SIGNED, 3).key),
                3,
                value=at(SIGNED, 2).value,
                key=at(SIGNED, 2).key,
            ),
        ),
        Vector(
            "injected_unsigned",
            "An unsigned decision with a correct prev_hash (it chains to offset 0) injected at offset 1: the signed "
            "record 4 vouches for its own path (2, 3, 4), not for the injected record.",
            sorted([*SIGNED, Record(1, forged_1, b"mallory")], key=lambda r: r.offset),
            {1: "unsigned:not_vouched"},
        ),
        Vector(
            "injected_at_end",
            "An unsigned decision chaining to the last record, appended at offset 12: nothing vouches for it.",
            [*SIGNED, Record(12, forged_12, b"forged")],
            {12: NS},
        ),
        Vector(
            "replayed_copy",
            "An exact copy of the signed record at offset 4 (value and header) appended at offset 12. Readers refuse "
            "it (it does not chain to the last verified record); the audit does not count an exact repeat of an "
            "authentic record.",
            [*SIGNED, replace(at(SIGNED, 4), offset=12)],
            {12: "copy"},
        ),
        Vector(
            "signed_undecodable",
            "Validly signed records that are not decisions of a known schema (no framing at 12; an unknown "
            "fingerprint at 13): a record whose prev_hash cannot be read chains to nothing.",
            [
                *SIGNED,
                Record(12, b"not avro", None, sig(SIGNER, b"not avro")),
                Record(13, b"\xc3\x01" + bytes(8) + b"\x00", None, sig(SIGNER, b"\xc3\x01" + bytes(8) + b"\x00")),
            ],
            chain_of([12, 13], NC),
        ),
        Vector(
            "signed_invalid",
            "Records signed by the trusted key (each its own batch) after the faithful log, each breaking one "
            "invariant of the log (the verdict names it): a signature vouches for who wrote a record, not that it "
            "is a correct decision.",
            signed_invalid(),
            {
                offset: name
                for offset, name in zip(
                    range(LAST + 2, LAST + 2 + 2 * 12, 2),
                    [
                        "wrong_table",
                        "repeated_intent",
                        "reordered",
                        "version_gap",
                        "version_reused",
                        "time_version",
                        "no_metadata",
                        "partition",
                        "already_live",
                        "not_live",
                        "second_create",
                        "incomplete",
                    ],
                    strict=True,
                )
            },
        ),
        Vector(
            "signed_before_create",
            "A log whose first record, signed by the trusted key, accepts an INSERT_INTO before any CREATE_TABLE.",
            [Record(0, no_create, b"ins1", sig(SIGNER, no_create))],
            {0: "no_create"},
        ),
        Vector(
            "unsigned_broken",
            "The 0.1 log with signatures not required, and broken: offset 6's prev_hash replaced (a chain break "
            "there, and at 8, which chains to the original), then an empty record (12), a record without the C3 01 "
            "marker (13), an unknown schema fingerprint (14), a decision with a trailing byte (15), an intent in the "
            "decisions topic (16), a zero-length value (17: a value, released, and not Avro; only a record with no value is refused as empty). The malformed ordo-sig header of offset 2 is not looked at: ok.",
            [
                *with_record(
                    with_record(v1_log, 6, value=encode_as(v1_edit, "0.1")), 2, headers=[(SIGNATURE_HEADER, bytes(5))]
                ),
                Record(12, None),
                Record(13, (at(v1_log, 10).value or b"")[2:]),
                Record(14, b"\xc3\x01" + bytes(8) + (at(v1_log, 10).value or b"")[10:]),
                Record(15, trailing),
                Record(16, INTENTS[1]),
                Record(17, b""),
            ],
            {6: "chain", 8: "chain", 12: "unsigned:empty", 13: "undecodable", 14: "undecodable", 15: "undecodable"}
            | {16: "not_decision", 17: "undecodable"},
            require_signatures=False,
            intents=6,
        ),
        *fold_rule_vectors(),
    ]


def on_region(name: str, region: str = "eu") -> DataFile:
    """A data file of a table partitioned by ``region`` instead of ``dt``."""
    return data_file(name, DAY3).model_copy(
        update={"path": f"region={region}/{name}-0.parquet", "partition": {"region": region}}
    )


BY_REGION = metadata("id BIGINT, amount DOUBLE, dt STRING, note STRING, region STRING", ("region",))
BY_DAY = metadata("id BIGINT, amount DOUBLE, dt STRING, note STRING, region STRING")


def fold_rule_vectors() -> list[Vector]:
    """The fold's rules the faithful logs do not reach: combined verdicts, the time rules, ``incomplete``, which
    metadata the ``partition`` check uses, and the rules of empty values and headers (docs/log-format.md)."""
    NS, NC, NV = "unsigned:no_signature", "unsigned:not_chained", "unsigned:not_vouched"
    files = lambda *made: {"added_files": made, "removed_files": ()}  # noqa: E731
    write = lambda i, version, *made, **more: {  # noqa: E731
        "intent_offset": i, "id_version": version, "time_version": at_ms(i), **files(*made), **more
    }  # fmt: skip
    rec4, rec7, rec10 = at(SIGNED, 4), at(SIGNED, 7), at(SIGNED, LAST)
    empty_signed = Record(LAST + 2, b"", None, sig(SIGNER, b""))
    bogus = b"\x11" * 32
    create_with_files = encode(DECIDED[0].model_copy(update={"added_files": (on_region("c0"),), "time_version": None}))
    rejected = {"outcome": Outcome.REJECTED, "operation": None, "id_version": None, "time_version": None}
    return [
        Vector(
            "combined_verdicts",
            "Records signed by the trusted key after the faithful log, with several problems each: the verdict names "
            "every problem, in the fold's order. A record naming another table is checked no further (its intent "
            "offset counts in that table's intents topic): 12 (intent offset below the last) and 14 (the last one) "
            "are wrong_table alone. 16: an ALTER_TABLE with a gap, no time version and no metadata. 18: a file "
            "removed twice, one added twice, outside the partition columns. 20: an accepted repeat "
            "(duplicate_of) is not checked further, whatever its version.",
            appended(
                SIGNED,
                [
                    {"table": "other", "intent_offset": 3},
                    {"table": "other", "intent_offset": 7},
                    {"intent_offset": 8, "id_version": 8, "operation": Operation.ALTER_TABLE, "time_version": None}
                    | files(),
                    write(9, 9, on_region("insx"), on_region("insx"))
                    | {"removed_files": (f"dt={DAY3}/merge1-0.parquet",) * 2},
                    {"intent_offset": 10, "id_version": 2, "time_version": None, "duplicate_of": 2} | files(),
                ],
            ),
            {12: "wrong_table", 14: "wrong_table", 16: "version_gap+time_version+no_metadata"}
            | {18: "not_live+already_live+partition"},
        ),
        Vector(
            "time_rules",
            "The two time-version rules, signed after the faithful log. 12: a compaction carrying a time version "
            "(above the last). 14: a time version below the last one, which the head takes all the same (the fold "
            "re-synchronizes on the record), so 16's, between the two, is ok. 18: a compaction carrying a time "
            "version below the last: both rules fail, one time_version. 20: a data change without one. 22: an "
            "accepted decision without an operation: incomplete, and neither its version nor its time version "
            "(far ahead) moves the head, so 24 is ok.",
            appended(
                SIGNED,
                [
                    write(8, 7, operation=Operation.MINOR_COMPACT),
                    write(9, 8) | {"time_version": at_ms(7.5)},
                    write(10, 9) | {"time_version": at_ms(7.8)},
                    write(11, 10, operation=Operation.MINOR_COMPACT) | {"time_version": at_ms(7)},
                    write(12, 11) | {"time_version": None},
                    write(13, 12, operation=None) | {"time_version": at_ms(99)},
                    write(14, 12),
                ],
            ),
            {12: "time_version", 14: "time_version", 18: "time_version", 20: "time_version", 22: "incomplete"},
        ),
        Vector(
            "incomplete",
            "Accepted decisions without an operation (12) or an ID version (14), signed after the faithful log: "
            "incomplete, and the head's version and time version stay where they were (16 is ok). Not checked "
            "further, so ok: a rejected decision with neither (18), an accepted repeat naming an old version (20).",
            appended(
                SIGNED,
                [
                    write(8, 7, operation=None) | {"time_version": at_ms(50)},
                    write(9, None),
                    write(10, 7),
                    {"intent_offset": 11, "reason": "CONFLICT_LATER_FAILS"} | rejected | files(),
                    {"intent_offset": 12, "id_version": 3, "time_version": at_ms(3), "duplicate_of": 4} | files(),
                ],
            ),
            {12: "incomplete", 14: "incomplete"},
        ),
        Vector(
            "metadata_from_write",
            "Every accepted commit that carries metadata sets the table's metadata, whatever its operation and "
            "writer schema; the partition check of a record uses the metadata before it. 12: a second CREATE_TABLE "
            "partitioned by region, its file checked against the table's dt. 14: a file by region is then ok. 16: "
            "an INSERT_INTO carrying metadata partitioned by dt again, its own file (by region) checked against "
            "the metadata before it: ok; so 18's file by dt is ok and 20's by region is not. 22: an UPDATE in the "
            "0.4 writer schema carrying the region metadata: 24's file by region is ok.",
            appended(
                SIGNED,
                [
                    write(8, 7, on_region("c2"), operation=Operation.CREATE_TABLE, metadata=BY_REGION),
                    write(9, 8, on_region("i9")),
                    write(10, 9, on_region("i10"), operation=Operation.INSERT_INTO, metadata=BY_DAY),
                    write(11, 10, data_file("i11", DAY3), operation=Operation.INSERT_INTO),
                    write(12, 11, on_region("i12"), operation=Operation.INSERT_INTO),
                    write(13, 12, data_file("u13", DAY3), metadata=BY_REGION, operation_metrics={}, release="0.4"),
                    write(14, 13, on_region("i14")),
                ],
            ),
            {12: "second_create+partition", 20: "partition"},
        ),
        Vector(
            "create_adds_files",
            "A table's first CREATE_TABLE (signed) that adds a file outside its own partition columns and has no "
            "time version: the partition check uses the metadata before the record, none here, so the verdict is "
            "time_version alone (no reader adds a CREATE_TABLE's files; the re-derivation reports it edited).",
            [Record(0, create_with_files, b"create", sig(SIGNER, create_with_files))],
            {0: "time_version"},
            intents=1,
        ),
        Vector(
            "empty_headers",
            "Header forms, all ok. The first ordo-sig header is the one a reader takes: at 4 it has no value, which "
            "counts as no header (the valid ordo-sig after it is not looked at); a later signature (7) vouches for "
            "the batch, as without a header. At 7 another header comes first (ignored); at 10 a second ordo-sig "
            "with no value follows the valid one. At 3 an empty header list.",
            with_record(
                with_record(
                    with_record(
                        with_record(SIGNED, 4, headers=[(SIGNATURE_HEADER, None), *sig(SIGNER, rec4.value or b"")]),
                        7,
                        headers=[("ordo-trace", bytes(72)), *sig(SIGNER, rec7.value or b"")],
                    ),
                    LAST,
                    headers=[*sig(SIGNER, rec10.value or b""), (SIGNATURE_HEADER, None)],
                ),
                3,
                headers=[],
            ),
        ),
        Vector(
            "empty_signature_header",
            "The ordo-sig header of offset 4 has a zero-length value: a header that is there, so malformed (not "
            "'none'), and a barrier like any header that does not verify.",
            with_record(SIGNED, 4, headers=[(SIGNATURE_HEADER, b"")]),
            {**chain_of([2, 3, 4, 6, 9], NS), **chain_of([7, 10], NC)},
        ),
        Vector(
            "empty_value",
            "No value and a zero-length value are two things. 5 has no value (null): refused at once. 1 and 13 have "
            "a zero-length value: held like any unsigned record (1 is not on the signed record 4's path; nothing "
            "vouches for 13). 12 is a zero-length value the trusted key signed: it has no link, so it chains to "
            "nothing.",
            sorted(
                [*SIGNED, Record(1, b""), Record(5, None), empty_signed, Record(LAST + 3, b"")],
                key=lambda r: r.offset,
            ),
            {1: NV, 5: "unsigned:empty", LAST + 2: NC, LAST + 3: NS},
        ),
        Vector(
            "duplicates_in_batch",
            "The same bytes twice in one batch: the copy kept for the walk is the earlier one, unless the earlier "
            "carries a header that does not verify (a barrier) and the later one does not. The other is refused, "
            "and as an exact copy of an authentic record its verdict is copy. 3 (malformed header) and 4: the walk "
            "takes 4. 7 and 8 (malformed header): it takes 7. 11 and 12 (no header either): it takes 11.",
            duplicated(),
            {3: "copy", 8: "copy", 12: "copy"},
        ),
        Vector(
            "combined_unsigned",
            "With signatures not required, records with a broken chain and another problem each, after the faithful "
            "log: chain first, then the rest. 12: reordered. 14: repeated_intent. 16: another table (nothing more "
            "checked). 18: incomplete. 20: a version gap. 22 chains to 20 and follows its version: ok (the fold "
            "re-synchronizes on each record).",
            appended(
                SIGNED,
                [
                    {"intent_offset": 3, "prev_hash": bogus},
                    {"intent_offset": 7, "prev_hash": bogus},
                    {"table": "other", "intent_offset": 2, "prev_hash": bogus},
                    write(8, None) | {"prev_hash": bogus},
                    write(9, 9) | {"prev_hash": bogus},
                    write(10, 10),
                ],
                sign=False,
            ),
            {12: "chain+reordered", 14: "chain+repeated_intent", 16: "chain+wrong_table", 18: "chain+incomplete"}
            | {20: "chain+version_gap"},
            require_signatures=False,
        ),
    ]


def duplicated() -> list[Record]:
    """The faithful log with an unsigned record repeated inside each of three batches (``duplicates_in_batch``)."""
    bad = [(SIGNATURE_HEADER, bytes(71))]
    create, ins1, ins2, upd1, rejection, compact1, alter1, merge1 = SIGNED
    return [
        create,
        replace(ins1, offset=2),
        replace(ins2, offset=3, headers=bad),
        replace(ins2, offset=4),
        replace(upd1, offset=5),
        replace(rejection, offset=7),
        replace(rejection, offset=8, headers=bad),
        replace(compact1, offset=9),
        replace(alter1, offset=11),
        replace(alter1, offset=12),
        replace(merge1, offset=13),
    ]


def main() -> None:
    VECTORS_DIR.mkdir(exist_ok=True)
    for old in VECTORS_DIR.glob("*.json"):
        old.unlink()
    for vector in vectors():
        (VECTORS_DIR / f"{vector.name}.json").write_text(json.dumps(vector.document(), indent=1) + "\n")
        print(f"{vector.name}: {len(vector.records)} records")
    (VECTORS_DIR / "vectors.pub").write_bytes(SIGNER.public_pem())


if __name__ == "__main__":
    main()
