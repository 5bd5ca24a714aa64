"""The pure parts of the change topic (``consumer.changetopic``): records, order, encodings, the resume point.

No broker: the Kafka side is tested in tests/integration/test_change_topic.py
(and read by Spark in tests/e2e/test_change_topic_spark.py).
"""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from ordo.consumer.arrow import change_schema
from ordo.consumer.changetopic import (
    ChangePublisher,
    ChangeTopicError,
    JsonRecords,
    Position,
    RowChange,
    TablePublisher,
    commit_changes,
    envelope,
    identity_columns,
    json_value,
    position_after,
    record_format,
    table_shape,
    topic_name,
)
from ordo.consumer.connectjson import ConnectEncodingError, ConnectJson
from ordo.consumer.models import Commit
from ordo.kernel.settings import Settings
from ordo.schemas import Operation, TableMetadata

META = TableMetadata(
    location="/w/t", schema="id BIGINT, v STRING, dt STRING", primary_key=("id",), partition_columns=("dt",)
)
SHAPE = table_shape(META)
STAMP = datetime(2024, 5, 1, tzinfo=UTC)


def rows(*changes: tuple[str, int, str | None, str]) -> pa.Table:
    """Change rows in Delta's shape: ``(change type, id, v, dt)``."""
    return pa.Table.from_pylist(
        [
            {"id": i, "v": v, "dt": dt, "_change_type": kind, "_commit_version": 3, "_commit_timestamp": STAMP}
            for kind, i, v, dt in changes
        ],
        change_schema(SHAPE),
    )


def test_pre_and_post_images_make_one_update_and_the_order_is_by_key_whatever_the_input_order() -> None:
    given = [
        ("update_postimage", 2, "new", "x"),
        ("insert", 10, "n", "x"),
        ("delete", 1, "gone", "y"),
        ("update_preimage", 2, "old", "x"),
        ("insert", 1, "same key, other partition", "x"),
    ]
    changes = commit_changes(rows(*given), META, "UPDATE")
    assert [(c.op, c.key) for c in changes] == [
        ("c", '{"id":1,"dt":"x"}'),
        ("d", '{"id":1,"dt":"y"}'),
        ("c", '{"id":10,"dt":"x"}'),
        ("u", '{"id":2,"dt":"x"}'),
    ]
    update = changes[3]
    assert update.before == {"id": 2, "v": "old", "dt": "x"} and update.after == {"id": 2, "v": "new", "dt": "x"}
    for seed in range(5):  # the same rows in any order give the same records: a restart can resume at a row
        shuffled = list(given)
        random.Random(seed).shuffle(shuffled)
        assert commit_changes(rows(*shuffled), META, "UPDATE") == changes


def test_an_overwrite_publishes_its_deletes_before_its_inserts() -> None:
    changes = commit_changes(
        rows(("insert", 1, "new", "x"), ("delete", 1, "old", "x"), ("delete", 0, "old", "x")), META, "INSERT_OVERWRITE"
    )
    assert [(c.op, c.key) for c in changes] == [
        ("d", '{"id":0,"dt":"x"}'),
        ("d", '{"id":1,"dt":"x"}'),
        ("c", '{"id":1,"dt":"x"}'),
    ]


def test_an_unpaired_image_is_refused() -> None:
    with pytest.raises(ChangeTopicError, match="without its pre-image"):
        commit_changes(rows(("update_postimage", 2, "new", "x")), META, "UPDATE")
    with pytest.raises(ChangeTopicError, match="without a post-image"):
        commit_changes(rows(("update_preimage", 2, "old", "x")), META, "UPDATE")


COMMIT = Commit(
    table="t",
    id_version=3,
    time_version=STAMP,
    timestamp=STAMP,
    operation=Operation.INSERT_INTO,
    data_change=True,
    txn_id="txn-1",
    read_version=2,
    rebase=None,  # type: ignore[arg-type]
    partitions=None,
    writer=None,
    app_id=None,
    batch_id=None,
    intent_offset=5,
    log_offset=9,
    added_files=(),
    removed_files=(),
)


def test_the_envelope_is_debeziums_with_ordos_source_fields() -> None:
    (change,) = commit_changes(rows(("insert", 7, "a", "x")), META, "INSERT_INTO")
    commit = COMMIT
    value = envelope(change, commit, 4, prefix="ordo", version="0.3.0", now_ms=123)
    assert value == {
        "before": None,
        "after": {"id": 7, "v": "a", "dt": "x"},
        "source": {
            "version": "0.3.0",
            "connector": "ordo",
            "name": "ordo",
            "ts_ms": 1714521600000,
            "snapshot": "false",
            "db": "ordo",
            "table": "t",
            "id_version": 3,
            "time_version": 1714521600000,
            "txn_id": "txn-1",
            "operation": "INSERT_INTO",
            "row": 4,
        },
        "op": "c",
        "ts_ms": 123,
        "transaction": {"id": "txn-1", "total_order": 5, "data_collection_order": 5},
    }
    assert position_after(json.dumps(value).encode(), "t", "here") == Position(3, 5)


@pytest.mark.parametrize(
    "value",
    [b"", b"not json", b'{"source": {}}', b'{"source": {"table": "t", "id_version": "3", "row": 0}}', b"[1]"],
)
def test_a_last_record_that_is_not_ours_is_refused_not_guessed(value: bytes) -> None:
    with pytest.raises(ChangeTopicError):
        position_after(value, "t", "topic offset 9")


def test_a_record_of_another_table_is_refused() -> None:
    other = json.dumps({"source": {"table": "u", "id_version": 3, "row": 0}}).encode()
    with pytest.raises(ChangeTopicError, match="not one of t"):
        position_after(other, "t", "topic offset 9")


def test_json_values_are_what_spark_and_flink_json_readers_parse() -> None:
    assert json_value(date(2024, 2, 29)) == "2024-02-29"
    assert json_value(datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "2024-01-02T03:04:05.000006Z"
    assert json_value(datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05"
    assert json_value(Decimal("-12.30")) == "-12.30"
    assert json_value(b"\x00\xff") == "AP8="
    assert json_value(None) is None and json_value(1.5) == 1.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BIGINT", pa.int64()),
        ("int", pa.int32()),
        ("smallint", pa.int16()),
        ("tinyint", pa.int8()),
        ("varchar(10)", pa.string()),
        ("decimal(10,2)", pa.decimal128(10, 2)),
        ("decimal", pa.decimal128(10, 0)),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_ntz", pa.timestamp("us")),
        ("date", pa.date32()),
        ("binary", pa.binary()),
    ],
)
def test_ddl_types_map_to_sparks_arrow_types(text: str, expected: Any) -> None:
    metadata = META.model_copy(update={"schema": f"`id` BIGINT NOT NULL, `c` {text}, `dt` STRING"})
    assert table_shape(metadata).schema.field("c").type == expected


def test_nested_types_are_refused_with_the_type_named() -> None:
    metadata = META.model_copy(update={"schema": "`id` BIGINT NOT NULL, `c` array<int>, `dt` STRING"})
    with pytest.raises(ChangeTopicError, match=r"nested columns yet: c list<item: int32>"):
        table_shape(metadata)


def test_the_key_is_the_primary_key_then_the_partition_columns() -> None:
    assert identity_columns(META) == ("id", "dt")
    keyed = META.model_copy(update={"primary_key": ("dt", "id")})
    assert identity_columns(keyed) == ("dt", "id")


def test_topic_names() -> None:
    assert topic_name("{prefix}.{table}.changes", "ordo", "events") == "ordo.events.changes"
    assert topic_name("cdc.{table}", "ordo", "events") == "cdc.events"
    with pytest.raises(ChangeTopicError):
        topic_name("{prefix}/{table}", "ordo", "events")


# --------------------------------------------------------------------------- Kafka Connect's JSON with schemas

WIDE = TableMetadata(
    location="/w/wide",
    schema=(
        "`id` BIGINT NOT NULL, `b` BOOLEAN, `i8` TINYINT, `s` SMALLINT, `i` INT, `f` FLOAT, `d` DOUBLE, `v` STRING, "
        "`bin` BINARY, `day` DATE, `at` TIMESTAMP, `ntz` TIMESTAMP_NTZ, `amount` DECIMAL(10,2), `dt` STRING"
    ),
    primary_key=("id",),
    partition_columns=("dt",),
)
WIDE_ROW = {
    "id": 7,
    "b": True,
    "i8": -3,
    "s": 300,
    "i": 70000,
    "f": 1.5,
    "d": -2.25,
    "v": "ünï",
    "bin": b"\x00\xff",
    "day": date(2024, 1, 1),
    "at": datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    "ntz": datetime(1970, 1, 1, 0, 0, 1, 5),
    "amount": Decimal("-2.06"),
    "dt": "x",
}


def wide_change(op: str = "c") -> RowChange:
    key = json.dumps({"id": 7, "dt": "x"}, separators=(",", ":"))
    before, after = (None, WIDE_ROW) if op == "c" else (WIDE_ROW, None)
    return RowChange(op, key, before, after, {"id": 7, "dt": "x"})


def test_connect_json_types_each_column_as_debeziums_connectors_do() -> None:
    form = ConnectJson(table_shape(WIDE), identity_columns(WIDE), "ordo", "wide")
    schema = {f["field"]: {k: v for k, v in f.items() if k != "field"} for f in form_row_fields(form)}
    assert schema == {
        "id": {"type": "int64", "optional": False},
        "b": {"type": "boolean", "optional": True},
        "i8": {"type": "int8", "optional": True},
        "s": {"type": "int16", "optional": True},
        "i": {"type": "int32", "optional": True},
        "f": {"type": "float", "optional": True},
        "d": {"type": "double", "optional": True},
        "v": {"type": "string", "optional": True},
        "bin": {"type": "bytes", "optional": True},
        "day": {"type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1},
        "at": {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1},
        "ntz": {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
        "amount": {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        },
        "dt": {"type": "string", "optional": True},
    }
    assert form.image(WIDE_ROW) == {  # every other column as it is
        **WIDE_ROW,
        "bin": "AP8=",  # base64
        "day": 19723,  # days since 1970-01-01
        "at": "2024-01-02T03:04:05.000006Z",
        "ntz": 1_000_005,  # microseconds since 1970-01-01T00:00
        "amount": "/zI=",  # -206 unscaled, two's complement big-endian
    }
    assert form.image({**WIDE_ROW, "b": None, "day": None, "amount": None, "ntz": None}) == {
        **form.image(WIDE_ROW),  # type: ignore[dict-item]
        "b": None,
        "day": None,
        "amount": None,
        "ntz": None,
    }


def form_row_fields(form: ConnectJson) -> list[dict[str, Any]]:
    """The ``Value`` struct's fields in ``form``'s envelope schema (read back from a record)."""
    value = json.loads(form.value({"before": None, "after": None}))
    (before,) = [f for f in value["schema"]["fields"] if f["field"] == "before"]
    return before["fields"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("amount", "unscaled"),
    [("0.00", 0), ("1.27", 127), ("1.28", 128), ("-1.28", -128), ("-99999999.99", -(10**10) + 1)],
)
def test_connect_decimals_are_the_unscaled_value_in_twos_complement(amount: str, unscaled: int) -> None:
    form = ConnectJson(table_shape(WIDE), identity_columns(WIDE), "ordo", "wide")
    written = form.image({**WIDE_ROW, "amount": Decimal(amount)})["amount"]  # type: ignore[index]
    assert int.from_bytes(base64.b64decode(written), "big", signed=True) == unscaled


def test_a_connect_record_is_the_schema_and_the_payload_key_and_value() -> None:
    form = ConnectJson(table_shape(WIDE), identity_columns(WIDE), "my-prefix.x", "wide")
    key = json.loads(form.key({"id": 7, "dt": "x"}))
    assert key == {
        "schema": {
            "type": "struct",
            "optional": False,
            "name": "my_prefix.x.wide.Key",
            "fields": [
                {"type": "int64", "optional": False, "field": "id"},
                {"type": "string", "optional": True, "field": "dt"},
            ],
        },
        "payload": {"id": 7, "dt": "x"},
    }
    value = envelope(wide_change(), COMMIT, 0, prefix="ordo", version="1", now_ms=5, image=form.image)
    record = json.loads(form.value(value))
    assert set(record) == {"schema", "payload"} and record["payload"]["after"]["day"] == 19723
    schema = record["schema"]
    assert (schema["name"], schema["optional"]) == ("my_prefix.x.wide.Envelope", False)
    assert [f["field"] for f in schema["fields"]] == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert {f["field"]: f.get("name") for f in schema["fields"]} == {
        "before": "my_prefix.x.wide.Value",
        "after": "my_prefix.x.wide.Value",
        "source": "io.ordo.cdc.Source",
        "op": None,
        "ts_ms": None,
        "transaction": "event.block",
    }
    source_fields = [f["field"] for f in schema["fields"][2]["fields"]]
    assert source_fields == list(record["payload"]["source"])  # every source field has its schema, in order
    assert position_after(form.value(value), "t", "here") == Position(3, 1)  # the publisher reads either format


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_double_connect_json_cannot_carry_is_refused_naming_the_column(bad: float) -> None:
    form = ConnectJson(table_shape(WIDE), identity_columns(WIDE), "ordo", "wide")
    with pytest.raises(ConnectEncodingError, match=r"column d holds .*ORDO_CHANGES_FORMAT=json"):
        form.image({**WIDE_ROW, "d": bad})
    assert JsonRecords.value({"d": bad}) in (b'{"d":NaN}', b'{"d":Infinity}', b'{"d":-Infinity}')  # json carries it


def test_a_delete_is_followed_by_its_tombstone_unless_tombstones_are_off() -> None:
    for tombstones, expected in ((True, 2), (False, 1)):
        settings = Settings(bootstrap_servers="127.0.0.1:1", changes_tombstones=tombstones)
        table = TablePublisher(ChangePublisher(settings), "wide")
        _, form = table._format(WIDE)
        deleted = table._records(form, wide_change("d"), COMMIT, 0, "DELETE", 5)
        assert len(deleted) == expected
        assert deleted[0][1] is not None and json.loads(deleted[0][1])["op"] == "d"
        if tombstones:
            assert deleted[1] == (deleted[0][0], None)  # the same key bytes, no value
        assert len(table._records(form, wide_change("c"), COMMIT, 0, "INSERT_INTO", 5)) == 1


def test_the_record_format_is_a_setting() -> None:
    settings = Settings(bootstrap_servers="127.0.0.1:1", changes_format="connect-json")
    table = TablePublisher(ChangePublisher(settings), "wide")
    _, form = table._format(WIDE)
    (record,) = table._records(form, wide_change("c"), COMMIT, 0, "MERGE", 5)
    key, value = json.loads(record[0]), json.loads(record[1] or b"")
    assert key["payload"] == {"id": 7, "dt": "x"} and value["payload"]["source"]["operation"] == "MERGE"
    with pytest.raises(ChangeTopicError, match="unknown change record format 'avro'"):
        record_format("avro", table_shape(WIDE), WIDE, "ordo", "wide")
