"""Avro codec for ordo events, in Avro single-object encoding.

Every message is ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of its writer
schema's canonical form + the schemaless Avro body. The fingerprint's bytes are
big-endian: fastavro gives the little-endian bytes as hex, read back here as a
number and packed little-endian again (since 0.1, so for good; the Avro
specification stores it little-endian: docs/log-format.md). The fingerprint
says which event it is and which schema version wrote it, so a reader can
resolve an older writer schema against the current reader schema.

Two implementations of one wire format:

* **Fast path** (the arbiter decodes one intent and encodes one decision per
  record; the consumer and rebuilds decode every decision): a reader and a
  writer for the current schemas, both generated from one field table per
  record type (each field with its ``Kind``, which reads and writes its Avro
  type, and the model's limits). The reader builds the models directly,
  checking on the way every limit the models declare, without pydantic
  validation. An intent's files and partitions keep their bytes
  (``WireTuple``), which the writer of its decision copies. Avro binary is
  simple: zig-zag varints, length-prefixed UTF-8, a varint union branch index,
  an enum symbol index, block-encoded arrays and maps.
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import BaseModel, ValidationError

from ordo.schemas.errors import CodecError, UnknownSchemaError
from ordo.schemas.history import (
    AVRO_DIR,
    current_schema,
    inline_references,
    released_schemas,
    schema_fingerprint,
    wire_fingerprint,
)
from ordo.schemas.models import (
    MAX_BUCKET,
    MAX_FILES_PER_INTENT,
    MAX_ID_LENGTH,
    MAX_METRICS,
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
    datetime_to_millis,
    millis_to_datetime,
)
from ordo.schemas.topics import TABLE_NAME_PATTERN

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
    fast_model: Any = None  # the table-driven reader and the writer of this exact schema, or None
    fast_writer: Any = None


class Codec:
    """Encodes current-version events and decodes every released (or registered) schema version.

    The header fingerprint is that of the self-contained schema (named types
    inlined, as in the Avro parsing canonical form), so a change anywhere in an
    event, ``DataFile`` included, changes it. Every schema in
    ``ordo/schemas/avro/history`` is registered for reading under the fingerprint its
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
            model: (_record_reader(model, RECORD_FIELDS[model]), _event_writer(model, RECORD_FIELDS[model]))
            for model in (CommitIntent, CommitDecision)
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
        if known is not None and known.fast_model is not None:
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
        return entry is not None and entry.fast_model is not None and data[:2] == MAGIC

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
        """Read ``data`` into ``(model, plain dict)`` without pydantic validation.

        The reference reader (fastavro) only: the arbiter asks for it when the
        fast path could not take an intent (unusual or invalid input), so that
        ``model_validate`` can then name the exact problem.
        """
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
        record["time_version"] = datetime_to_millis(time_version)
    return record


def _summarize(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "<root>"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


# --------------------------------------------------------------------------- fast reader and writer
#
# Each field reader takes ``(data, pos)`` (and the constant arguments of its
# row in a field table, below) and returns ``(value, new pos)``, the
# value already of the type validation would produce (tuples, enum members,
# models), checked on the way against every limit the models declare
# (``schemas.models``). They read the *canonical* encoding only, the one this
# module's writer and fastavro produce: shortest varints, every non-empty array
# or map in one block with a positive count. Anything else (IndexError on
# truncation, _Bail on a non-canonical or out-of-range value) makes the caller
# take the reference path (fastavro + ``model_validate``), which returns the
# same model or raises the exact error it always raised.
#
# UTF-8 byte length bounds character length from above, so a string whose
# byte length is within a limit needs no ``len()``.


class _Bail(Exception):
    """Internal: the fast path does not handle this input; use the reference path."""


Reader = Callable[[bytes, int], tuple[Any, int]]

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
    """A size: the length of a string or bytes, or the item count of an array or map's first block (0: empty).

    Negative bails (a blocked array or map, or a corrupt length).
    """
    b = data[pos]
    if b < 0x80 and not b & 1:
        return b >> 1, pos + 1
    count, pos = _read_long(data, pos)
    if count < 0:
        raise _Bail("negative size (an array or map with block sizes, or a corrupt length)")
    return count, pos


def _read_end(data: bytes, pos: int) -> int:
    """After the items of a non-empty array or map: the terminating empty block (a second block bails)."""
    if data[pos]:
        raise _Bail("array or map in more than one block")
    return pos + 1


def _read_str(data: bytes, pos: int) -> tuple[str, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _read_count(data, pos)
    end = pos + n
    if end > len(data):
        raise _Bail("string runs past the end")
    return data[pos:end].decode(), end


def _read_millis(data: bytes, pos: int) -> tuple[datetime, int]:
    """A ``timestamp-millis`` as an aware UTC datetime (as fastavro reads it)."""
    millis, pos = _read_long(data, pos)
    return millis_to_datetime(millis), pos


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _read_count(data, pos)
    end = pos + size
    if end > len(data):
        raise _Bail("bytes run past the end")
    return data[pos:end], end


def _read_str_map(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    result: dict[str, str] = {}
    count, pos = _read_count(data, pos)
    if count:
        for _ in range(count):
            key, pos = _read_str(data, pos)
            result[key], pos = _read_str(data, pos)
        pos = _read_end(data, pos)
    return result, pos


def _checked_str(data: bytes, pos: int, least: int, most: int) -> tuple[str, int]:
    b = data[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _read_count(data, pos)
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


def _checked_long_map(data: bytes, pos: int, least: int, most: int, count_most: int) -> tuple[dict[str, int], int]:
    """A map of long (operation metrics): keys ``least``..``most`` characters, at most ``count_most`` entries."""
    result: dict[str, int] = {}
    count, pos = _read_count(data, pos)
    if count:
        if count > count_most:
            raise _Bail("too many entries")
        for _ in range(count):
            key, pos = _checked_str(data, pos, least, most)
            result[key], pos = _read_long(data, pos)
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


def _checked_bucket(data: bytes, pos: int) -> tuple[int, int]:
    bucket, pos = _read_long(data, pos)
    if not 0 <= bucket <= MAX_BUCKET:
        raise _Bail("bucket out of range")
    return bucket, pos


def _checked_str_tuple(data: bytes, pos: int, least: int, most: int, count_most: int) -> tuple[tuple[str, ...], int]:
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


def _key_tuple(data: bytes, pos: int, least: int, most: int, count_most: int) -> tuple[tuple[str, ...], int]:
    """As ``_checked_str_tuple``, at least one item (a primary key)."""
    result, pos = _checked_str_tuple(data, pos, least, most, count_most)
    if not result:
        raise _Bail("empty primary key")
    return result, pos


class WireTuple(tuple):  # type: ignore[type-arg]
    """A tuple decoded from canonical Avro bytes that keeps them in ``wire``.

    An intent's ``added_files`` and ``partitions`` come as ``WireTuple``; the
    arbiter's accepted decision carries the very same objects, and the writer
    copies ``wire`` instead of encoding the items again. Exact because the
    reader takes canonical bytes only, and because the items are immutable
    (frozen models; the partition dicts are never mutated anywhere in ordo).
    Any other tuple or list is encoded item by item.
    """

    wire: bytes


def _wire_tuple(items: list[Any], wire: bytes) -> WireTuple:
    result = WireTuple(items)
    result.wire = wire
    return result


# The shape of a DataFile instance built without validation (``trusted``, inlined in the hottest loop).
_object_new = object.__new__
_object_setattr = object.__setattr__
_DATA_FILE_NAMES = frozenset(DataFile.model_fields)


def _data_files(item: Kind, most: int | None, keep_wire: bool) -> Kind:
    """An array of DataFile records (``item``); its reader is the hottest loop of the arbiter, checked and inlined.

    The reader is ``item``'s generated one unrolled by hand (``tests/unit/
    test_codec_fast.py`` checks that they agree); the writer is ``item``'s.

    ``most``: the largest count taken (an intent's limit; None for decisions).
    ``keep_wire``: return a ``WireTuple`` holding the array's bytes. The files
    of one commit mostly share one partition: when a file's partition map has
    the same bytes as the previous file's, its (immutable) strings are re-used
    instead of decoded again.
    """

    def read(data: bytes, pos: int) -> tuple[tuple[DataFile, ...], int]:
        start = pos
        count, pos = _read_count(data, pos)
        if not count:
            return (), pos
        if most is not None and count > most:
            raise _Bail("too many files")
        result: list[DataFile] = []
        append = result.append
        fields_set = _DATA_FILE_NAMES
        same: bytes = b""  # the previous file's one-entry partition map, as bytes
        same_key = same_value = ""
        for _ in range(count):
            # path: 1..4096 characters
            b = data[pos]
            if b < 0x80 and not b & 1:
                n = b >> 1
                pos += 1
            else:
                n, pos = _read_count(data, pos)
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
        pos = _read_end(data, pos)
        return (_wire_tuple(result, data[start:pos]) if keep_wire else tuple(result)), pos

    return _array(item, read)


def _partition_specs(most: int, spec: Kind, keep_wire: bool) -> Kind:
    """The array of partition specs (maps, ``spec``): a tuple, a ``WireTuple`` with ``keep_wire``."""
    read_map = spec.read

    def read(data: bytes, pos: int) -> tuple[tuple[dict[str, str], ...], int]:
        start = pos
        count, pos = _read_count(data, pos)
        if count > most:
            raise _Bail("too many partitions")
        specs: list[dict[str, str]] = []
        for _ in range(count):
            spec, pos = read_map(data, pos)
            specs.append(spec)
        if count:
            pos = _read_end(data, pos)
        return (_wire_tuple(specs, data[start:pos]) if keep_wire and count else tuple(specs)), pos

    return _array(spec, read)


def _table_name(data: bytes, pos: int) -> tuple[str, int]:
    table, pos = _read_str(data, pos)
    if _table_name_ok(table) is None:
        raise _Bail("table name")
    return table, pos


_table_name_ok = TABLE_NAME_PATTERN.fullmatch


# --------------------------------------------------------------------------- models without validation


def trusted(model: type[M], values: dict[str, Any]) -> M:
    """Build ``model`` from ``values`` that are already valid, without validation.

    What pydantic's public ``model_construct`` does, minus its per-field loop
    over defaults and aliases: ``values`` must hold every field, in field order,
    with the types validation would produce; the dict becomes the instance's
    ``__dict__``, and the three attributes ``model_construct`` sets are set.
    For the arbiter's own decisions and for records the fast reader has
    checked. Why not ``model_construct`` itself: on a DataFile it costs 2.07 us
    against 0.48 us here (more than ``model_validate``, 1.32 us), and the hot
    path builds one model per intent, one per decision and one per data file:
    about 8 us more of a ~45 us decision with 4 files. ``tests/unit/
    test_codec_fast.py`` checks that both build equal models.
    """
    instance = _object_new(model)
    _object_setattr(instance, "__dict__", values)
    _object_setattr(instance, "__pydantic_fields_set__", set(values))
    _object_setattr(instance, "__pydantic_extra__", None)
    _object_setattr(instance, "__pydantic_private__", None)
    return instance


# --------------------------------------------------------------------------- writers of the Avro types
#
# The writing half of the kinds below (``Kind.write``): each appends the
# canonical bytes of one value to ``out``.

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


def _write_str_map(out: list[bytes], mapping: Any) -> None:
    if type(mapping) is not dict:
        raise _Bail("not a dict")
    if mapping:
        out.append(_long_bytes(len(mapping)))
        for key, value in mapping.items():
            _write_str(out, key)
            _write_str(out, value)
    out.append(_NULL)


def _write_long_map(out: list[bytes], mapping: Any) -> None:
    if type(mapping) is not dict:
        raise _Bail("not a dict")
    if mapping:
        out.append(_long_bytes(len(mapping)))
        for key, value in mapping.items():
            _write_str(out, key)
            out.append(_long_bytes(value))
    out.append(_NULL)


# --------------------------------------------------------------------------- field tables
#
# A field table lists every field of a record type, in schema order, each with
# its ``Kind``: the Avro type as the fast path reads *and* writes it, and the
# constant arguments of its reader (the model's limits). ``_record_reader`` and
# ``_record_writer`` fold one table into the record's reader and writer, so a
# field is declared once, in one row. A unit test checks each table against
# the model's fields and the ``.avsc`` fields, so a schema change cannot skip it.
#
# Writers append byte strings to a list that is joined once. They bail on any
# value whose type is not the exact one the schema maps (``encode`` then uses
# fastavro, which either writes it or raises what it always raised), and on
# longs outside the signed 64-bit range. They check no model limit: a model
# holds valid values, and the reference writer checks none either.

Writer = Callable[[list[bytes], Any], None]


@dataclass(frozen=True)
class Kind:
    """One Avro type of a field table: how the fast path reads it and writes it.

    ``read(data, pos, *constants)`` returns ``(value, new pos)``;
    ``write(out, value)`` appends the value's canonical bytes to ``out``. The
    generated writers inline two shapes: ``to_bytes``, a value written in one
    piece (a long: a function; an enum symbol: a dict), and ``some``, the kind
    of ``T`` in a ``["null", T]`` union (the generated reader and writer take
    the branch inline and call ``some``'s own).
    """

    read: Callable[..., tuple[Any, int]]
    write: Writer
    to_bytes: Callable[[Any], bytes] | dict[Any, bytes] | None = None
    some: Kind | None = None


def _scalar(read: Callable[..., tuple[Any, int]], to_bytes: Callable[[Any], bytes] | dict[Any, bytes]) -> Kind:
    """A kind written in one piece: ``to_bytes(value)`` (or ``to_bytes[value]`` for a dict)."""
    if isinstance(to_bytes, dict):
        index = to_bytes

        def write(out: list[bytes], value: Any) -> None:
            out.append(index[value])

    else:
        function = to_bytes

        def write(out: list[bytes], value: Any) -> None:
            out.append(function(value))

    return Kind(read, write, to_bytes)


def _optional(kind: Kind) -> Kind:
    """A ``["null", T]`` union of ``kind`` (in a field table, the generated reader and writer take the branch inline)."""
    write_some = kind.write

    def write(out: list[bytes], value: Any) -> None:
        if value is None:
            out.append(_NULL)
        else:
            out.append(_SOME)
            write_some(out, value)

    return Kind(_optional_reader(kind.read), write, some=kind)


def _optional_reader(reader: Callable[..., tuple[Any, int]]) -> Callable[..., tuple[Any, int]]:
    def read(data: bytes, pos: int, *constants: Any) -> tuple[Any, int]:
        branch = data[pos]
        if branch == 0:
            return None, pos + 1
        if branch != 2:
            raise _Bail("union branch")
        return reader(data, pos + 1, *constants)

    return read


def _array(item: Kind, read: Callable[..., tuple[Any, int]]) -> Kind:
    """An array of ``item``: written item by item in one block, or copied from a ``WireTuple`` that holds its bytes."""
    write_item = item.write

    def write(out: list[bytes], items: Any) -> None:
        if type(items) is WireTuple:
            out.append(items.wire)
            return
        if type(items) is not tuple and type(items) is not list:
            raise _Bail("not a sequence")
        if items:
            out.append(_long_bytes(len(items)))
            for value in items:
                write_item(out, value)
        out.append(_NULL)

    return Kind(read, write)


def _enum(members: tuple[Any, ...]) -> Kind:
    """An enum: its symbol index (one byte for our enums) into ``members``."""

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        index = data[pos]
        if index & 1 or (index >> 1) >= len(members):  # negative, multi-byte or out of range
            raise _Bail("enum index")
        return members[index >> 1], pos + 1

    return _scalar(read, {member: _SMALL[i] for i, member in enumerate(members)})


def _record(model: type[BaseModel], fields: tuple[Field, ...], read: Reader | None = None) -> Kind:
    """A nested record, read and written by the code generated from its field table (``read``: a faster reader)."""
    return Kind(read or _record_reader(model, fields), _record_writer(model, fields))


# (field, kind, constant arguments of its reader after ``(data, pos)``)
Field = tuple[Any, ...]


def _record_reader(model: type[M], fields: tuple[Field, ...]) -> Callable[[bytes, int], tuple[M, int]]:
    """The reader of one record type, generated from its field table.

    Generated as straight-line code, one line per field, as ``dataclasses``
    generates ``__init__``: the same table read in a loop costs about 10% of
    the arbiter's pure path in loop overhead alone.
    """
    names = _check_names(model, fields)
    scope: dict[str, Any] = {"trusted": trusted, "model": model, "Bail": _Bail}
    lines = ["def read(data, pos):"]
    for i, (_, kind, *constants) in enumerate(fields):
        arguments = "".join(f", {constant!r}" for constant in constants)
        if kind.some is None:
            scope[f"read_{i}"] = kind.read
            lines.append(f"    value_{i}, pos = read_{i}(data, pos{arguments})")
            continue
        scope[f"read_{i}"] = kind.some.read  # a union: its branch inline, then the kind of its branch 1
        lines += ["    branch = data[pos]", "    if branch == 0:", f"        value_{i} = None", "        pos += 1"]
        lines += ["    elif branch == 2:", f"        value_{i}, pos = read_{i}(data, pos + 1{arguments})", "    else:"]
        lines.append("        raise Bail('union branch')")
    values = ", ".join(f"{name!r}: value_{i}" for i, name in enumerate(names))
    lines.append(f"    return trusted(model, {{{values}}}), pos")
    read: Callable[[bytes, int], tuple[M, int]] = _compile(lines, scope)["read"]
    return read


def _record_writer(model: type[BaseModel], fields: tuple[Field, ...]) -> Writer:
    """The writer of a nested record (``write(out, instance)``), generated from its field table."""
    _check_names(model, fields)
    scope: dict[str, Any] = {"model": model, "Bail": _Bail}
    lines = [
        "def write(out, record):",
        "    if type(record) is not model:",
        "        raise Bail('not a ' + model.__name__)",
        "    values = record.__dict__",
        "    append = out.append",
        *_write_lines(fields, scope),
    ]
    write: Writer = _compile(lines, scope)["write"]
    return write


def _event_writer(model: type[BaseModel], fields: tuple[Field, ...]) -> Callable[[bytes, dict[str, Any]], bytes]:
    """The writer of an event (``write(header, instance.__dict__)`` -> the message), generated from its field table."""
    _check_names(model, fields)
    scope: dict[str, Any] = {}
    lines = [
        "def write(header, values):",
        "    out = [header]",
        "    append = out.append",
        *_write_lines(fields, scope),
        "    return b''.join(out)",
    ]
    write: Callable[[bytes, dict[str, Any]], bytes] = _compile(lines, scope)["write"]
    return write


def _write_lines(fields: tuple[Field, ...], scope: dict[str, Any]) -> list[str]:
    """Straight-line code writing ``values[name]`` of each field in turn (unions and one-piece values inline)."""
    scope.update(NULL=_NULL, SOME=_SOME)
    lines = []
    for i, (name, kind, *_) in enumerate(fields):
        value = f"values[{name!r}]"
        if kind.some is None:
            lines.append(f"    {_write_line(kind, i, value, scope)}")
        else:
            lines += [f"    value = {value}", "    if value is None:", "        append(NULL)", "    else:"]
            lines += ["        append(SOME)", f"        {_write_line(kind.some, i, 'value', scope)}"]
    return lines


def _write_line(kind: Kind, i: int, value: str, scope: dict[str, Any]) -> str:
    if kind.to_bytes is None:
        scope[f"write_{i}"] = kind.write
        return f"write_{i}(out, {value})"
    scope[f"bytes_{i}"] = kind.to_bytes
    return f"append(bytes_{i}[{value}])" if isinstance(kind.to_bytes, dict) else f"append(bytes_{i}({value}))"


def _check_names(model: type[BaseModel], fields: tuple[Field, ...]) -> list[str]:
    names = [field[0] for field in fields]
    if names != list(model.model_fields):
        raise TypeError(f"the field table of {model.__name__} is not its fields in order: {names}")
    return names


def _compile(lines: list[str], scope: dict[str, Any]) -> dict[str, Any]:
    exec("\n".join(lines), scope)
    return scope


def _write_bytes(out: list[bytes], value: Any) -> None:
    if type(value) is not bytes:
        raise _Bail("not bytes")
    out.append(_long_bytes(len(value)))
    out.append(value)


def _millis_bytes(value: Any) -> bytes:
    if type(value) is not datetime:
        raise _Bail("not a datetime")
    return _long_bytes(datetime_to_millis(value))


_LONG = _scalar(_read_long, _long_bytes)
_OPT_LONG = _optional(_LONG)
_VERSION = _scalar(_checked_version, _long_bytes)  # a long in 0..MAX_VERSION
_BUCKET = _scalar(_checked_bucket, _long_bytes)
_OPT_MILLIS = _optional(_scalar(_read_millis, _millis_bytes))  # timestamp-millis as an aware UTC datetime
_STR = Kind(_read_str, _write_str)
_OPT_STR = _optional(_STR)
_CHECKED_STR = Kind(_checked_str, _write_str)  # (least, most) characters
_CHECKED_OPT_STR = _optional(_CHECKED_STR)
_TABLE_NAME = Kind(_table_name, _write_str)
_BYTES = Kind(_read_bytes, _write_bytes)
_STR_MAP = Kind(_read_str_map, _write_str_map)
_CHECKED_MAP = Kind(_checked_map, _write_str_map)  # a partition spec or properties map
_LONG_MAP = Kind(_checked_long_map, _write_long_map)  # (least, most) characters a key, at most count_most entries
_STR_TUPLE = _array(_STR, _checked_str_tuple)  # (least, most) characters, at most count_most items
_KEY_TUPLE = _array(_STR, _key_tuple)  # as _STR_TUPLE, at least one item
_OPERATION = _enum(tuple(Operation))

_NO_LIMIT = 1 << 62  # a length or count no record reaches (the decision model sets none)

_DATA_FILE_FIELDS: tuple[Field, ...] = (
    ("path", _CHECKED_STR, 1, MAX_PATH_LENGTH),
    ("partition", _CHECKED_MAP),
    ("record_count", _VERSION),
    ("size_bytes", _VERSION),
    ("min_key", _CHECKED_OPT_STR, 0, MAX_PATH_LENGTH),
    ("max_key", _CHECKED_OPT_STR, 0, MAX_PATH_LENGTH),
    ("bucket", _BUCKET),
)

_METADATA_FIELDS: tuple[Field, ...] = (
    ("location", _CHECKED_STR, 1, MAX_PATH_LENGTH),
    ("schema", _CHECKED_STR, 1, 1_000_000),
    ("primary_key", _KEY_TUPLE, 1, MAX_ID_LENGTH, 64),
    ("partition_columns", _STR_TUPLE, 1, MAX_ID_LENGTH, 64),
    ("properties", _CHECKED_MAP),
)

_DATA_FILE = _record(DataFile, _DATA_FILE_FIELDS)
_METADATA = _optional(_record(TableMetadata, _METADATA_FIELDS))

_INTENT_FIELDS: tuple[Field, ...] = (
    ("txn_id", _CHECKED_STR, 1, MAX_ID_LENGTH),
    ("table", _TABLE_NAME),
    ("operation", _OPERATION),
    ("read_version", _VERSION),
    ("partitions", _optional(_partition_specs(MAX_PARTITIONS_PER_INTENT, _CHECKED_MAP, keep_wire=True))),
    ("added_files", _data_files(_DATA_FILE, MAX_FILES_PER_INTENT, keep_wire=True)),
    ("removed_files", _STR_TUPLE, 1, MAX_PATH_LENGTH, MAX_FILES_PER_INTENT),
    ("metadata", _METADATA),
    ("app_id", _CHECKED_OPT_STR, 1, MAX_ID_LENGTH),
    ("batch_id", _optional(_VERSION)),
    ("writer", _CHECKED_OPT_STR, 0, MAX_ID_LENGTH),
    ("restore_version", _optional(_VERSION)),
    ("operation_metrics", _LONG_MAP, 1, MAX_ID_LENGTH, MAX_METRICS),
)

_DECISION_FIELDS: tuple[Field, ...] = (
    ("txn_id", _STR),
    ("table", _STR),
    ("intent_offset", _LONG),
    ("outcome", _enum(tuple(Outcome))),
    ("id_version", _OPT_LONG),
    ("time_version", _OPT_MILLIS),
    ("operation", _optional(_OPERATION)),
    ("read_version", _OPT_LONG),
    ("partitions", _optional(_partition_specs(_NO_LIMIT, _STR_MAP, keep_wire=False))),
    ("added_files", _data_files(_DATA_FILE, None, keep_wire=False)),
    ("removed_files", _STR_TUPLE, 0, _NO_LIMIT, _NO_LIMIT),  # decisions: no limit of their own
    ("metadata", _METADATA),
    ("rebase", _enum(tuple(Rebase))),
    ("reason", _OPT_STR),
    ("message", _OPT_STR),
    ("conflicting_txn_id", _OPT_STR),
    ("conflicting_version", _OPT_LONG),
    ("writer", _OPT_STR),
    ("app_id", _OPT_STR),
    ("batch_id", _OPT_LONG),
    ("duplicate_of", _OPT_LONG),
    ("prev_hash", _optional(_BYTES)),
    ("restore_version", _OPT_LONG),
    ("operation_metrics", _LONG_MAP, 0, _NO_LIMIT, _NO_LIMIT),
)

RECORD_FIELDS: dict[type[BaseModel], tuple[Field, ...]] = {
    CommitIntent: _INTENT_FIELDS,
    CommitDecision: _DECISION_FIELDS,
    DataFile: _DATA_FILE_FIELDS,
    TableMetadata: _METADATA_FIELDS,
}


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
