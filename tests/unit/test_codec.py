"""The wire format: golden files read back by plain fastavro, schema evolution, codec errors."""

from __future__ import annotations

import copy
import io
import json
import struct

import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form

from ordo.schemas import CodecError, CommitDecision, CommitIntent, UnknownSchemaError, decode, encode
from ordo.schemas.codec import AVRO_DIR, Codec
from ordo.schemas.history import HISTORY_DIR, wire_fingerprint

from .golden import BINS, CURRENT, EVENTS, GOLDEN, GOLDEN_BINS


def plain_schema(name: str) -> dict:
    named: dict = {}
    for dependency in ("Operation", "DataFile", "TableMetadata"):
        fastavro.parse_schema(json.loads((AVRO_DIR / f"{dependency}.avsc").read_text()), named_schemas=named)
    return fastavro.parse_schema(json.loads((AVRO_DIR / f"{name}.avsc").read_text()), named_schemas=named)


@pytest.mark.parametrize(("name", "suffix"), GOLDEN_BINS)
def test_golden_file_is_single_object_encoded_and_readable_by_plain_fastavro(name: str, suffix: str) -> None:
    """Each golden file carries its release's fingerprint and plain fastavro reads it with that release's schema."""
    data = (GOLDEN / f"{name}_{suffix}.bin").read_bytes()
    event = EVENTS[name]
    release = BINS[suffix]
    raw = json.loads((HISTORY_DIR / f"{type(event).__name__}.{release}.avsc").read_text())
    writer = fastavro.parse_schema(raw, named_schemas={})
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == wire_fingerprint(raw, release)
    if suffix == CURRENT:  # since 0.2: the plain Avro fingerprint of the self-contained schema
        expected_fp = int(fingerprint(to_parsing_canonical_form(writer), "CRC-64-AVRO"), 16)
        assert struct.unpack("<Q", data[2:10])[0] == expected_fp
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, plain_schema(type(event).__name__))
    assert record["txn_id"] == event.txn_id
    assert record["table"] == event.table
    assert all(f["bucket"] == 0 for f in record["added_files"])
    assert CommitIntent.__name__ == type(event).__name__ or record["outcome"] == event.outcome.value  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "suffix"), GOLDEN_BINS)
def test_golden_file_decodes_to_the_same_event_and_current_encoding_is_stable(name: str, suffix: str) -> None:
    data = (GOLDEN / f"{name}_{suffix}.bin").read_bytes()
    assert decode(data) == EVENTS[name]
    if suffix == CURRENT:
        assert encode(EVENTS[name]) == data
    else:
        assert encode(EVENTS[name]) != data  # an older release's bytes: still read, never written


def _with_new_optional_field(schema: dict) -> dict:
    evolved = copy.deepcopy(schema)
    evolved["fields"].append({"name": "priority", "type": ["null", "int"], "default": None})
    return evolved


def test_old_messages_stay_readable_after_a_new_optional_field() -> None:
    """A reader on the next schema version (one more optional field) reads today's messages."""
    old_schema = json.loads((AVRO_DIR / "CommitIntent.avsc").read_text())
    named: dict = {}
    for dependency in ("Operation", "DataFile", "TableMetadata"):
        fastavro.parse_schema(json.loads((AVRO_DIR / f"{dependency}.avsc").read_text()), named_schemas=named)
    writer = fastavro.parse_schema(old_schema, named_schemas=dict(named))
    reader = fastavro.parse_schema(_with_new_optional_field(old_schema), named_schemas=dict(named))
    data = (GOLDEN / f"intent_insert_{CURRENT}.bin").read_bytes()
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, reader)
    assert record["priority"] is None and record["txn_id"] == "t1"


def test_messages_of_a_registered_newer_schema_decode_with_the_current_model() -> None:
    codec = Codec()
    newer = _with_new_optional_field(json.loads((AVRO_DIR / "CommitIntent.avsc").read_text()))
    fp = codec.register_writer_schema(newer, CommitIntent)
    parsed = fastavro.parse_schema(newer, named_schemas=dict(codec._named))
    buffer = io.BytesIO()
    record = EVENTS["intent_insert"].model_dump()
    record["partitions"] = list(record["partitions"])
    record["priority"] = 5
    fastavro.schemaless_writer(buffer, parsed, record)
    event = codec.decode(b"\xc3\x01" + fp + buffer.getvalue())
    assert event == EVENTS["intent_insert"]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", CodecError),
        (b"{json}", CodecError),
        (b"\xc3\x01" + b"\xff" * 8 + b"x", UnknownSchemaError),
    ],
)
def test_decode_errors_are_clear(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(data)


def test_trailing_bytes_and_truncation_are_errors() -> None:
    data = encode(EVENTS["decision_accepted"])
    with pytest.raises(CodecError, match="trailing"):
        decode(data + b"\x00")
    with pytest.raises(CodecError):
        decode(data[:-5])


def test_decisions_roundtrip_through_the_codec() -> None:
    event = EVENTS["decision_rejected"]
    assert isinstance(decode(encode(event)), CommitDecision)
