"""Avro codec for ordo events, in Avro single-object encoding.

Every message is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of
its writer schema's canonical form + the schemaless Avro body. The fingerprint
says which event it is and which schema version wrote it, so a reader can
resolve an older writer schema against the current reader schema.

Schemas are parsed once at import; the hot path is one ``schemaless_reader`` or
``schemaless_writer`` call plus pydantic validation.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import ValidationError

from schemas.errors import CodecError, UnknownSchemaError
from schemas.models import CommitDecision, CommitIntent

AVRO_DIR = Path(__file__).parent / "avro"
MAGIC = b"\xc3\x01"
HEADER_LEN = 10
Event = CommitIntent | CommitDecision


def _load(name: str, named: dict[str, Any]) -> Any:
    raw = json.loads((AVRO_DIR / f"{name}.avsc").read_text())
    return fastavro.parse_schema(raw, named_schemas=named)


def _fingerprint(parsed: Any) -> bytes:
    canonical = to_parsing_canonical_form(parsed)
    return struct.pack("<Q", int(fingerprint(canonical, "CRC-64-AVRO"), 16))


@dataclass(frozen=True)
class _Schema:
    model: type[CommitIntent] | type[CommitDecision]
    writer: Any
    reader: Any
    header: bytes


class Codec:
    """Encodes current-version events and decodes any registered schema version."""

    def __init__(self) -> None:
        named: dict[str, Any] = {}
        for dependency in ("Operation", "DataFile", "TableMetadata"):
            _load(dependency, named)
        self._named = named
        self._by_model: dict[type, _Schema] = {}
        self._by_fingerprint: dict[bytes, _Schema] = {}
        for model in (CommitIntent, CommitDecision):
            parsed = _load(model.__name__, named)
            # reader None: the writer schema is the current one, so fastavro skips resolution
            entry = _Schema(model, parsed, None, MAGIC + _fingerprint(parsed))
            self._by_model[model] = entry
            self._by_fingerprint[entry.header[2:]] = entry

    def register_writer_schema(self, schema: dict[str, Any], model: type[CommitIntent] | type[CommitDecision]) -> bytes:
        """Make messages written with an older (or newer) ``schema`` of ``model`` readable.

        Returns the schema's fingerprint. Avro schema resolution fills fields the
        writer did not have from the reader schema's defaults.
        """
        parsed = fastavro.parse_schema(schema, named_schemas=dict(self._named))
        fp = _fingerprint(parsed)
        self._by_fingerprint[fp] = _Schema(model, parsed, self._by_model[model].writer, MAGIC + fp)
        return fp

    def schema_of(self, model: type[CommitIntent] | type[CommitDecision]) -> Any:
        """The parsed current schema of ``model``."""
        return self._by_model[model].writer

    def encode(self, event: Event) -> bytes:
        """Serialize ``event`` with its current schema, single-object encoded."""
        entry = self._by_model.get(type(event))
        if entry is None:
            raise CodecError(f"cannot encode {type(event).__name__}: not an ordo event")
        buffer = io.BytesIO()
        buffer.write(entry.header)
        fastavro.schemaless_writer(buffer, entry.writer, _to_record(event))
        return buffer.getvalue()

    def decode_dict(self, data: bytes) -> tuple[type[CommitIntent] | type[CommitDecision], dict[str, Any]]:
        """Read ``data`` into ``(model, plain dict)`` without pydantic validation."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CodecError(f"expected bytes, got {type(data).__name__}")
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise CodecError("not an Avro single-object message (missing C3 01 header)")
        entry = self._by_fingerprint.get(bytes(data[2:HEADER_LEN]))
        if entry is None:
            raise UnknownSchemaError(f"unknown schema fingerprint {bytes(data[2:HEADER_LEN]).hex()}")
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_LEN)
        try:
            record = fastavro.schemaless_reader(buffer, entry.writer, entry.reader)
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise CodecError(f"corrupt {entry.model.__name__} body: {exc.__class__.__name__}: {exc}") from exc
        if buffer.tell() != len(data):
            raise CodecError(f"{len(data) - buffer.tell()} trailing bytes after {entry.model.__name__}")
        return entry.model, record  # type: ignore[return-value]

    def decode(self, data: bytes) -> Event:
        """Read and validate one event; raise ``CodecError`` for anything else."""
        model, record = self.decode_dict(data)
        try:
            return model.model_validate(record)
        except ValidationError as exc:
            raise CodecError(f"invalid {model.__name__}: {_summarize(exc)}") from exc


_MILLISECOND = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _to_record(event: Event) -> dict[str, Any]:
    """The event as the plain dict fastavro writes, built without ``model_dump``.

    This is the hot path of the arbiter (one decision per intent), so it avoids
    pydantic serialization and tells fastavro which union branch to take instead
    of letting it probe every branch: ``("array", ...)`` is fastavro's explicit
    union notation. The bytes are identical to writing ``model_dump()``.
    """
    record = dict(event.__dict__)
    record["added_files"] = [data_file.__dict__ for data_file in record["added_files"]]
    partitions = record["partitions"]
    if partitions is not None:
        record["partitions"] = ("array", list(partitions))
    metadata = record.get("metadata")
    if metadata is not None:
        record["metadata"] = metadata.__dict__
    time_version = record.get("time_version")
    if time_version is not None:
        if time_version.tzinfo is None:
            time_version = time_version.replace(tzinfo=UTC)
        record["time_version"] = (time_version - _EPOCH) // _MILLISECOND
    return record


def _summarize(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "<root>"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


DEFAULT_CODEC = Codec()


def encode(event: Event) -> bytes:
    """Serialize an intent or decision (DESIGN section 8)."""
    return DEFAULT_CODEC.encode(event)


def decode(data: bytes) -> Event:
    """Deserialize bytes into a ``CommitIntent`` or ``CommitDecision``; ``CodecError`` otherwise."""
    return DEFAULT_CODEC.decode(data)


def chain_hash(encoded_decision: bytes) -> bytes:
    """SHA-256 of a decision record's bytes: the link stored in the next decision's ``prev_hash``."""
    return hashlib.sha256(encoded_decision).digest()
