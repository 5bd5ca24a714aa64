"""Kafka Connect's JSON with schemas: the change topic's records in ``JsonConverter``'s ``schema``/``payload`` form.

With ``ORDO_CHANGES_FORMAT=connect-json`` every key and value of a change
topic is ``{"schema": <Connect schema>, "payload": <value>}``, what Kafka
Connect's ``JsonConverter`` with ``schemas.enable=true`` reads into a typed
``Struct`` (and writes itself): the form the JDBC sinks and Debezium's
``ExtractNewRecordState`` need. The value's schema is Debezium's envelope
(``<prefix>.<table>.Envelope``: ``before`` and ``after`` structs named
``<prefix>.<table>.Value``, ``source``, ``op``, ``ts_ms``, ``transaction``),
the key's the row's identity (``<prefix>.<table>.Key``).

Column types map as Debezium's connectors map them with their default
settings (docs/change-topic.md has the table): DATE is Connect's ``Date``
(int32 days), DECIMAL Connect's ``Decimal`` (base64 of the unscaled value,
JsonConverter's own default), TIMESTAMP Debezium's ``ZonedTimestamp`` (an
ISO-8601 string: Connect's ``Timestamp`` would cut microseconds to
milliseconds), TIMESTAMP_NTZ Debezium's ``MicroTimestamp`` (int64). A payload
must match its schema's type exactly: JsonConverter reads a string declared
int64 as 0 and ``"NaN"`` declared double as 0.0, and refuses a NaN token, so
a NaN or infinite double is refused here (``ChangeTopicError``: the table is
held, the plain ``json`` format carries it). tests/e2e/test_change_topic_connect.py
reads the topic back with JsonConverter itself.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ordo.schemas.errors import OrdoError

if TYPE_CHECKING:
    import pyarrow as pa

    from ordo.consumer.arrow import TableShape

DATE = "org.apache.kafka.connect.data.Date"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
SOURCE_SCHEMA = "io.ordo.cdc.Source"
TRANSACTION_SCHEMA = "event.block"  # Debezium's transaction block
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)

Encode = Callable[[Any], Any]


class ConnectEncodingError(OrdoError, ValueError):
    """Raised when a value cannot be written in Kafka Connect's JSON (a NaN or infinite double)."""


def schema_name(prefix: str, table: str, suffix: str) -> str:
    """``<prefix>.<table>.<suffix>`` with every character Avro names do not allow made ``_`` (as Debezium does)."""
    return ".".join(re.sub(r"[^A-Za-z0-9_]", "_", part) for part in (*prefix.split("."), table, suffix))


def column_schema(field: pa.Field) -> tuple[dict[str, Any], Encode]:
    """The Connect schema of one column and the function that writes its values as that schema's payload."""
    import pyarrow as pa

    kind = field.type
    optional = bool(field.nullable)
    if pa.types.is_boolean(kind):
        return {"type": "boolean", "optional": optional}, _same
    for test, name in ((pa.types.is_int8, "int8"), (pa.types.is_int16, "int16"), (pa.types.is_int32, "int32")):
        if test(kind):
            return {"type": name, "optional": optional}, _same
    if pa.types.is_int64(kind):
        return {"type": "int64", "optional": optional}, _same
    if pa.types.is_float32(kind) or pa.types.is_float64(kind):
        return {"type": "float" if pa.types.is_float32(kind) else "double", "optional": optional}, _finite(field.name)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return {"type": "string", "optional": optional}, _same
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return {"type": "bytes", "optional": optional}, _base64
    if pa.types.is_date32(kind):
        return {"type": "int32", "optional": optional, "name": DATE, "version": 1}, _days
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return {"type": "string", "optional": optional, "name": ZONED_TIMESTAMP, "version": 1}, _zoned
    if pa.types.is_timestamp(kind):
        return {"type": "int64", "optional": optional, "name": MICRO_TIMESTAMP, "version": 1}, _micros
    if pa.types.is_decimal(kind):
        parameters = {"scale": str(kind.scale), "connect.decimal.precision": str(kind.precision)}
        return {"type": "bytes", "optional": optional, "name": DECIMAL, "version": 1, "parameters": parameters}, (
            _decimal(kind.scale)
        )
    raise ConnectEncodingError(f"column {field.name} of type {kind} has no Kafka Connect schema here")


def _same(value: Any) -> Any:
    return value


def _finite(column: str) -> Encode:
    def encode(value: Any) -> Any:
        if value is not None and not math.isfinite(value):
            raise ConnectEncodingError(
                f"column {column} holds {value!r}, which Kafka Connect's JSON cannot carry (JsonConverter refuses "
                "NaN and infinities): publish this table with ORDO_CHANGES_FORMAT=json"
            )
        return value

    return encode


def _base64(value: Any) -> Any:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _days(value: Any) -> Any:
    return None if value is None else (value - _EPOCH_DAY).days


def _zoned(value: Any) -> Any:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _micros(value: Any) -> Any:
    return None if value is None else (value - _EPOCH) // _MICROSECOND


def _decimal(scale: int) -> Encode:
    def encode(value: Decimal | None) -> Any:
        if value is None:
            return None
        unscaled = int(value.scaleb(scale).to_integral_exact())
        return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode("ascii")

    return encode


class ConnectJson:
    """One table shape's Connect schemas, and its change records in JsonConverter's form.

    The schemas are serialized once per shape (a table's metadata version):
    each record is the schema's text spliced with its payload.
    """

    def __init__(self, shape: TableShape, identity: Sequence[str], prefix: str, table: str) -> None:
        columns = [f for f in shape.schema if not f.name.startswith("_")]  # a keyless table's row id: key only
        self._row = {f.name: column_schema(f) for f in columns}
        self._key = {c: column_schema(shape.schema.field(c)) for c in identity}
        row_struct = {
            "type": "struct",
            "optional": True,
            "name": schema_name(prefix, table, "Value"),
            "fields": [{**schema, "field": name} for name, (schema, _) in self._row.items()],
        }
        key_struct = {
            "type": "struct",
            "optional": False,
            "name": schema_name(prefix, table, "Key"),
            "fields": [{**schema, "field": name} for name, (schema, _) in self._key.items()],
        }
        self._value_head = '{"schema":' + _dumps(envelope_schema(row_struct, prefix, table)) + ',"payload":'
        self._key_head = '{"schema":' + _dumps(key_struct) + ',"payload":'

    def image(self, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A row (Arrow's Python values) as the payload of the ``Value`` struct."""
        if row is None:
            return None
        return {name: encode(row.get(name)) for name, (_, encode) in self._row.items()}

    def key(self, identity: Mapping[str, Any]) -> bytes:
        """The record key: the identity columns' values in the ``Key`` struct."""
        payload = {name: encode(identity[name]) for name, (_, encode) in self._key.items()}
        return (self._key_head + _dumps(payload) + "}").encode()

    def value(self, envelope: Mapping[str, Any]) -> bytes:
        """The record value: ``envelope`` (its images already ``image``'s) under the envelope's schema."""
        return (self._value_head + _dumps(envelope) + "}").encode()


def envelope_schema(row: Mapping[str, Any], prefix: str, table: str) -> dict[str, Any]:
    """Debezium's envelope schema around the row struct ``row`` (``source`` with ordo's fields)."""

    def field(name: str, kind: str, optional: bool = False) -> dict[str, Any]:
        return {"type": kind, "optional": optional, "field": name}

    source = {
        "type": "struct",
        "optional": False,
        "name": SOURCE_SCHEMA,
        "field": "source",
        "fields": [
            field("version", "string"),
            field("connector", "string"),
            field("name", "string"),
            field("ts_ms", "int64"),
            field("snapshot", "string", True),
            field("db", "string"),
            field("table", "string"),
            field("id_version", "int64"),
            field("time_version", "int64"),
            field("txn_id", "string"),
            field("operation", "string"),
            field("row", "int64"),
        ],
    }
    transaction = {
        "type": "struct",
        "optional": True,
        "name": TRANSACTION_SCHEMA,
        "field": "transaction",
        "fields": [field("id", "string"), field("total_order", "int64"), field("data_collection_order", "int64")],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": schema_name(prefix, table, "Envelope"),
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            source,
            field("op", "string"),
            field("ts_ms", "int64", True),
            transaction,
        ],
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


__all__ = [
    "DATE",
    "DECIMAL",
    "MICRO_TIMESTAMP",
    "ZONED_TIMESTAMP",
    "ConnectEncodingError",
    "ConnectJson",
    "column_schema",
    "envelope_schema",
    "schema_name",
]
