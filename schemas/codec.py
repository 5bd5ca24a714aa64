"""Avro codec for ordo events, in Avro single-object encoding.

Every message is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of
its writer schema's canonical form + the schemaless Avro body. The fingerprint
says which event it is and which schema version wrote it, so a reader can
resolve an older writer schema against the current reader schema.

Two implementations of one wire format:

* **Fast path** (the arbiter decodes one intent and encodes one decision per
  record; the consumer and rebuilds decode every decision): a reader and a
  writer hand-written for the current schemas. The reader builds the models
  directly, checking on the way every limit the models declare, without
  pydantic. Avro binary is simple: zig-zag varints, length-prefixed UTF-8, a
  varint union branch index, an enum symbol index, block-encoded arrays and
  maps.
* **Reference path**: fastavro's ``schemaless_reader``/``schemaless_writer``
  and pydantic's ``model_validate``. It serves registered older or newer
  writer schemas and every input the fast path does not take: the fast path
  *bails out* on anything unusual (corrupt or truncated bytes, a value outside
  a model limit, a non-canonical encoding, an unexpected type), and the
  reference path then produces the result or the exact error it always did.
  So the fast path only ever returns what the reference path would;
  ``tests/unit/test_codec_fast.py`` checks that on generated inputs (bytes,
  records, models and error messages).
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import BaseModel, ValidationError

from schemas.errors import CodecError, UnknownSchemaError
from schemas.history import current_schema, inline_references, released_schemas, schema_fingerprint, wire_fingerprint
from schemas.models import (
    MAX_BUCKET,
    MAX_FILES_PER_INTENT,
    MAX_ID_LENGTH,
    MAX_PARTITIONS_PER_INTENT,
    MAX_PATH_LENGTH,
    MAX_VERSION,
    CommitDecision,
    CommitIntent,
    DataFile,
    Operation,
    Outcome,
    Rebase,
    TableMetadata,
)
from schemas.topics import TABLE_NAME_PATTERN

AVRO_DIR = Path(__file__).parent / "avro"
MAGIC = b"\xc3\x01"
HEADER_LEN = 10
Event = CommitIntent | CommitDecision
M = TypeVar("M", bound=BaseModel)


def _load(name: str, named: dict[str, Any]) -> Any:
    raw = json.loads((AVRO_DIR / f"{name}.avsc").read_text())
    return fastavro.parse_schema(raw, named_schemas=named)


def _fingerprint(parsed: Any) -> bytes:
    """Fingerprint of a parsed schema's canonical form (named types it only references stay names)."""
    canonical = to_parsing_canonical_form(parsed)
    return struct.pack("<Q", int(fingerprint(canonical, "CRC-64-AVRO"), 16))


@dataclass(frozen=True)
class _Schema:
    model: type[CommitIntent] | type[CommitDecision]
    writer: Any
    reader: Any
    header: bytes
    fast_reader: Any = None  # hand-written readers and writer of this exact schema, or None
    fast_model: Any = None
    fast_writer: Any = None


class Codec:
    """Encodes current-version events and decodes every released (or registered) schema version.

    The header fingerprint is that of the self-contained schema (named types
    inlined, as in the Avro parsing canonical form), so a change anywhere in an
    event, ``DataFile`` included, changes it. Every schema in
    ``schemas/avro/history`` is registered for reading under the fingerprint its
    release wrote (``schemas.history.wire_fingerprint``).
    """

    def __init__(self, *, history: bool = True) -> None:
        named: dict[str, Any] = {}
        for dependency in ("Operation", "DataFile", "TableMetadata"):
            _load(dependency, named)
        self._named = named
        self._by_model: dict[type, _Schema] = {}
        self._by_fingerprint: dict[bytes, _Schema] = {}
        self.releases: dict[bytes, str] = {}  # fingerprint -> release of every schema from the history
        fast = {
            CommitIntent: (_read_intent, _model_intent, _write_intent),
            CommitDecision: (_read_decision, _model_decision, _write_decision),
        }
        for model in (CommitIntent, CommitDecision):
            parsed = _load(model.__name__, named)
            header = MAGIC + schema_fingerprint(current_schema(model.__name__))
            # reader None: the writer schema is the current one, so fastavro skips resolution
            entry = _Schema(model, parsed, None, header, *fast[model])
            self._by_model[model] = entry
            self._by_fingerprint[entry.header[2:]] = entry
        if history:
            models = {model.__name__: model for model in (CommitIntent, CommitDecision)}
            for event, release, schema in released_schemas():
                fp = self.register_writer_schema(schema, models[event], wire_fingerprint(schema, release))
                self.releases[fp] = release

    def register_writer_schema(
        self,
        schema: dict[str, Any],
        model: type[CommitIntent] | type[CommitDecision],
        fingerprint: bytes | None = None,
    ) -> bytes:
        """Make messages written with an older (or newer) ``schema`` of ``model`` readable.

        ``schema`` may be self-contained or reference ordo's shared named types
        (``io.ordo.v1.DataFile``...), which then mean their current definitions.
        Returns the fingerprint it is registered under: ``fingerprint`` when
        given (a release that computed it otherwise), else the self-contained
        schema's. Avro schema resolution fills fields the writer did not have
        from the reader schema's defaults.
        """
        try:
            parsed = fastavro.parse_schema(schema, named_schemas={})
        except Exception:  # references the shared named types: inline their current definitions
            parsed = fastavro.parse_schema(inline_references(schema), named_schemas={})
        fp = fingerprint if fingerprint is not None else _fingerprint(parsed)
        known = self._by_fingerprint.get(fp)
        if known is not None and known.fast_reader is not None:
            return fp  # the current schema itself: nothing to resolve
        self._by_fingerprint[fp] = _Schema(model, parsed, self._by_model[model].writer, MAGIC + fp)
        return fp

    def header_of(self, model: type[CommitIntent] | type[CommitDecision]) -> bytes:
        """The 10-byte single-object header of the current schema of ``model``."""
        return self._by_model[model].header

    def writer_fields(self, data: bytes) -> frozenset[str]:
        """Names of the top-level fields of the schema ``data`` was written with; ``UnknownSchemaError`` if unknown."""
        entry = self._by_fingerprint.get(bytes(data[2:HEADER_LEN]))
        if entry is None or data[:2] != MAGIC:
            raise UnknownSchemaError(f"unknown schema fingerprint {bytes(data[2:HEADER_LEN]).hex()}")
        return frozenset(field["name"] for field in entry.writer["fields"])

    def is_current(self, data: bytes | None) -> bool:
        """True when ``data`` carries the header of a current schema (not an older or unknown one)."""
        if data is None or len(data) < HEADER_LEN:
            return False
        entry = self._by_fingerprint.get(bytes(data[2:HEADER_LEN]))
        return entry is not None and entry.fast_reader is not None and data[:2] == MAGIC

    def schema_of(self, model: type[CommitIntent] | type[CommitDecision]) -> Any:
        """The parsed current schema of ``model``."""
        return self._by_model[model].writer

    def encode(self, event: Event) -> bytes:
        """Serialize ``event`` with its current schema, single-object encoded."""
        entry = self._by_model.get(type(event))
        if entry is None:
            raise CodecError(f"cannot encode {type(event).__name__}: not an ordo event")
        try:
            return entry.fast_writer(entry.header, event.__dict__)
        except Exception:  # anything unusual: the reference writer gives the answer (or the error)
            pass
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
        if entry.fast_reader is not None:
            raw = data if type(data) is bytes else bytes(data)
            try:
                record, end = entry.fast_reader(raw, HEADER_LEN)
                if end == len(raw):
                    return entry.model, record
            except Exception:  # corrupt, truncated or unusual: the reference reader gives the answer or error
                pass
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
        event = self._fast_model(data)
        if event is not None:
            return event
        model, record = self.decode_dict(data)
        try:
            return model.model_validate(record)
        except ValidationError as exc:
            raise CodecError(f"invalid {model.__name__}: {_summarize(exc)}") from exc

    def read_intent(self, data: bytes | None) -> CommitIntent | None:
        """The valid ``CommitIntent`` in ``data``, or None when the fast path cannot tell.

        The arbiter's hot path. None covers everything unusual (not an intent,
        an older schema, corrupt bytes, a value outside the model's limits):
        ``decode_dict`` + ``CommitIntent.model_validate`` then give the answer,
        and the exact error.
        """
        event = self._fast_model(data)
        return event if type(event) is CommitIntent else None

    def _fast_model(self, data: bytes | None) -> Event | None:
        if type(data) is not bytes or data[:2] != MAGIC:
            return None
        entry = self._by_fingerprint.get(data[2:HEADER_LEN])
        if entry is None or entry.fast_model is None:
            return None
        try:
            event, end = entry.fast_model(data, HEADER_LEN)
        except Exception:  # corrupt, truncated, out of limits or unusual: the reference path decides
            return None
        return event if end == len(data) else None


_MILLISECOND = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _to_record(event: Event) -> dict[str, Any]:
    """The event as the plain dict fastavro writes (the reference writer's input).

    ``("array", ...)`` is fastavro's explicit union notation. The bytes are
    identical to writing ``model_dump()``.
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


# --------------------------------------------------------------------------- fast reader
#
# Each ``_read_*`` takes ``(data, pos)`` and returns ``(value, new pos)``. They
# read the *canonical* encoding only, the one this module's writer and fastavro
# produce: shortest varints, every non-empty array or map in one block with a
# positive count. Anything else (IndexError on truncation, _Bail on a
# non-canonical or out-of-range value) makes the caller fall back to fastavro,
# which reads every valid encoding. Reading canonical bytes only is what makes
# re-using an intent's bytes in its decision exact (``_recent`` below).
#
# ``_read_intent``/``_read_decision`` return records exactly as fastavro does
# (for ``decode_dict``): dicts in schema field order, lists for arrays, dicts
# for maps, enum symbols as strings, timestamp-millis as an aware UTC datetime.


class _Bail(Exception):
    """Internal: the fast path does not handle this input; use the reference path."""


_TWO_64 = 1 << 64


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    n = b & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    if b == 0 or n >= _TWO_64:
        raise _Bail("varint not in its shortest form, or wider than 64 bits")
    return (n >> 1) ^ -(n & 1), pos


def _read_count(data: bytes, pos: int) -> tuple[int, int]:
    """The item count of an array or map's first block (0: empty); a blocked (negative) count bails."""
    b = data[pos]
    if b < 0x80 and not b & 1:
        return b >> 1, pos + 1
    count, pos = _read_long(data, pos)
    if count < 0:
        raise _Bail("array or map with block sizes")
    return count, pos


def _read_end(data: bytes, pos: int) -> int:
    """After the items of a non-empty array or map: the terminating empty block (a second block bails)."""
    if data[pos]:
        raise _Bail("array or map in more than one block")
    return pos + 1


def _read_len(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:
        return b >> 1, pos + 1
    n, pos = _read_long(data, pos)
    if n < 0:
        raise _Bail("negative length")
    return n, pos


def _read_str(data: bytes, pos: int) -> tuple[str, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _read_len(data, pos)
    end = pos + n
    if end > len(data):
        raise _Bail("string runs past the end")
    return data[pos:end].decode(), end


def _read_opt_str(data: bytes, pos: int) -> tuple[str | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:  # zig-zag 1
        raise _Bail("union branch")
    return _read_str(data, pos + 1)


def _read_opt_long(data: bytes, pos: int) -> tuple[int | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise _Bail("union branch")
    return _read_long(data, pos + 1)


def _read_str_map(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    result: dict[str, str] = {}
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            key, pos = _read_str(data, pos)
            result[key], pos = _read_str(data, pos)
        pos = _read_end(data, pos)
    return result, pos


def _read_str_array(data: bytes, pos: int) -> tuple[list[str], int]:
    result: list[str] = []
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            item, pos = _read_str(data, pos)
            result.append(item)
        pos = _read_end(data, pos)
    return result, pos


def _read_map_array(data: bytes, pos: int) -> tuple[list[dict[str, str]], int]:
    result: list[dict[str, str]] = []
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            item, pos = _read_str_map(data, pos)
            result.append(item)
        pos = _read_end(data, pos)
    return result, pos


def _read_data_file(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
    path, pos = _read_str(data, pos)
    partition, pos = _read_str_map(data, pos)
    record_count, pos = _read_long(data, pos)
    size_bytes, pos = _read_long(data, pos)
    min_key, pos = _read_opt_str(data, pos)
    max_key, pos = _read_opt_str(data, pos)
    bucket, pos = _read_long(data, pos)
    if not 0 <= bucket <= MAX_BUCKET:
        raise _Bail("bucket out of range")
    return {
        "path": path,
        "partition": partition,
        "record_count": record_count,
        "size_bytes": size_bytes,
        "min_key": min_key,
        "max_key": max_key,
        "bucket": bucket,
    }, pos


def _read_data_files(data: bytes, pos: int) -> tuple[list[dict[str, Any]], int]:
    result: list[dict[str, Any]] = []
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            item, pos = _read_data_file(data, pos)
            result.append(item)
        pos = _read_end(data, pos)
    return result, pos


def _read_metadata(data: bytes, pos: int) -> tuple[dict[str, Any] | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise _Bail("union branch")
    location, pos = _read_str(data, pos + 1)
    schema, pos = _read_str(data, pos)
    primary_key, pos = _read_str_array(data, pos)
    partition_columns, pos = _read_str_array(data, pos)
    properties, pos = _read_str_map(data, pos)
    return {
        "location": location,
        "schema": schema,
        "primary_key": primary_key,
        "partition_columns": partition_columns,
        "properties": properties,
    }, pos


def _read_member(data: bytes, pos: int, members: tuple[Any, ...]) -> tuple[Any, int]:
    """An enum: its symbol index (one byte for our enums) into ``members``."""
    index = data[pos]
    if index & 1 or (index >> 1) >= len(members):  # negative, multi-byte or out of range
        raise _Bail("enum index")
    return members[index >> 1], pos + 1


def _read_optional(data: bytes, pos: int, reader: Any) -> tuple[Any, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise _Bail("union branch")
    return reader(data, pos + 1)


_OPERATIONS = tuple(op.value for op in Operation)
_OUTCOMES = tuple(o.value for o in Outcome)
_REBASES = tuple(r.value for r in Rebase)


def _read_operation_symbol(data: bytes, pos: int) -> tuple[str, int]:
    return _read_member(data, pos, _OPERATIONS)


def _read_intent(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
    txn_id, pos = _read_str(data, pos)
    table, pos = _read_str(data, pos)
    operation, pos = _read_member(data, pos, _OPERATIONS)
    read_version, pos = _read_long(data, pos)
    partitions, pos = _read_optional(data, pos, _read_map_array)
    added_files, pos = _read_data_files(data, pos)
    removed_files, pos = _read_str_array(data, pos)
    metadata, pos = _read_metadata(data, pos)
    app_id, pos = _read_opt_str(data, pos)
    batch_id, pos = _read_opt_long(data, pos)
    writer, pos = _read_opt_str(data, pos)
    return {
        "txn_id": txn_id,
        "table": table,
        "operation": operation,
        "read_version": read_version,
        "partitions": partitions,
        "added_files": added_files,
        "removed_files": removed_files,
        "metadata": metadata,
        "app_id": app_id,
        "batch_id": batch_id,
        "writer": writer,
    }, pos


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _read_len(data, pos)
    end = pos + size
    if end > len(data):
        raise _Bail("bytes run past the end")
    return data[pos:end], end


def _read_decision(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
    txn_id, pos = _read_str(data, pos)
    table, pos = _read_str(data, pos)
    intent_offset, pos = _read_long(data, pos)
    outcome, pos = _read_member(data, pos, _OUTCOMES)
    id_version, pos = _read_opt_long(data, pos)
    millis, pos = _read_opt_long(data, pos)
    time_version = None if millis is None else _EPOCH + timedelta(microseconds=millis * 1000)
    operation, pos = _read_optional(data, pos, _read_operation_symbol)
    read_version, pos = _read_opt_long(data, pos)
    partitions, pos = _read_optional(data, pos, _read_map_array)
    added_files, pos = _read_data_files(data, pos)
    removed_files, pos = _read_str_array(data, pos)
    metadata, pos = _read_metadata(data, pos)
    rebase, pos = _read_member(data, pos, _REBASES)
    reason, pos = _read_opt_str(data, pos)
    message, pos = _read_opt_str(data, pos)
    conflicting_txn_id, pos = _read_opt_str(data, pos)
    conflicting_version, pos = _read_opt_long(data, pos)
    writer, pos = _read_opt_str(data, pos)
    app_id, pos = _read_opt_str(data, pos)
    batch_id, pos = _read_opt_long(data, pos)
    duplicate_of, pos = _read_opt_long(data, pos)
    prev_hash, pos = _read_optional(data, pos, _read_bytes)
    return {
        "txn_id": txn_id,
        "table": table,
        "intent_offset": intent_offset,
        "outcome": outcome,
        "id_version": id_version,
        "time_version": time_version,
        "operation": operation,
        "read_version": read_version,
        "partitions": partitions,
        "added_files": added_files,
        "removed_files": removed_files,
        "metadata": metadata,
        "rebase": rebase,
        "reason": reason,
        "message": message,
        "conflicting_txn_id": conflicting_txn_id,
        "conflicting_version": conflicting_version,
        "writer": writer,
        "app_id": app_id,
        "batch_id": batch_id,
        "duplicate_of": duplicate_of,
        "prev_hash": prev_hash,
    }, pos


# --------------------------------------------------------------------------- models without pydantic

_object_new = object.__new__
_object_setattr = object.__setattr__


def trusted(model: type[M], values: dict[str, Any]) -> M:
    """Build ``model`` from ``values`` that are already valid, without validation.

    What ``model_construct`` does, minus its per-field loop: ``values`` must
    hold every field, in field order, with the types validation would produce;
    the dict becomes the instance's ``__dict__``. For the arbiter's own
    decisions and for records the fast reader has checked.
    """
    instance = _object_new(model)
    _object_setattr(instance, "__dict__", values)
    _object_setattr(instance, "__pydantic_fields_set__", set(values))
    _object_setattr(instance, "__pydantic_extra__", None)
    _object_setattr(instance, "__pydantic_private__", None)
    return instance


# --------------------------------------------------------------------------- fast reader to models
#
# ``_model_*`` decode straight into models, checking on the way every limit the
# models declare (``schemas.models``). Any value outside a limit bails, and the
# caller takes the reference path (fastavro + ``model_validate``), which
# returns the same model or raises the exact error it always raised.
#
# UTF-8 byte length bounds character length from above, so a string whose
# byte length is within a limit needs no ``len()``.
#
# ``_recent`` keeps the canonical bytes of the last intent's ``added_files``
# and ``partitions`` with the very tuples they were decoded into. The
# arbiter's accepted decision carries those same tuples (same objects), and
# the writer copies the bytes instead of encoding the files again: canonical
# input means they are exactly what encoding would produce. Models are
# frozen; mutating the dicts inside one is not supported anywhere in ordo.

_DATA_FILE_FIELDS = frozenset(DataFile.model_fields)
_OPERATION_MEMBERS = tuple(Operation)
_OUTCOME_MEMBERS = tuple(Outcome)
_REBASE_MEMBERS = tuple(Rebase)
_table_name_ok = TABLE_NAME_PATTERN.fullmatch
_recent: tuple[Any, bytes, Any, bytes] = ((), b"", (), b"")


def _checked_str(data: bytes, pos: int, least: int, most: int) -> tuple[str, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _read_len(data, pos)
    end = pos + n
    value = data[pos:end].decode()
    if n < least or (n > most and len(value) > most) or end > len(data):
        raise _Bail("string length")
    return value, end


def _checked_opt_str(data: bytes, pos: int, least: int, most: int) -> tuple[str | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise _Bail("union branch")
    return _checked_str(data, pos + 1, least, most)


def _checked_map(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    """A partition spec or properties map: keys 1..256 characters, values up to 4096."""
    result: dict[str, str] = {}
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            key, pos = _checked_str(data, pos, 1, MAX_ID_LENGTH)
            result[key], pos = _checked_str(data, pos, 0, MAX_PATH_LENGTH)
        pos = _read_end(data, pos)
    return result, pos


def _checked_version(data: bytes, pos: int) -> tuple[int, int]:
    """A long in 0..MAX_VERSION; one- to three-byte varints (up to 2**20) inline."""
    b = data[pos]
    if b < 0x80:
        if b & 1:
            raise _Bail("negative version")
        return b >> 1, pos + 1
    b1 = data[pos + 1]
    if 0 < b1 < 0x80:
        z = (b & 0x7F) | (b1 << 7)
        if z & 1:
            raise _Bail("negative version")
        return z >> 1, pos + 2
    if b1:
        b2 = data[pos + 2]
        if 0 < b2 < 0x80:
            z = (b & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
            if z & 1:
                raise _Bail("negative version")
            return z >> 1, pos + 3
    value, pos = _read_long(data, pos)
    if not 0 <= value <= MAX_VERSION:
        raise _Bail("version out of range")
    return value, pos


def _model_data_files(data: bytes, pos: int, most: int | None) -> tuple[tuple[DataFile, ...], int]:
    """An array of DataFile records, checked and built into models (the hottest loop of the arbiter).

    The files of one commit mostly share one partition: when a file's partition
    map has the same bytes as the previous file's, its (immutable) strings are
    re-used instead of decoded again.
    """
    count, pos = _read_count(data, pos)
    if not count:
        return (), pos
    if most is not None and count > most:
        raise _Bail("too many files")
    result: list[DataFile] = []
    append = result.append
    fields_set = _DATA_FILE_FIELDS
    same: bytes = b""  # the previous file's one-entry partition map, as bytes
    same_key = same_value = ""
    for _ in range(count):
        # path: 1..4096 characters
        b = data[pos]
        if b < 0x80 and not b & 1:
            n = b >> 1
            pos += 1
        else:
            n, pos = _read_len(data, pos)
        end = pos + n
        path = data[pos:end].decode()
        if not n or (n > MAX_PATH_LENGTH and len(path) > MAX_PATH_LENGTH):
            raise _Bail("path length")
        # partition: keys 1..256 characters, values up to 4096
        if same and data.startswith(same, end):
            partition = {same_key: same_value}
            pos = end + len(same)
        elif data[end] == 2:  # one entry
            same_key, pos = _checked_str(data, end + 1, 1, MAX_ID_LENGTH)
            same_value, pos = _checked_str(data, pos, 0, MAX_PATH_LENGTH)
            pos = _read_end(data, pos)
            partition = {same_key: same_value}
            same = data[end:pos]
        else:
            partition, pos = _checked_map(data, end)
            same = b""
        record_count, pos = _checked_version(data, pos)
        size_bytes, pos = _checked_version(data, pos)
        if data[pos] == 0:
            min_key = None
            pos += 1
        else:
            min_key, pos = _checked_opt_str(data, pos, 0, MAX_PATH_LENGTH)
        if data[pos] == 0:
            max_key = None
            pos += 1
        else:
            max_key, pos = _checked_opt_str(data, pos, 0, MAX_PATH_LENGTH)
        # bucket: 0..MAX_BUCKET, one byte for 0..63
        b = data[pos]
        if b < 0x80 and not b & 1:
            bucket = b >> 1
            pos += 1
        else:
            bucket, pos = _read_long(data, pos)
            if not 0 <= bucket <= MAX_BUCKET:
                raise _Bail("bucket out of range")
        instance = _object_new(DataFile)
        _object_setattr(
            instance,
            "__dict__",
            {
                "path": path,
                "partition": partition,
                "record_count": record_count,
                "size_bytes": size_bytes,
                "min_key": min_key,
                "max_key": max_key,
                "bucket": bucket,
            },
        )
        _object_setattr(instance, "__pydantic_fields_set__", set(fields_set))
        _object_setattr(instance, "__pydantic_extra__", None)
        _object_setattr(instance, "__pydantic_private__", None)
        append(instance)
    return tuple(result), _read_end(data, pos)


def _checked_str_array(data: bytes, pos: int, least: int, most: int, count_most: int) -> tuple[tuple[str, ...], int]:
    count, pos = _read_count(data, pos)
    if not count:
        return (), pos
    if count > count_most:
        raise _Bail("too many items")
    result: list[str] = []
    for _ in range(count):
        item, pos = _checked_str(data, pos, least, most)
        result.append(item)
    return tuple(result), _read_end(data, pos)


def _model_metadata(data: bytes, pos: int) -> tuple[TableMetadata | None, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise _Bail("union branch")
    location, pos = _checked_str(data, pos + 1, 1, MAX_PATH_LENGTH)
    schema, pos = _checked_str(data, pos, 1, 1_000_000)
    primary_key, pos = _checked_str_array(data, pos, 1, MAX_ID_LENGTH, 64)
    partition_columns, pos = _checked_str_array(data, pos, 1, MAX_ID_LENGTH, 64)
    properties, pos = _checked_map(data, pos)
    if not primary_key:
        raise _Bail("empty primary key")
    values = {
        "location": location,
        "schema": schema,
        "primary_key": primary_key,
        "partition_columns": partition_columns,
        "properties": properties,
    }
    return trusted(TableMetadata, values), pos


def _model_intent(data: bytes, pos: int) -> tuple[CommitIntent, int]:
    global _recent
    txn_id, pos = _checked_str(data, pos, 1, MAX_ID_LENGTH)
    table, pos = _read_str(data, pos)
    if _table_name_ok(table) is None:
        raise _Bail("table name")
    operation, pos = _read_member(data, pos, _OPERATION_MEMBERS)
    read_version, pos = _checked_version(data, pos)
    partitions_at = pos
    branch = data[pos]
    if branch == 0:
        partitions = None
        pos += 1
    elif branch == 2:
        count, pos = _read_count(data, pos + 1)
        if count > MAX_PARTITIONS_PER_INTENT:
            raise _Bail("too many partitions")
        specs: list[dict[str, str]] = []
        for _ in range(count):
            spec, pos = _checked_map(data, pos)
            specs.append(spec)
        if count:
            pos = _read_end(data, pos)
        partitions = tuple(specs)
    else:
        raise _Bail("union branch")
    files_at = pos
    added_files, pos = _model_data_files(data, pos, MAX_FILES_PER_INTENT)
    files_end = pos
    removed_files, pos = _checked_str_array(data, pos, 1, MAX_PATH_LENGTH, MAX_FILES_PER_INTENT)
    metadata, pos = _model_metadata(data, pos)
    app_id, pos = _checked_opt_str(data, pos, 1, MAX_ID_LENGTH)
    branch = data[pos]
    if branch == 0:
        batch_id = None
        pos += 1
    elif branch == 2:
        batch_id, pos = _checked_version(data, pos + 1)
    else:
        raise _Bail("union branch")
    writer, pos = _checked_opt_str(data, pos, 0, MAX_ID_LENGTH)
    values = {
        "txn_id": txn_id,
        "table": table,
        "operation": operation,
        "read_version": read_version,
        "partitions": partitions,
        "added_files": added_files,
        "removed_files": removed_files,
        "metadata": metadata,
        "app_id": app_id,
        "batch_id": batch_id,
        "writer": writer,
    }
    if pos == len(data):
        _recent = (added_files, data[files_at:files_end], partitions, data[partitions_at:files_at])
    return trusted(CommitIntent, values), pos


def _model_decision(data: bytes, pos: int) -> tuple[CommitDecision, int]:
    txn_id, pos = _read_str(data, pos)
    table, pos = _read_str(data, pos)
    intent_offset, pos = _read_long(data, pos)
    outcome, pos = _read_member(data, pos, _OUTCOME_MEMBERS)
    id_version, pos = _read_opt_long(data, pos)
    millis, pos = _read_opt_long(data, pos)
    time_version = None if millis is None else _EPOCH + timedelta(microseconds=millis * 1000)
    operation, pos = _read_optional(data, pos, _read_operation_member)
    read_version, pos = _read_opt_long(data, pos)
    partitions, pos = _read_optional(data, pos, _read_map_tuple)
    added_files, pos = _model_data_files(data, pos, None)
    removed, pos = _read_str_array(data, pos)
    metadata, pos = _model_metadata(data, pos)
    rebase, pos = _read_member(data, pos, _REBASE_MEMBERS)
    reason, pos = _read_opt_str(data, pos)
    message, pos = _read_opt_str(data, pos)
    conflicting_txn_id, pos = _read_opt_str(data, pos)
    conflicting_version, pos = _read_opt_long(data, pos)
    writer, pos = _read_opt_str(data, pos)
    app_id, pos = _read_opt_str(data, pos)
    batch_id, pos = _read_opt_long(data, pos)
    duplicate_of, pos = _read_opt_long(data, pos)
    prev_hash, pos = _read_optional(data, pos, _read_bytes)
    values = {
        "txn_id": txn_id,
        "table": table,
        "intent_offset": intent_offset,
        "outcome": outcome,
        "id_version": id_version,
        "time_version": time_version,
        "operation": operation,
        "read_version": read_version,
        "partitions": partitions,
        "added_files": added_files,
        "removed_files": tuple(removed),
        "metadata": metadata,
        "rebase": rebase,
        "reason": reason,
        "message": message,
        "conflicting_txn_id": conflicting_txn_id,
        "conflicting_version": conflicting_version,
        "writer": writer,
        "app_id": app_id,
        "batch_id": batch_id,
        "duplicate_of": duplicate_of,
        "prev_hash": prev_hash,
    }
    return trusted(CommitDecision, values), pos


def _read_operation_member(data: bytes, pos: int) -> tuple[Operation, int]:
    return _read_member(data, pos, _OPERATION_MEMBERS)


def _read_map_tuple(data: bytes, pos: int) -> tuple[tuple[dict[str, str], ...], int]:
    specs, pos = _read_map_array(data, pos)
    return tuple(specs), pos


# --------------------------------------------------------------------------- fast writer
#
# ``_write_*`` append byte strings to a list that is joined once. They bail on
# any value whose type is not the exact one the schema maps (``encode`` then
# uses fastavro, which either writes it or raises what it always raised), and
# on longs outside the signed 64-bit range.

_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1


def _varint(n: int) -> bytes:
    """Zig-zag varint of a signed 64-bit ``n``."""
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise _Bail("long out of range")
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        return bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7))
    if z < 0x200000:
        return bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80, z >> 14))
    out = []
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = tuple(_varint(n) for n in range(8192))  # varints of 0..8191 (lengths, counts, small longs)
_NULL = b"\x00"
_SOME = b"\x02"  # union branch 1


def _long_bytes(n: Any) -> bytes:
    if type(n) is not int:
        raise _Bail("not an int")
    if 0 <= n < 8192:
        return _SMALL[n]
    return _varint(n)


def _write_str(out: list[bytes], s: Any) -> None:
    if type(s) is not str:
        raise _Bail("not a str")
    b = s.encode()
    n = len(b)
    out.append(_SMALL[n] if n < 8192 else _varint(n))
    out.append(b)


def _write_opt_str(out: list[bytes], s: Any) -> None:
    if s is None:
        out.append(_NULL)
    else:
        out.append(_SOME)
        _write_str(out, s)


def _write_opt_long(out: list[bytes], n: Any) -> None:
    if n is None:
        out.append(_NULL)
    else:
        out.append(_SOME)
        out.append(_long_bytes(n))


def _write_str_map(out: list[bytes], mapping: Any) -> None:
    if type(mapping) is not dict:
        raise _Bail("not a dict")
    if mapping:
        out.append(_long_bytes(len(mapping)))
        for key, value in mapping.items():
            _write_str(out, key)
            _write_str(out, value)
    out.append(_NULL)


def _write_str_array(out: list[bytes], items: Any) -> None:
    if type(items) is not tuple and type(items) is not list:
        raise _Bail("not a sequence")
    if items:
        out.append(_long_bytes(len(items)))
        for item in items:
            _write_str(out, item)
    out.append(_NULL)


def _write_partitions(out: list[bytes], partitions: Any) -> None:
    if partitions is None:
        out.append(_NULL)
        return
    recent = _recent
    if partitions is recent[2] and partitions:
        out.append(recent[3])
        return
    if type(partitions) is not tuple and type(partitions) is not list:
        raise _Bail("not a sequence")
    out.append(_SOME)
    if partitions:
        out.append(_long_bytes(len(partitions)))
        for spec in partitions:
            _write_str_map(out, spec)
    out.append(_NULL)


def _write_data_files(out: list[bytes], files: Any) -> None:
    recent = _recent
    if files is recent[0] and files:
        out.append(recent[1])
        return
    if type(files) is not tuple and type(files) is not list:
        raise _Bail("not a sequence")
    if files:
        out.append(_long_bytes(len(files)))
        for data_file in files:
            if type(data_file) is not DataFile:
                raise _Bail("not a DataFile")
            values = data_file.__dict__
            _write_str(out, values["path"])
            _write_str_map(out, values["partition"])
            out.append(_long_bytes(values["record_count"]))
            out.append(_long_bytes(values["size_bytes"]))
            _write_opt_str(out, values["min_key"])
            _write_opt_str(out, values["max_key"])
            bucket = values["bucket"]
            if type(bucket) is not int or not 0 <= bucket <= MAX_BUCKET:
                raise _Bail("bucket")
            out.append(_SMALL[bucket] if bucket < 8192 else _varint(bucket))
    out.append(_NULL)


def _write_metadata(out: list[bytes], metadata: Any) -> None:
    if metadata is None:
        out.append(_NULL)
        return
    if type(metadata) is not TableMetadata:
        raise _Bail("not a TableMetadata")
    values = metadata.__dict__
    out.append(_SOME)
    _write_str(out, values["location"])
    _write_str(out, values["schema"])
    _write_str_array(out, values["primary_key"])
    _write_str_array(out, values["partition_columns"])
    _write_str_map(out, values["properties"])


_OPERATION_INDEX = {op: _SMALL[i] for i, op in enumerate(Operation)}
_OUTCOME_INDEX = {o: _SMALL[i] for i, o in enumerate(Outcome)}
_REBASE_INDEX = {r: _SMALL[i] for i, r in enumerate(Rebase)}


def _write_intent(header: bytes, values: dict[str, Any]) -> bytes:
    out = [header]
    _write_str(out, values["txn_id"])
    _write_str(out, values["table"])
    out.append(_OPERATION_INDEX[values["operation"]])
    out.append(_long_bytes(values["read_version"]))
    _write_partitions(out, values["partitions"])
    _write_data_files(out, values["added_files"])
    _write_str_array(out, values["removed_files"])
    _write_metadata(out, values["metadata"])
    _write_opt_str(out, values["app_id"])
    _write_opt_long(out, values["batch_id"])
    _write_opt_str(out, values["writer"])
    return b"".join(out)


def _write_decision(header: bytes, values: dict[str, Any]) -> bytes:
    out = [header]
    _write_str(out, values["txn_id"])
    _write_str(out, values["table"])
    out.append(_long_bytes(values["intent_offset"]))
    out.append(_OUTCOME_INDEX[values["outcome"]])
    _write_opt_long(out, values["id_version"])
    time_version = values["time_version"]
    if time_version is None:
        out.append(_NULL)
    else:
        if type(time_version) is not datetime:
            raise _Bail("not a datetime")
        if time_version.tzinfo is None:
            time_version = time_version.replace(tzinfo=UTC)
        out.append(_SOME)
        out.append(_long_bytes((time_version - _EPOCH) // _MILLISECOND))
    operation = values["operation"]
    if operation is None:
        out.append(_NULL)
    else:
        out.append(_SOME)
        out.append(_OPERATION_INDEX[operation])
    _write_opt_long(out, values["read_version"])
    _write_partitions(out, values["partitions"])
    _write_data_files(out, values["added_files"])
    _write_str_array(out, values["removed_files"])
    _write_metadata(out, values["metadata"])
    out.append(_REBASE_INDEX[values["rebase"]])
    _write_opt_str(out, values["reason"])
    _write_opt_str(out, values["message"])
    _write_opt_str(out, values["conflicting_txn_id"])
    _write_opt_long(out, values["conflicting_version"])
    _write_opt_str(out, values["writer"])
    _write_opt_str(out, values["app_id"])
    _write_opt_long(out, values["batch_id"])
    _write_opt_long(out, values["duplicate_of"])
    prev_hash = values["prev_hash"]
    if prev_hash is None:
        out.append(_NULL)
    else:
        if type(prev_hash) is not bytes:
            raise _Bail("not bytes")
        out.append(_SOME)
        out.append(_long_bytes(len(prev_hash)))
        out.append(prev_hash)
    return b"".join(out)


DEFAULT_CODEC = Codec()


def encode(event: Event) -> bytes:
    """Serialize an intent or decision (the wire contract: docs/upgrading.md)."""
    return DEFAULT_CODEC.encode(event)


def decode(data: bytes) -> Event:
    """Deserialize bytes into a ``CommitIntent`` or ``CommitDecision``; ``CodecError`` otherwise."""
    return DEFAULT_CODEC.decode(data)


def chain_hash(encoded_decision: bytes) -> bytes:
    """SHA-256 of a decision record's bytes: the link stored in the next decision's ``prev_hash``."""
    return hashlib.sha256(encoded_decision).digest()
