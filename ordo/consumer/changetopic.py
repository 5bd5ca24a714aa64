"""The change topic: every table's row changes on Kafka, in Debezium's envelope, exactly once (``ordo cdc``).

For each table the catalog knows, ``ChangePublisher`` follows the catalog's
accepted logical commits in ID-version order, computes each commit's row
changes the way the change feed in Delta's shape does (``consumer.arrow``:
``plan_commits`` then ``change_rows``) and publishes one record per changed
row to ``<prefix>.<table>.changes`` (docs/change-topic.md):

* the value is Debezium's envelope as JSON (``before``, ``after``, ``op``
  ``c``/``u``/``d``, ``source``, ``ts_ms``, ``transaction``): alone (format
  ``json``, what Flink's ``debezium-json`` reads) or in Kafka Connect's
  ``schema``/``payload`` form (``connect-json``, ``consumer.connectjson``,
  for ``JsonConverter`` with ``schemas.enable=true``); an update's pre- and
  post-image are one ``u`` record; an INSERT OVERWRITE or TRUNCATE gives a
  ``d`` per row it removed, then a ``c`` per row it wrote; compaction and
  clustering give nothing; ``source.operation`` says MERGE for a MERGE;
* the key is the row's identity: its primary-key columns, then its
  partition columns (ordo merges rows per partition and key);
* with tombstones on (Debezium's default), each ``d`` is followed, in the
  same transaction, by a tombstone: its key and a null value;
* one transactional producer per table (``transactional.id`` = the topic's
  name) writes the records in Kafka transactions of at most
  ``max_records`` row changes; a newer publisher of the same table fences the
  older one.

Resuming needs no side file: every record carries its commit's ID version and
its place in the commit's rows (``source.id_version``, ``source.row``; a
commit's rows are put in one deterministic order), so after
``init_transactions()`` (which ends whatever the previous publisher left
open) the publisher reads the topic's last record with read_committed and
goes on with the row after it (tombstones carry no position: the last change
record counts, and a ``d`` whose tombstone a cut-short transaction left out
gets it first). On Kafka that is the last committed record; on
Tansu, which shows aborted records to read_committed readers (docs/tansu.md),
it is the last record every reader sees. Either way every reader sees each
row exactly once.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.settings import Settings
from ordo.schemas import TableMetadata
from ordo.schemas.errors import OrdoError
from ordo.schemas.operations import TRUNCATING_OPERATIONS, Operation, delta_operation
from ordo.schemas.topics import validate_prefix, validate_table_name

if TYPE_CHECKING:
    import pyarrow as pa

    from ordo.consumer.arrow import TableShape
    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit

log = logging.getLogger("ordo.cdc")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

DEFAULT_TOPIC_TEMPLATE = "{prefix}.{table}.changes"
# The change topic is a table's full row history: kept forever by default, so a reader can rebuild the table
# from offset 0. Resuming needs only the topic's last records: a shorter retention is safe for the publisher.
CHANGES_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
CONNECTOR = "ordo"
MAX_RECORDS_PER_TXN = 10_000
COMMITS_PER_ROUND = 200  # catalog commits fetched at once per table
KAFKA_TIMEOUT = 30.0
READY_MESSAGE = "cdc ready"
EXIT_FENCED = 3

OP_CREATE, OP_UPDATE, OP_DELETE = "c", "u", "d"  # Debezium's op codes


class ChangeTopicError(OrdoError):
    """Raised when a change topic cannot be published: a table type it cannot encode, or a topic whose last
    record is not one of ours."""


class ChangePublisherFencedError(ChangeTopicError):
    """Raised when a newer publisher of the same table took its transactional id (this one must stop)."""


# --------------------------------------------------------------------------- table shape without Spark


def table_shape(metadata: TableMetadata) -> TableShape:
    """The ``TableShape`` of ``metadata`` (``TableShape.of``: its DDL read without Spark); ``ChangeTopicError`` for
    nested columns (arrays, maps, structs), which a change record cannot encode yet."""
    import pyarrow as pa

    from ordo.consumer.arrow import TableShape

    shape = TableShape.of(metadata)
    nested = [f"{f.name} {f.type}" for f in shape.schema if pa.types.is_nested(f.type)]
    if nested:
        raise ChangeTopicError(f"the change topic cannot encode nested columns yet: {', '.join(nested)}")
    return shape


def identity_columns(metadata: TableMetadata) -> tuple[str, ...]:
    """The columns of a record's key: the primary key, then the partition columns it does not hold."""
    key = tuple(metadata.primary_key)
    return key + tuple(c for c in metadata.partition_columns if c not in key)


def topic_name(template: str, prefix: str, table: str) -> str:
    """The change topic of ``table`` from ``template`` (``{prefix}`` and ``{table}``)."""
    name = template.format(prefix=validate_prefix(prefix), table=validate_table_name(table))
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", name) or name in (".", ".."):
        raise ChangeTopicError(f"invalid change topic name {name!r} (from the template {template!r})")
    return name


# --------------------------------------------------------------------------- records


def json_value(value: Any) -> Any:
    """A column value as JSON: dates ``YYYY-MM-DD``, timestamps ISO-8601 (UTC ``Z``), decimals as strings,
    binary as base64 (Debezium's default), everything else as is."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class RowChange:
    """One changed row of a commit: ``op`` with the row before and after (None where the op has none), as
    Arrow's Python values (a record format writes them: ``JsonRecords``, ``connectjson.ConnectJson``)."""

    op: str
    key: str  # the identity (``identity_columns``) as JSON: the plain format's record key, and the order
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    identity: Mapping[str, Any] = field(default_factory=dict)  # the identity columns' values


def commit_changes(rows: pa.Table, metadata: TableMetadata, operation: str) -> list[RowChange]:
    """The change rows of one commit (``consumer.arrow.change_rows``, Delta's shape) as Debezium row changes,
    in the one order every publisher gives them.

    ``update_preimage`` and ``update_postimage`` of the same row make one ``u``.
    Order: for an INSERT OVERWRITE or TRUNCATE its deletes first; then by the
    key's JSON. A commit's keys are unique within each of these two phases
    (one record per key per partition and commit), so the order is total.
    """
    from ordo.consumer.arrow import CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE

    columns = [c for c in rows.column_names if not c.startswith("_")]
    ident = identity_columns(metadata)
    pre: dict[str, dict[str, Any]] = {}
    changes: list[tuple[int, str, RowChange]] = []
    posts: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    truncating = operation in TRUNCATING_OPERATIONS
    for record in rows.to_pylist():
        row = {c: record[c] for c in columns}
        identity = {c: record[c] for c in ident}  # a keyless table's: its hidden row id
        key = _dumps({c: json_value(v) for c, v in identity.items()})
        kind = record[CHANGE_TYPE]
        if kind == INSERT:
            changes.append((1, key, RowChange(OP_CREATE, key, None, row, identity)))
        elif kind == DELETE:
            changes.append((0 if truncating else 1, key, RowChange(OP_DELETE, key, row, None, identity)))
        elif kind == PREIMAGE:
            pre[key] = row
        elif kind == POSTIMAGE:
            posts.append((key, row, identity))
        else:
            raise ChangeTopicError(f"unknown change type {kind!r}")
    for key, row, identity in posts:
        before = pre.pop(key, None)
        if before is None:
            raise ChangeTopicError(f"an update of {key} without its pre-image")
        changes.append((1, key, RowChange(OP_UPDATE, key, before, row, identity)))
    if pre:
        raise ChangeTopicError(f"pre-images without a post-image: {sorted(pre)[:3]}")
    changes.sort(key=lambda c: (c[0], c[1]))
    return [c[2] for c in changes]


def json_image(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A row as the plain format writes it (``json_value`` of each column)."""
    return None if row is None else {c: json_value(v) for c, v in row.items()}


def envelope(
    change: RowChange,
    commit: Commit,
    row: int,
    *,
    prefix: str,
    version: str,
    now_ms: int,
    operation: str | None = None,
    image: Callable[[Mapping[str, Any] | None], Any] = json_image,
) -> dict[str, Any]:
    """Debezium's envelope of one row change (``source`` with ordo's fields; docs/change-topic.md): its images
    written by ``image`` (the record format's); ``operation`` the commit's as ``source`` names it (default: its
    wire name; ``operation_name``)."""
    from ordo.consumer.models import datetime_to_ms

    time_ms = datetime_to_ms(commit.timestamp)
    return {
        "before": image(change.before),
        "after": image(change.after),
        "source": {
            "version": version,
            "connector": CONNECTOR,
            "name": prefix,
            "ts_ms": time_ms,
            "snapshot": "false",
            "db": prefix,
            "table": commit.table,
            "id_version": commit.id_version,
            "time_version": time_ms,
            "txn_id": commit.txn_id,
            "operation": operation or commit.operation.value,
            "row": row,
        },
        "op": change.op,
        "ts_ms": now_ms,
        "transaction": {"id": commit.txn_id, "total_order": row + 1, "data_collection_order": row + 1},
    }


def operation_name(catalog: Catalog, commit: Commit) -> str:
    """``source.operation`` of a commit's records: ``MERGE`` for an UPDATE whose writer claimed MERGE's metrics
    (what DESCRIBE HISTORY calls it, ``schemas.operations.delta_operation``), else the operation's wire name.
    The metrics are the decision's (the catalog's history row of the commit's log offset)."""
    if commit.operation is not Operation.UPDATE:
        return commit.operation.value
    found = catalog.history(commit.table, 1, accepted_only=True, before=commit.log_offset + 1)
    metrics = found[0].operation_metrics if found and found[0].log_offset == commit.log_offset else {}
    return "MERGE" if delta_operation(commit.operation, metrics) == "MERGE" else commit.operation.value


class JsonRecords:
    """The ``json`` format: Debezium's envelope alone, keys as compact JSON (what Flink's ``debezium-json``
    reads by default, and Spark's ``from_json``)."""

    image = staticmethod(json_image)

    @staticmethod
    def key(identity: Mapping[str, Any]) -> bytes:
        return _dumps({c: json_value(v) for c, v in identity.items()}).encode()

    @staticmethod
    def value(envelope: Mapping[str, Any]) -> bytes:
        return _dumps(envelope).encode()


FORMATS = ("json", "connect-json")  # ORDO_CHANGES_FORMAT


def record_format(name: str, shape: TableShape, metadata: TableMetadata, prefix: str, table: str) -> Any:
    """The writer of one table shape's records in format ``name`` (``FORMATS``): ``image``, ``key``, ``value``."""
    if name == "json":
        return JsonRecords()
    if name == "connect-json":
        from ordo.consumer.connectjson import ConnectJson

        return ConnectJson(shape, identity_columns(metadata), prefix, table)
    raise ChangeTopicError(f"unknown change record format {name!r}: one of {', '.join(FORMATS)}")


@dataclass(frozen=True)
class Position:
    """Where a table's publishing goes on: the row ``row`` (0-based, in ``commit_changes`` order) of ID version
    ``version``; ``tombstone`` the key of a delete whose tombstone is still to be written (on Tansu a transaction
    cut short may show its ``d`` without the tombstone after it)."""

    version: int
    row: int
    tombstone: bytes | None = None


def change_of(value: bytes | None) -> Mapping[str, Any]:
    """A change record's envelope, in either format (``connect-json``'s is its ``payload``); ``ValueError`` if
    the value is not a JSON object."""
    found = json.loads(value or b"")
    if not isinstance(found, dict):
        raise ValueError(f"a JSON {type(found).__name__}, not an object")
    if set(found) == {"schema", "payload"} and isinstance(found["payload"], dict):
        return found["payload"]  # type: ignore[no-any-return]
    return found


def position_after(value: bytes | None, table: str, where: str) -> Position:
    """The position after the record ``value`` (the topic's last); ``ChangeTopicError`` if it is not ours."""
    try:
        source = change_of(value)["source"]
        version, row, named = source["id_version"], source["row"], source["table"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ChangeTopicError(f"{where} is not a change record of ordo ({exc!r}): refusing to guess") from exc
    if named != table or not (isinstance(version, int) and isinstance(row, int)) or version < 1 or row < 0:
        raise ChangeTopicError(f"{where} holds table {named!r} version {version!r} row {row!r}, not one of {table}")
    return Position(version, row + 1)


# --------------------------------------------------------------------------- publishing


def _is_fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError

    return bool(error.fatal()) or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,
    )


@dataclass
class PublisherStatus:
    """Counters of one publisher process (shared across threads)."""

    records_total: int = 0
    transactions_total: int = 0
    commits_total: int = 0
    published_version: dict[str, int] = field(default_factory=dict)  # last ID version fully published, per table
    errors: dict[str, str] = field(default_factory=dict)  # table -> the problem that holds it back


class TablePublisher:
    """One table's change topic: its transactional producer and the position publishing goes on from."""

    def __init__(self, publisher: ChangePublisher, table: str) -> None:
        self.owner = publisher
        self.table = table
        self.topic = topic_name(publisher.template, publisher.prefix, table)
        self.producer: Any = None
        self.position: Position | None = None
        self._formats: dict[tuple[str, tuple[str, ...]], tuple[TableShape, Any]] = {}

    def start(self) -> None:
        """Create the topic, take the transactional id (fencing an older publisher), read where to go on."""
        from confluent_kafka import KafkaException, Producer

        from ordo.kernel.admin import create_topics

        create_topics(self.owner.admin(), {self.topic: self.owner.topic_config})
        producer = Producer(
            self.owner.settings.kafka_config(
                **{
                    "transactional.id": self.topic,
                    "client.id": f"{self.topic}.publisher",
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "allow.auto.create.topics": False,
                    "logger": kafka_log,
                }
            )
        )
        try:
            producer.init_transactions(KAFKA_TIMEOUT)  # ends what an older publisher left open, fences it
        except KafkaException as exc:
            if _is_fenced(exc.args[0]):
                raise ChangePublisherFencedError(f"cannot take the change topic {self.topic}: {exc}") from exc
            raise BrokerUnavailableError(f"cannot initialise transactions of {self.topic}: {exc}") from exc
        self.producer = producer
        self.position = self.read_position()
        log.info("%s: publishing from version %d row %d", self.topic, self.position.version, self.position.row)

    def read_position(self) -> Position:
        """The position after the topic's last record every read_committed reader sees (version 1 if none)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        from ordo.kernel.logread import read_to_end

        config = self.owner.settings.kafka_config(
            **{"group.id": f"{self.topic}.publisher", "isolation.level": "read_committed", "logger": kafka_log}
        )
        probe = Consumer({**config, "isolation.level": "read_uncommitted"})
        try:
            _, high = probe.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=KAFKA_TIMEOUT)
        except KafkaException as exc:  # a topic created a moment ago may not be known to every broker yet
            raise BrokerUnavailableError(f"cannot read the end of {self.topic}: {exc}") from exc
        finally:
            probe.close()
        window = 64
        while True:
            start = max(0, high - window)
            last, entombed = None, False  # the last change record; whether its tombstone follows it
            for message in read_to_end(config, self.topic, start=start, transactional=True, timeout=KAFKA_TIMEOUT):
                if message.value() is not None:
                    last, entombed = message, False
                elif last is not None and message.key() == last.key():
                    entombed = True
            if last is not None:
                where = f"{self.topic} offset {last.offset()}"
                position = position_after(last.value(), self.table, where)
                if self.owner.tombstones and not entombed and change_of(last.value()).get("op") == OP_DELETE:
                    return Position(position.version, position.row, last.key())
                return position
            if start == 0:
                return Position(1, 0)
            window *= 8  # only markers, tombstones, aborted records (hidden on Kafka): look further back

    def publish(self, catalog: Catalog) -> int:
        """Publish what the catalog has beyond the position, in transactions; the records published."""
        from ordo.consumer.arrow import change_rows, plan_commits
        from ordo.kernel.errors import VersionNotFoundError

        assert self.position is not None
        published = 0
        if self.position.tombstone is not None:  # a delete whose tombstone a cut-short transaction left out
            published += self._send([(self.position.tombstone, None)], replace(self.position, tombstone=None))
        head = catalog.head(self.table)
        if self.position.version > head:
            return published
        end = min(head, self.position.version + COMMITS_PER_ROUND - 1)
        try:
            commits = catalog.commits(self.table, self.position.version, end)
        except VersionNotFoundError:
            return published
        pending: list[tuple[bytes, bytes | None]] = []
        rows = 0  # row changes in ``pending`` (a delete's tombstone goes with it, in the same transaction)
        cursor = self.position  # ``_send`` moves ``self.position`` past what is in the topic, never further
        if cursor.row > 0 and cursor.version not in {c.id_version for c in commits}:
            raise ChangeTopicError(
                f"{self.topic} holds row {cursor.row - 1} of version {cursor.version}, which the catalog has as "
                "a commit without row changes: the topic and the catalog disagree"
            )
        done = end  # the last version handled (all of it in the topic once ``pending`` is sent)
        for commit in commits:
            if self.owner.stopping:  # a stop between commits: publish what is computed, go no further
                done = commit.id_version - 1
                break
            metadata = catalog.snapshot(self.table, commit.id_version, groups=[]).metadata
            shape, form = self._format(metadata)
            (plan,) = plan_commits(catalog, self.table, [commit], shape)
            changes = commit_changes(change_rows(plan, shape), metadata, commit.operation.value)
            first = cursor.row if commit.id_version == cursor.version else 0
            if first > len(changes):
                raise ChangeTopicError(
                    f"{self.topic} holds row {first - 1} of version {commit.id_version}, which has "
                    f"{len(changes)} changed rows: the topic and the catalog disagree"
                )
            operation = operation_name(catalog, commit) if first < len(changes) else commit.operation.value
            now_ms = int(time.time() * 1000)
            for row in range(first, len(changes)):
                pending += self._records(form, changes[row], commit, row, operation, now_ms)
                rows += 1
                if rows >= self.owner.max_records:
                    published += self._send(pending, Position(commit.id_version, row + 1))
                    pending, rows = [], 0
            self.owner.status.commits_total += 1
        # commits without rows (and rewrites, which ``commits`` leaves out) move the position without a record
        if pending:
            published += self._send(pending, Position(done + 1, 0))
        if done >= self.position.version:
            self.position = Position(done + 1, 0)
        # every version before the position is in the topic (``_send`` moves it too)
        self.owner.status.published_version[self.table] = self.position.version - 1
        return published

    def _format(self, metadata: TableMetadata) -> tuple[TableShape, Any]:
        """The table's shape at ``metadata`` and the writer of its records in the publisher's format (one per
        metadata version: a Connect schema changes with the table's)."""
        identity = identity_columns(metadata)
        found = self._formats.get((metadata.schema, identity))
        if found is None:
            shape = table_shape(metadata)
            form = record_format(self.owner.record_format, shape, metadata, self.owner.prefix, self.table)
            found = self._formats.setdefault((metadata.schema, identity), (shape, form))
        return found

    def _records(
        self, form: Any, change: RowChange, commit: Commit, row: int, operation: str, now_ms: int
    ) -> list[tuple[bytes, bytes | None]]:
        """The Kafka records of one row change: its change record, and after a delete its tombstone (a null
        value under the same key) when tombstones are on."""
        owner = self.owner
        key = form.key(change.identity)
        value = envelope(
            change, commit, row, prefix=owner.prefix, version=owner.version, now_ms=now_ms, operation=operation,
            image=form.image,
        )  # fmt: skip
        if change.op == OP_DELETE and owner.tombstones:
            return [(key, form.value(value)), (key, None)]
        return [(key, form.value(value))]

    def _send(self, records: Sequence[tuple[bytes, bytes | None]], after: Position) -> int:
        """Produce ``records`` in one transaction; on an error the transaction is aborted and ``_Retry`` raised
        (the table's publisher is then made anew: ``init_transactions``, the position read from the topic)."""
        from confluent_kafka import KafkaError, KafkaException

        producer = self.producer
        try:
            producer.begin_transaction()
            for key, value in records:
                while True:
                    try:
                        producer.produce(self.topic, value=value, key=key, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.commit_transaction(KAFKA_TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0]
            if _is_fenced(error):
                raise ChangePublisherFencedError(f"{self.topic}: fenced by a newer publisher ({error})") from exc
            if error.code() == KafkaError._TIMED_OUT:
                # Tansu answers a fenced producer's EndTxn by dropping the connection, so its commit only times out
                # (docs/tansu.md): stop as fenced, as the arbiter does, rather than take the table back
                raise ChangePublisherFencedError(
                    f"{self.topic}: the transaction could not be committed within {KAFKA_TIMEOUT:g} s ({error}); "
                    "stopping as fenced"
                ) from exc
            try:  # best effort: the next publisher's init_transactions() ends it anyway
                producer.abort_transaction(KAFKA_TIMEOUT)
            except KafkaException as abort_exc:
                if _is_fenced(abort_exc.args[0]):
                    raise ChangePublisherFencedError(f"{self.topic}: fenced ({abort_exc})") from abort_exc
            # On Tansu the aborted records are visible: only the topic knows where to go on (``start`` reads it)
            raise _Retry(f"transaction failed ({error}); publishing again from the topic's last record") from exc
        changes = sum(value is not None for _, value in records)  # tombstones are not change records
        self.owner.status.records_total += changes
        self.owner.status.transactions_total += 1
        self.position = after
        return changes

    def close(self) -> None:
        if self.producer is not None:
            try:
                self.producer.flush(1.0)
            except Exception:  # best effort: the broker ends an open transaction
                log.debug("flush of %s failed", self.topic, exc_info=True)
            self.producer = None


class _Retry(Exception):
    """A transaction failed and was aborted: the table's publisher starts again (position read from the topic)."""


class ChangePublisher:
    """Publishes the change topics of every table of ``settings.catalog`` (or of ``tables``) until stopped."""

    def __init__(
        self,
        settings: Settings,
        *,
        template: str = DEFAULT_TOPIC_TEMPLATE,
        tables: Iterable[str] = (),
        max_records: int = MAX_RECORDS_PER_TXN,
        poll_interval: float = 0.2,
        retry_interval: float = 2.0,
        topic_config: Mapping[str, str] | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as package_version

        self.settings = settings
        self.prefix = settings.topic_prefix
        self.record_format = settings.changes_format  # FORMATS
        self.tombstones = settings.changes_tombstones  # a null-value record after each ``d``
        self.template = template
        topic_name(template, self.prefix, "t")  # a bad template fails at start
        self.only = {validate_table_name(t) for t in tables}
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        self.max_records = max_records
        self.poll_interval = poll_interval
        self.topic_config = dict(CHANGES_CONFIG if topic_config is None else topic_config)
        try:
            self.version = package_version("ordo")
        except PackageNotFoundError:
            self.version = "unknown"
        self.status = PublisherStatus()
        self.publishers: dict[str, TablePublisher] = {}
        self.retry_interval = retry_interval  # seconds a table that failed waits before it is tried again
        self._held_until: dict[str, float] = {}
        self._admin: Any = None
        self._stop = threading.Event()

    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self.settings.kafka_config(logger=kafka_log))
        return self._admin

    def stop(self) -> None:
        """Ask ``run`` to return after the commit it is computing (what is computed is published first)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stop.is_set()

    def round(self, catalog: Catalog) -> int:
        """One pass over the tables: start publishers of new ones, publish what each has; records published."""
        from ordo.consumer.errors import CatalogUnavailableError

        total = 0
        try:
            tables = [t.name for t in catalog.tables() if not self.only or t.name in self.only]
        except CatalogUnavailableError as exc:
            log.warning("catalog unavailable: %s", exc)
            return 0
        for name in tables:
            if self._stop.is_set():
                break
            if self._held_until.get(name, 0.0) > time.monotonic():
                continue
            publisher = self.publishers.get(name)
            try:
                if publisher is None:
                    publisher = TablePublisher(self, name)
                    publisher.start()
                    self.publishers[name] = publisher
                total += publisher.publish(catalog)
                self.status.errors.pop(name, None)
            except (_Retry, OrdoError, OSError, ValueError) as exc:
                # a failed transaction, the broker out of reach, a file vacuumed too early, a type not encodable
                # yet, a record not ours: the table is held and tried again later, the problem logged once
                if isinstance(exc, ChangePublisherFencedError):
                    raise
                if self.status.errors.get(name) != str(exc):
                    log.error("%s: cannot publish its changes: %s", name, exc)
                self.status.errors[name] = str(exc)
                dropped = self.publishers.pop(name, None)  # its position may be stale: start again from the topic
                if dropped is not None:
                    dropped.close()
                self._held_until[name] = time.monotonic() + self.retry_interval
        return total

    def run(
        self,
        catalog: Catalog,
        on_ready: Callable[[], None] | None = None,
        on_round: Callable[[], None] | None = None,
    ) -> None:
        """Publish until ``stop()``; ``on_ready`` once every table was caught up at least once, ``on_round``
        after every round."""
        ready = False
        try:
            while not self._stop.is_set():
                published = self.round(catalog)
                if on_round is not None:
                    on_round()
                if not ready and published == 0:
                    ready = True
                    if on_ready is not None:
                        on_ready()
                if published == 0:
                    self._stop.wait(self.poll_interval)
        finally:
            self.close()

    def close(self) -> None:
        """Flush and drop every table's producer and the admin client (an open transaction is the broker's)."""
        for publisher in self.publishers.values():
            publisher.close()
        self.publishers.clear()
        self._admin = None


DEFAULT_METRICS_PORT = 8768  # ordo cdc's /metrics, /healthz, /readyz (the arbiter's is 8767, the compactor's 8766)


class _StatusCollector:
    """The publisher's ``PublisherStatus`` as Prometheus metrics, read at each scrape."""

    def __init__(self, status: PublisherStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        status = self.status
        yield CounterMetricFamily("ordo_cdc_records", "Change records published", value=status.records_total)
        yield CounterMetricFamily(
            "ordo_cdc_transactions", "Kafka transactions committed", value=status.transactions_total
        )
        yield CounterMetricFamily("ordo_cdc_commits", "Table commits fully published", value=status.commits_total)
        version = GaugeMetricFamily(
            "ordo_cdc_published_version", "Last ID version fully published, per table", labels=["table"]
        )
        for table, done in sorted(status.published_version.items()):
            version.add_metric([table], done)
        yield version
        held = GaugeMetricFamily(
            "ordo_cdc_tables_held", "Tables whose publishing a problem holds back (1 each)", labels=["table"]
        )
        for table in sorted(status.errors):
            held.add_metric([table], 1)
        yield held


def publisher_registry(status: PublisherStatus) -> Any:
    """The Prometheus registry ``ordo cdc`` serves: ``ordo_build_info`` and the publisher's ``status``."""
    from prometheus_client import CollectorRegistry

    from ordo.kernel.observe import register_build_info

    registry = CollectorRegistry()
    register_build_info(registry, "cdc")
    registry.register(_StatusCollector(status))  # type: ignore[arg-type]
    return registry


def run_change_publisher(
    settings: Settings,
    *,
    template: str = DEFAULT_TOPIC_TEMPLATE,
    tables: Iterable[str] = (),
    max_records: int = MAX_RECORDS_PER_TXN,
    echo: Callable[[str], None] = print,
    metrics_port: int | None = DEFAULT_METRICS_PORT,
    metrics_host: str = "127.0.0.1",
) -> int:
    """``ordo cdc``: run until SIGINT/SIGTERM; the exit code (``EXIT_FENCED`` when a newer publisher took over).

    Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port`` (0: any free; None: none)."""
    import signal

    from ordo.consumer.catalog import Catalog
    from ordo.kernel.observe import Health, ObservabilityServer

    publisher = ChangePublisher(settings, template=template, tables=tables, max_records=max_records)
    registry = publisher_registry(publisher.status)
    health = Health("cdc")
    server = None
    if metrics_port is not None:
        server = ObservabilityServer(registry, health, metrics_host, metrics_port).start()
        log.info("cdc metrics at %s/metrics (and /healthz, /readyz)", server.url)

    def ready() -> None:
        health.ready = True
        log.info(READY_MESSAGE)

    def turned() -> None:
        health.beat()
        health.degraded = dict(publisher.status.errors)  # a table held back shows in /healthz

    def _on_signal(signum: int, frame: object) -> None:
        publisher.stop()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    echo(f"ORDO_CHANGES_TOPIC={template}")
    try:
        with Catalog(settings.catalog) as catalog:
            publisher.run(catalog, on_ready=ready, on_round=turned)
    except ChangePublisherFencedError as exc:
        log.error("%s", exc)
        return EXIT_FENCED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.close()
    log.info(
        "cdc stopped: %d records in %d transactions",
        publisher.status.records_total,
        publisher.status.transactions_total,
    )
    return 0


__all__ = [
    "CHANGES_CONFIG",
    "DEFAULT_TOPIC_TEMPLATE",
    "ChangePublisher",
    "ChangePublisherFencedError",
    "ChangeTopicError",
    "Position",
    "RowChange",
    "commit_changes",
    "envelope",
    "identity_columns",
    "json_value",
    "position_after",
    "publisher_registry",
    "run_change_publisher",
    "table_shape",
    "topic_name",
]
