"""The pure decision core: state + intent record -> decision + state.

No Kafka, no Spark, no clock: a decision is a function of the table state and
the intent record (its bytes, log offset and Kafka timestamp). Replaying the
intents log through this module reproduces every decision bit for bit.

The fold has two halves:

* ``evaluate(state, intent, record_timestamp, offset)`` reads the state and
  returns the decision. It never mutates.
* ``apply(state, decision, encoded)`` folds a decision into the state. It is
  the same function at runtime and when rebuilding from the decisions log.

``decide`` is both in one call. State is a mutable accumulator owned by one
fold; ``apply`` updates it in place so that a decision costs O(files and
partitions it touches), never a scan of history or of the live file set.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ordo.arbiter.policy import (
    DEFAULT_POLICY,
    POLICY_PROPERTY,
    REBASE_OF,
    Policy,
    PolicyError,
    Resolution,
    load_policy,
    table_policy,
)
from ordo.schemas import (
    OP_CLASS,
    CodecError,
    CommitDecision,
    CommitIntent,
    DataFile,
    OpClass,
    Outcome,
    Reason,
    Rebase,
    TableMetadata,
    chain_hash,
    encode,
)
from ordo.schemas.buckets import table_buckets
from ordo.schemas.codec import DEFAULT_CODEC, trusted
from ordo.schemas.decisionlog import GENESIS_HASH, BrokenLogError, LogHead, already_live, check, not_live
from ordo.schemas.models import MAX_ID_LENGTH, MAX_VERSION, DdlColumn, datetime_to_millis, millis_to_datetime, parse_ddl
from ordo.schemas.operations import REGISTRY, RESERVED_COLUMNS, RESERVED_PREFIX, ROW_ID_COLUMN, Check, Removes
from ordo.schemas.paths import FILE_NAME_PATTERN, partition_path, split_data_file_path, write_id_of

MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant a datetime holds
# How many recent txn ids are remembered to answer a repeated intent idempotently.
DEDUPE_WINDOW = 1_000_000
# How many versions back compaction lineage is kept. A compaction whose read
# version is older than this and whose inputs were rewritten meanwhile is
# rejected (FILE_NOT_LIVE): safe, and it bounds memory.
LINEAGE_WINDOW = 100_000
# How long a removed file stays restorable, by default (table property ``ordo.retention_hours``, fixed at
# creation): a RESTORE may re-add a file only if it was removed less than this before the RESTORE intent, and
# ``ordo vacuum`` never deletes a file removed more recently (docs/conflicts.md "RESTORE").
RETENTION_PROPERTY = "ordo.retention_hours"
DEFAULT_RETENTION_HOURS = 168

PartitionKey = tuple[str, ...]
Last = tuple[int, str]  # (id version, txn id) of the latest commit of one class in one scope


# Hot-path constants: enum class attributes and ``Operation`` properties cost a call each in Python 3.11.
# Every set below is read off the operation registry (``schemas.operations.REGISTRY``); none lists operations.
_CLASSES = tuple(OpClass)
_REWRITES = frozenset(op for op, t in REGISTRY.items() if t.removes is Removes.NAMED)
_TRUNCATES = frozenset(op for op, t in REGISTRY.items() if t.removes is Removes.SCOPE)
_ADDS_NO_FILES = frozenset(op for op, t in REGISTRY.items() if not t.adds_files)
_NAMES_NO_REMOVED = frozenset(op for op, t in REGISTRY.items() if t.removes is Removes.NOTHING)
_DATA_CHANGES = frozenset(op for op, t in REGISTRY.items() if t.data_change)
_CREATES = frozenset(op for op, t in REGISTRY.items() if Check.CREATE in t.checks)
_ALTERS = frozenset(op for op, t in REGISTRY.items() if Check.ALTER in t.checks)  # metadata after the change
_CARRIES_METADATA = frozenset(op for op, t in REGISTRY.items() if t.metadata)
_EVOLVES = frozenset(op for op, t in REGISTRY.items() if t.evolves_schema)  # writes that may carry new metadata
_RESTORES = frozenset(op for op, t in REGISTRY.items() if t.removes is Removes.RESTORE)
_WHOLE_PARTITIONS = frozenset(  # rewrites that must rewrite every file of a partition they touch
    op for op, t in REGISTRY.items() if Reason.INCOMPLETE_REWRITE in t.reasons
)
_MALFORMED_INTENT = str(Reason.MALFORMED_INTENT)
# The class whose last commit makes every older snapshot stale (SCHEMA_CHANGED): ALTER's, the registry's fixed row.
_ALTER = OpClass.ALTER
_ACCEPTED = Outcome.ACCEPTED
_LATER_FAILS = Resolution.LATER_FAILS

# The decision template: every field in ``CommitDecision`` order, at its value when nothing was decided.
# Each decision is this dict with the fields its path sets (``_decision``).
_BLANK: dict[str, object] = {
    "txn_id": "",
    "table": "",
    "intent_offset": -1,
    "outcome": Outcome.REJECTED,
    "id_version": None,
    "time_version": None,
    "operation": None,
    "read_version": None,
    "partitions": None,
    "added_files": (),
    "removed_files": (),
    "metadata": None,
    "rebase": Rebase.NONE,
    "reason": None,
    "message": None,
    "conflicting_txn_id": None,
    "conflicting_version": None,
    "writer": None,
    "app_id": None,
    "batch_id": None,
    "duplicate_of": None,
    "prev_hash": GENESIS_HASH,
    "restore_version": None,
    "operation_metrics": {},
}
assert tuple(_BLANK) == tuple(CommitDecision.model_fields), "the template lists CommitDecision's fields in order"


@dataclass(slots=True)
class PartitionState:
    """Live files of one partition and the last commit of each class in it."""

    live: set[str] = field(default_factory=set)
    last: list[Last | None] = field(default_factory=lambda: [None] * len(OpClass))


@dataclass(frozen=True, slots=True)
class Lineage:
    """A compaction/cluster commit that removed ``inputs`` and added ``outputs``."""

    version: int
    txn_id: str
    inputs: frozenset[str]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """What a txn id was answered, kept to repeat it for a duplicate intent."""

    offset: int
    outcome: Outcome
    id_version: int | None
    time_version: datetime | None
    reason: str | None
    message: str | None
    conflicting_txn_id: str | None
    conflicting_version: int | None


@dataclass(slots=True)
class TableState:
    """Everything the arbiter knows about one table, derived from its decisions log."""

    table: str
    metadata: TableMetadata | None = None
    policy: Policy | None = None
    head_version: int = -1
    head_time_ms: int | None = None
    last_intent_offset: int = -1
    decisions: int = 0
    chain: bytes = GENESIS_HASH
    partitions: dict[PartitionKey, PartitionState] = field(default_factory=dict)
    whole: list[Last | None] = field(default_factory=lambda: [None] * len(OpClass))
    any_scope: list[Last | None] = field(default_factory=lambda: [None] * len(OpClass))
    files: dict[str, PartitionKey] = field(default_factory=dict)
    # Per live file, the oldest version whose data it holds: the version that
    # added it, or for a rewrite's output the oldest of its inputs' (per partition).
    data_versions: dict[str, int] = field(default_factory=dict)
    # Write ids (``schemas.paths``) of the files of every accepted commit: one per commit that added files.
    write_ids: set[str] = field(default_factory=set)
    txns: OrderedDict[str, TxnRecord] = field(default_factory=OrderedDict)
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)
    lineage: dict[str, Lineage] = field(default_factory=dict)
    lineage_order: deque[Lineage] = field(default_factory=deque)
    # What RESTORE checks (docs/conflicts.md "RESTORE"): per live file the version its current stay began; per
    # file removed within the retention, its partition and each stay (added, removed, removal's time in ms);
    # the removals in time order, to forget them after the retention; the lowest version still restorable.
    added_at: dict[str, int] = field(default_factory=dict)
    gone: dict[str, tuple[PartitionKey, tuple[tuple[int, int, int], ...]]] = field(default_factory=dict)
    gone_order: deque[tuple[int, int, str]] = field(default_factory=deque)
    restore_floor: int = 0
    retention_ms: int = DEFAULT_RETENTION_HOURS * 3_600_000

    @property
    def exists(self) -> bool:
        """True once CREATE_TABLE was accepted."""
        return self.metadata is not None

    @property
    def next_offset(self) -> int:
        """The intents-log offset the arbiter resumes from."""
        return self.last_intent_offset + 1

    def live_files(self) -> set[str]:
        """All live paths (a copy; for tests and tools, not the hot path)."""
        return set(self.files)


def new_state(table: str) -> TableState:
    """The state of a table before its first decision."""
    return TableState(table=table)


# --------------------------------------------------------------------------- evaluate


class _Reject(Exception):
    """Internal control flow: carries a rejection out of the nested checks."""

    def __init__(self, reason: str, message: str, conflicting: Last | None = None) -> None:
        super().__init__(message)
        self.reason = str(reason)  # a plain string, as a decision read back from the log holds
        self.message = message
        self.conflicting = conflicting


def evaluate(
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int, *, before_0_5: bool = False
) -> CommitDecision:
    """Decide one intent against ``state`` without changing it.

    ``record_timestamp`` is the intent record's Kafka timestamp in milliseconds,
    ``offset`` its position in the intents log. ``before_0_5``: the intent was written with a schema older
    than release 0.5, so it is decided by the rules of its time: a write carrying metadata is refused as it
    was then (mergeSchema/overwriteSchema are 0.5's), and replays of older logs re-derive what was logged.
    """
    previous = state.txns.get(intent.txn_id)
    if previous is not None:
        return _repeat(state, intent, offset, previous)
    try:
        if not 0 <= record_timestamp <= MAX_TIMESTAMP_MS:
            # Any producer may set a record's CreateTime; a time version must be a real instant.
            raise _Reject(
                Reason.MALFORMED_INTENT,
                f"record timestamp {record_timestamp} ms is outside 1970-01-01..9999-12-31 (no time version possible)",
            )
        return _accept(state, intent, record_timestamp, offset, before_0_5)
    except _Reject as rejection:
        return _reject(state, intent, offset, rejection)


def reject_malformed(state: TableState, offset: int, error: str, txn_id: str = "") -> CommitDecision:
    """The decision for an intent record that could not be decoded or validated."""
    record = {**_BLANK, "table": state.table, "intent_offset": offset, "prev_hash": state.chain}
    record["txn_id"] = txn_id
    record["reason"] = _MALFORMED_INTENT
    record["message"] = error[:1000]
    return trusted(CommitDecision, record)


def _decision(state: TableState, intent: CommitIntent, offset: int, fields: dict[str, object]) -> CommitDecision:
    """The decision template filled for ``intent`` (what every answer to it repeats), then ``fields``."""
    record = {
        **_BLANK,
        "txn_id": intent.txn_id,
        "table": state.table,
        "intent_offset": offset,
        "operation": intent.operation,
        "read_version": intent.read_version,
        "writer": intent.writer,
        "app_id": intent.app_id,
        "batch_id": intent.batch_id,
        "prev_hash": state.chain,
        "restore_version": intent.restore_version,
        **fields,
    }
    return trusted(CommitDecision, record)


def evaluate_record(state: TableState, value: bytes | None, record_timestamp: int, offset: int) -> CommitDecision:
    """Decode an intents-log record and decide it; undecodable bytes get MALFORMED_INTENT."""
    intent = _read_intent(value)  # the fast path: a valid intent, or None for the reference path below
    if intent is not None:  # the fast path reads the current schema only
        return evaluate(state, intent, record_timestamp, offset)
    if value is None:
        return reject_malformed(state, offset, "empty record (no value)")
    try:
        model, record = DEFAULT_CODEC.decode_dict(value)
    except CodecError as exc:
        return reject_malformed(state, offset, str(exc))
    if model is not CommitIntent:
        return reject_malformed(state, offset, f"expected a CommitIntent, got a {model.__name__}")
    try:
        intent = CommitIntent.model_validate(record)
    except ValueError as exc:
        txn_id = record.get("txn_id")
        txn = txn_id if isinstance(txn_id, str) and len(txn_id) <= 256 else ""
        return reject_malformed(state, offset, f"invalid CommitIntent: {_first_error(exc)}", txn)
    return evaluate(state, intent, record_timestamp, offset, before_0_5=_before_0_5(value))


_read_intent = DEFAULT_CODEC.read_intent
# The first field release 0.5 added to CommitIntent: a writer schema without it is older than 0.5's rules.
_FIELD_OF_0_5 = "operation_metrics"


def _before_0_5(value: bytes) -> bool:
    return _FIELD_OF_0_5 not in DEFAULT_CODEC.writer_fields(value)


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    items = errors(include_url=False, include_input=False)
    first = items[0]
    where = ".".join(str(p) for p in first["loc"]) or "<root>"
    return f"{where}: {first['msg']}" + (f" (and {len(items) - 1} more)" if len(items) > 1 else "")


def _repeat(state: TableState, intent: CommitIntent, offset: int, previous: TxnRecord) -> CommitDecision:
    return _decision(
        state,
        intent,
        offset,
        {
            "outcome": previous.outcome,
            "id_version": previous.id_version,
            "time_version": previous.time_version,
            "reason": previous.reason,
            "message": f"txn {intent.txn_id} was already decided at intent offset {previous.offset}",
            "conflicting_txn_id": previous.conflicting_txn_id,
            "conflicting_version": previous.conflicting_version,
            "duplicate_of": previous.offset,
        },
    )


def _reject(state: TableState, intent: CommitIntent, offset: int, rejection: _Reject) -> CommitDecision:
    conflicting = rejection.conflicting
    return _decision(
        state,
        intent,
        offset,
        {
            "partitions": intent.partitions,
            "reason": rejection.reason,
            "message": rejection.message[:1000],
            "conflicting_txn_id": conflicting[1] if conflicting else None,
            "conflicting_version": conflicting[0] if conflicting else None,
        },
    )


def _accept(
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int, before_0_5: bool = False
) -> CommitDecision:
    """Run the checks in order; return the accepted decision or raise ``_Reject``."""
    if intent.table != state.table:
        raise _Reject(
            Reason.TABLE_MISMATCH, f"intent names table {intent.table!r} but was published for {state.table!r}"
        )
    if intent.operation_metrics:
        _check_metrics(intent)
    operation = intent.operation
    if operation in _CREATES:
        return _create(state, intent, record_timestamp, offset)
    if state.metadata is None or state.policy is None:
        raise _Reject(Reason.UNKNOWN_TABLE, f"table {state.table!r} does not exist (no CREATE_TABLE accepted)")
    evolves = operation in _EVOLVES and not before_0_5
    if intent.metadata is not None and operation not in _ALTERS and not evolves:
        # The message predates ALTER_TABLE; it stays as logged so that replays of older logs match.
        raise _Reject(Reason.INVALID_OPERATION, "metadata may only be given with CREATE_TABLE")
    if intent.read_version > state.head_version:
        raise _Reject(
            Reason.READ_VERSION_AHEAD,
            f"read version {intent.read_version} is ahead of the head version {state.head_version}",
        )
    altered = state.any_scope[_ALTER]
    if altered is not None and altered[0] > intent.read_version:
        raise _Reject(
            Reason.SCHEMA_CHANGED,
            f"the table's schema or properties changed at version {altered[0]} (txn {altered[1]}), after read "
            f"version {intent.read_version}: read the table again and redo the work against the new schema",
            altered,
        )
    metadata = _check_alter(state, intent) if operation in _ALTERS else None
    scope = _scope(state, intent)
    if metadata is None and intent.metadata is not None:  # a write that changes the schema with its data
        metadata = _check_schema_change(state, intent, scope)
    if operation in _RESTORES:
        restored = _check_restore(state, intent, record_timestamp)
    else:
        if intent.restore_version is not None:
            raise _Reject(Reason.INVALID_OPERATION, f"{operation.value} has no restore version (only RESTORE)")
        _check_files(state, intent, scope)
    _check_batch(state, intent)
    op_class = OP_CLASS[operation]
    rebase = _check_conflicts(state, state.policy, intent.read_version, op_class, scope)

    added = intent.added_files
    if operation in _TRUNCATES:
        removed = _live_in_scope(state, scope)
    elif operation in _REWRITES:
        removed = _resolve_inputs(state, intent)
        _check_rewrite(state, intent, removed, scope)
    elif operation in _RESTORES:
        removed = _restore_removed(state, intent, restored)
    else:
        removed = ()
    version = state.head_version + 1
    time_version = None
    if operation in _DATA_CHANGES:  # a logical change: it gets a time version
        millis = record_timestamp if state.head_time_ms is None else max(record_timestamp, state.head_time_ms + 1)
        if millis > MAX_TIMESTAMP_MS:
            raise _Reject(Reason.MALFORMED_INTENT, "no time version is left after 9999-12-31 for this table")
        time_version = millis_to_datetime(millis)
    return _decision(
        state,
        intent,
        offset,
        {
            "outcome": _ACCEPTED,
            "id_version": version,
            "time_version": time_version,
            "partitions": intent.partitions,
            "added_files": added,
            "removed_files": removed,
            "metadata": metadata,
            "rebase": rebase,
            "operation_metrics": intent.operation_metrics,
        },
    )


def _check_metrics(intent: CommitIntent) -> None:
    """A writer's operation metrics are a claim (since 0.5): ``INVALID_METRICS`` unless each is a name the
    operation may claim (``OperationSpec.metrics``: a MERGE's, on an UPDATE), all of them, each a count in
    0..2**62, and the rows counted are at most the records of the files it adds (each changed row is one record)."""
    operation = intent.operation
    metrics = intent.operation_metrics
    allowed = REGISTRY[operation].metrics
    unknown = sorted(name for name in metrics if name not in allowed)
    if unknown:
        may = f"may claim only {list(allowed)}" if allowed else "claims no metric"
        raise _Reject(Reason.INVALID_METRICS, f"{operation.value} {may}, not {[n[:64] for n in unknown[:4]]}")
    if len(metrics) != len(allowed):
        missing = [name for name in allowed if name not in metrics]
        raise _Reject(Reason.INVALID_METRICS, f"{operation.value} claims {list(allowed)} together: {missing} missing")
    for name in allowed:
        if not 0 <= metrics[name] <= MAX_VERSION:
            raise _Reject(Reason.INVALID_METRICS, f"metric {name} is {metrics[name]}: a count is in 0..2**62")
    rows = sum(metrics.values())
    records = sum(f.record_count for f in intent.added_files)
    if rows > records:
        claimed = ", ".join(f"{name}={metrics[name]}" for name in allowed)
        raise _Reject(
            Reason.INVALID_METRICS,
            f"the metrics count {rows} changed rows ({claimed}) but the commit's files hold {records} records",
        )


def _create(state: TableState, intent: CommitIntent, record_timestamp: int, offset: int) -> CommitDecision:
    if state.metadata is not None:
        raise _Reject(
            Reason.TABLE_EXISTS, f"table {state.table!r} already exists (created at intent offset 0 of its log)"
        )
    metadata = intent.metadata
    if metadata is None:
        raise _Reject(Reason.INVALID_METADATA, "CREATE_TABLE needs metadata (location, schema, primary key)")
    if len(set(metadata.partition_columns)) != len(metadata.partition_columns):
        raise _Reject(Reason.INVALID_METADATA, "partition columns repeat a name")
    try:
        load_policy(metadata.properties.get(POLICY_PROPERTY, DEFAULT_POLICY))
    except PolicyError as exc:
        raise _Reject(Reason.INVALID_METADATA, str(exc)) from None
    if intent.added_files or intent.removed_files:
        raise _Reject(Reason.INVALID_OPERATION, "CREATE_TABLE cannot add or remove files")
    if ROW_ID_COLUMN in metadata.primary_key:
        _check_keyless(metadata)
    return _decision(
        state,
        intent,
        offset,
        {
            "outcome": _ACCEPTED,
            "id_version": 0,
            "time_version": millis_to_datetime(record_timestamp),
            "metadata": metadata,
            "app_id": None,
            "batch_id": None,
        },
    )


def _check_keyless(metadata: TableMetadata) -> None:
    """A keyless table's metadata: the row id column is the whole key, one STRING NOT NULL column of the schema.

    Its files are not read here (the arbiter reads no data file); readers refuse a file without the column.
    """
    if len(metadata.primary_key) != 1:
        raise _Reject(
            Reason.INVALID_METADATA, f"{ROW_ID_COLUMN} is a keyless table's whole key; it cannot be part of a key"
        )
    try:
        columns = parse_ddl(metadata.schema)
    except ValueError as exc:
        raise _Reject(Reason.INVALID_METADATA, f"CREATE_TABLE schema: {exc}") from None
    found = [c for c in columns if c.name.lower() == ROW_ID_COLUMN]
    if len(found) != 1 or found[0].name != ROW_ID_COLUMN or found[0].type != "string" or found[0].nullable:
        raise _Reject(
            Reason.INVALID_METADATA,
            f"a keyless table's schema has exactly one `{ROW_ID_COLUMN}` string NOT NULL column (its row ids)",
        )
    if ROW_ID_COLUMN in metadata.partition_columns or len(columns) < 2:
        raise _Reject(Reason.INVALID_METADATA, f"a keyless table needs data columns besides {ROW_ID_COLUMN}")


# Column types an ALTER_TABLE may add: Spark's atomic types (their DDL names, lower case) and decimal(p,s).
_ADDABLE_TYPES = frozenset(
    {
        "boolean",
        "tinyint",
        "byte",
        "smallint",
        "short",
        "int",
        "integer",
        "bigint",
        "long",
        "float",
        "real",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
    }
)
_DECIMAL = re.compile(r"dec(?:imal)?|numeric|dec(?:imal)?\((\d{1,2}),\s*(\d{1,2})\)|numeric\((\d{1,2}),\s*(\d{1,2})\)")


def _addable_type(type_text: str) -> bool:
    if type_text in _ADDABLE_TYPES:
        return True
    match = _DECIMAL.fullmatch(type_text)
    if match is None:
        return False
    digits = [int(g) for g in match.groups() if g is not None]
    return not digits or (1 <= digits[0] <= 38 and 0 <= digits[1] <= digits[0])


def _check_added_columns(old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...]) -> None:
    """The columns after ``old_columns``: new names, not reserved, nullable, of an atomic type."""
    names = {c.name.lower() for c in old_columns}
    for column in new_columns[len(old_columns) :]:
        name = column.name
        if not name or len(name) > MAX_ID_LENGTH or not name.isprintable():
            raise _Reject(
                Reason.INVALID_METADATA, f"added column name {name[:200]!r} is empty, too long or unprintable"
            )
        lowered = name.lower()
        if lowered in names:
            raise _Reject(Reason.INVALID_METADATA, f"added column {name[:200]!r} repeats a column name")
        if lowered.startswith(RESERVED_PREFIX) or lowered in RESERVED_COLUMNS:
            raise _Reject(Reason.INVALID_METADATA, f"added column {name[:200]!r} uses a name reserved by ordo")
        if not _addable_type(column.type):
            raise _Reject(
                Reason.INVALID_METADATA,
                f"added column {name[:200]!r} has type {column.type[:200]!r}; an added column has an atomic type "
                "(boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), string, binary, date, timestamp)",
            )
        if not column.nullable:
            raise _Reject(
                Reason.INVALID_METADATA,
                f"added column {name[:200]!r} is NOT NULL; an added column must be nullable (older files hold no value)",
            )
        names.add(lowered)


def _check_alter(state: TableState, intent: CommitIntent) -> TableMetadata:
    """Validate an ALTER_TABLE: its metadata is the table's after the change; only additions are supported.

    The schema must keep every column as it is, in order, and may append
    nullable columns of an atomic type with new names (older files hold no
    value for them: they read as NULL). Properties may be set, not unset, and
    ``ordo.*`` properties (policy, buckets) are fixed at creation. Location,
    primary key and partition columns cannot change.
    """
    old = state.metadata
    new = intent.metadata
    assert old is not None
    if new is None:
        raise _Reject(Reason.INVALID_METADATA, "ALTER_TABLE needs metadata: the table's metadata after the change")
    if intent.partitions is not None:
        raise _Reject(Reason.INVALID_PARTITION, "ALTER_TABLE applies to the whole table (partitions must be null)")
    for what, before, after in (
        ("location", old.location, new.location),
        ("primary key", old.primary_key, new.primary_key),
        ("partition columns", old.partition_columns, new.partition_columns),
    ):
        if before != after:
            raise _Reject(Reason.UNSUPPORTED_ALTER, f"ALTER_TABLE cannot change the {what} ({before!r} -> {after!r})")
    try:
        old_columns = parse_ddl(old.schema)
    except ValueError as exc:
        raise _Reject(Reason.UNSUPPORTED_ALTER, f"the table's schema cannot be altered: {exc}") from None
    try:
        new_columns = parse_ddl(new.schema)
    except ValueError as exc:
        raise _Reject(Reason.INVALID_METADATA, f"ALTER_TABLE schema: {exc}") from None
    _check_appended(
        old_columns,
        new_columns,
        "the new schema",
        "dropping, renaming, reordering or retyping columns is not supported (ALTER_TABLE only adds columns)",
    )
    for key in old.properties:
        if key not in new.properties:
            raise _Reject(Reason.UNSUPPORTED_ALTER, f"unsetting property {key[:200]!r} is not supported")
    for key, value in new.properties.items():
        if key.lower().startswith("ordo.") and old.properties.get(key) != value:
            raise _Reject(
                Reason.UNSUPPORTED_ALTER, f"property {key[:200]!r} is fixed when the table is created (it shapes files)"
            )
    if len(new_columns) == len(old_columns) and dict(new.properties) == dict(old.properties):
        raise _Reject(Reason.INVALID_OPERATION, "ALTER_TABLE changes nothing (no column added, no property set)")
    return new


def _check_schema_change(
    state: TableState, intent: CommitIntent, scope: tuple[PartitionKey, ...] | None
) -> TableMetadata:
    """Validate the metadata a write carries (since 0.5): the table's after the write, applied with its files.

    INSERT INTO, or an INSERT OVERWRITE of some partitions (``mergeSchema``):
    the schema keeps every column as it is, in order, and appends nullable
    columns of an atomic type with new names (files written before hold no
    value for them: they read as NULL). An INSERT OVERWRITE of the whole table
    (``overwriteSchema``) removes every live file, so its schema may drop,
    reorder and retype columns, but the primary key and partition columns keep
    their names, types and nullability (the files' layout: buckets and
    partition paths). Location, primary key, partition columns and properties
    do not change with a write (ALTER_TABLE sets properties). The metadata must
    change the schema.
    """
    old = state.metadata
    new = intent.metadata
    assert old is not None and new is not None
    for what, before, after in (
        ("location", old.location, new.location),
        ("primary key", old.primary_key, new.primary_key),
        ("partition columns", old.partition_columns, new.partition_columns),
    ):
        if before != after:
            raise _Reject(
                Reason.UNSUPPORTED_ALTER,
                f"a write's metadata cannot change the {what} ({str(before)[:200]!r} -> {str(after)[:200]!r})",
            )
    if dict(new.properties) != dict(old.properties):
        raise _Reject(Reason.UNSUPPORTED_ALTER, "a write's metadata cannot change properties (ALTER_TABLE sets them)")
    try:
        old_columns = parse_ddl(old.schema)
    except ValueError as exc:
        raise _Reject(Reason.UNSUPPORTED_ALTER, f"the table's schema cannot be changed: {exc}") from None
    try:
        new_columns = parse_ddl(new.schema)
    except ValueError as exc:
        raise _Reject(Reason.INVALID_METADATA, f"the write's schema: {exc}") from None
    if new_columns == old_columns:
        raise _Reject(Reason.INVALID_OPERATION, "the write carries metadata that does not change the schema")
    if scope is None and intent.operation in _TRUNCATES:  # overwriteSchema: every live file is removed
        _check_replaced_schema(old, new, old_columns, new_columns)
    else:
        _check_appended(
            old_columns,
            new_columns,
            "the write's schema",
            "a write that keeps files (INSERT INTO, a partial INSERT OVERWRITE) only adds columns; a new schema "
            "needs an INSERT OVERWRITE of the whole table",
        )
    return new


def _check_appended(
    old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...], schema: str, rule: str
) -> None:
    """The new columns keep every old one as it is, in order, then add valid ones (ALTER_TABLE, mergeSchema)."""
    for i, column in enumerate(old_columns):
        if i >= len(new_columns) or new_columns[i] != column:
            found = f"{new_columns[i].name} {new_columns[i].type}" if i < len(new_columns) else "nothing"
            raise _Reject(
                Reason.UNSUPPORTED_ALTER,
                f"column {i + 1} is {column.name[:200]!r} {column.type[:200]} but {schema} has {found[:400]}: {rule}",
            )
    _check_added_columns(old_columns, new_columns)


def _check_replaced_schema(
    old: TableMetadata, new: TableMetadata, old_columns: tuple[DdlColumn, ...], new_columns: tuple[DdlColumn, ...]
) -> None:
    """A whole-table overwrite's new schema: names unique, printable, not reserved; key and partition columns kept."""
    seen: set[str] = set()
    for column in new_columns:
        name = column.name
        lowered = name.lower()
        if not name or len(name) > MAX_ID_LENGTH or not name.isprintable():
            raise _Reject(Reason.INVALID_METADATA, f"column name {name[:200]!r} is empty, too long or unprintable")
        if lowered in seen:
            raise _Reject(Reason.INVALID_METADATA, f"column {name[:200]!r} repeats a column name")
        if name != ROW_ID_COLUMN and (lowered.startswith(RESERVED_PREFIX) or lowered in RESERVED_COLUMNS):
            raise _Reject(Reason.INVALID_METADATA, f"column {name[:200]!r} uses a name reserved by ordo")
        seen.add(lowered)
    before = {c.name: c for c in old_columns}
    after = {c.name: c for c in new_columns}
    for name in dict.fromkeys((*old.primary_key, *old.partition_columns)):
        if after.get(name) != before.get(name):
            raise _Reject(
                Reason.UNSUPPORTED_ALTER,
                f"key or partition column {name[:200]!r} must keep its name, type and nullability "
                "(files are bucketed and placed by them): create a new table to change them",
            )
    if old.keyless:
        _check_keyless(new)
    if len(new_columns) <= len(old.primary_key) + len(old.partition_columns) - len(
        set(old.primary_key) & set(old.partition_columns)
    ):
        raise _Reject(Reason.INVALID_METADATA, "the new schema has no data column besides the key and partitions")


def partition_key(columns: tuple[str, ...], spec: Mapping[str, str]) -> PartitionKey:
    """Canonical key of a partition spec; ``ValueError`` if it does not name exactly ``columns``."""
    try:
        if len(spec) == len(columns):
            if len(columns) == 1:
                return (spec[columns[0]],)
            return tuple([spec[c] for c in columns])
    except (KeyError, TypeError):
        pass
    shown = dict(spec) if isinstance(spec, Mapping) else spec
    raise ValueError(f"partition {shown!r} does not match partition columns {list(columns)}")


def _scope(state: TableState, intent: CommitIntent) -> tuple[PartitionKey, ...] | None:
    """The partitions the intent read or wrote, or None for the whole table."""
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    partitions = intent.partitions
    if partitions is None:
        return None
    if not columns:
        if any(spec for spec in partitions):
            raise _Reject(Reason.INVALID_PARTITION, f"table {state.table!r} is not partitioned")
        return None
    keys: dict[PartitionKey, None] = {}
    try:
        for spec in partitions:
            keys[partition_key(columns, spec)] = None
    except ValueError as exc:
        raise _Reject(Reason.INVALID_PARTITION, str(exc)) from None
    if not keys:
        raise _Reject(Reason.INVALID_PARTITION, "empty partition list (use null for the whole table)")
    return tuple(keys)


# A path ``invalid_path_reason`` accepts: segments that are not empty, '.' or '..',
# no backslash or NUL anywhere, no ':' in the first segment. Only a fast yes:
# anything it refuses goes through the checks below for the exact reason.
_plainly_valid_path = re.compile(r"(?!\.\.?(?:/|\Z))[^/\\\x00:]+(?:/(?!\.\.?(?:/|\Z))[^/\\\x00]+)*").fullmatch


def invalid_path_reason(path: str) -> str | None:
    """Why ``path`` cannot name a file inside a table location, or None if it can."""
    if _plainly_valid_path(path) is not None:
        return None
    if path.startswith(("/", "\\")) or "\\" in path or "\x00" in path:
        return "must be a relative POSIX path"
    parts = path.split("/")
    if ":" in parts[0]:
        return "must not carry a scheme or drive"
    if any(part in ("", ".", "..") for part in parts):
        return "must not contain empty, '.' or '..' segments"
    return None


def _check_files(state: TableState, intent: CommitIntent, scope: tuple[PartitionKey, ...] | None) -> None:
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    operation = intent.operation
    in_scope = None if scope is None else set(scope)
    live = state.files
    seen: set[str] = set()
    prefixes: dict[PartitionKey, str] = {}
    buckets = table_buckets(state.metadata.properties) if intent.added_files else 1
    for data_file in intent.added_files:
        path = data_file.path
        if data_file.bucket >= buckets:
            raise _Reject(
                Reason.INVALID_BUCKET,
                f"added file {path[:200]!r} is in bucket {data_file.bucket}, but table {state.table!r} has "
                f"{buckets} bucket(s) (ordo.buckets): 0 to {buckets - 1}",
            )
        if _plainly_valid_path(path) is None:
            problem = invalid_path_reason(path)
            if problem:
                raise _Reject(Reason.INVALID_PATH, f"added file {path[:200]!r} {problem}")
        if path in seen or path in live:
            raise _Reject(Reason.INVALID_PATH, f"added file {path[:200]!r} is listed twice or already live")
        seen.add(path)
        try:
            key = partition_key(columns, data_file.partition)
        except ValueError as exc:
            raise _Reject(Reason.INVALID_PARTITION, f"added file {path[:200]!r}: {exc}") from None
        if in_scope is not None and key not in in_scope:
            raise _Reject(Reason.INVALID_PARTITION, f"added file {path[:200]!r} lies outside the intent's partitions")
        layout = split_data_file_path(path)
        if layout is None:
            raise _Reject(
                Reason.INVALID_PATH, f"added file {path[:200]!r} is not named {FILE_NAME_PATTERN} (schemas.paths)"
            )
        prefix = prefixes.get(key)
        if prefix is None:
            prefix = prefixes[key] = partition_path(columns, data_file.partition)
        if layout[0] != prefix:
            raise _Reject(
                Reason.PATH_PARTITION_MISMATCH,
                f"added file {path[:200]!r} lies under {layout[0][:200]!r} but its partition values give "
                f"{prefix[:200]!r}",
            )
        write_id = layout[1]
        if write_id in state.write_ids:
            raise _Reject(
                Reason.PATH_REUSED,
                f"write id {write_id[:256]!r} of added file {path[:200]!r} was already used by an accepted commit "
                "(a path that was live once cannot be added again)",
            )
    if intent.added_files and operation in _ADDS_NO_FILES:
        raise _Reject(Reason.INVALID_OPERATION, f"{operation.value} cannot add files")
    if operation in _REWRITES:
        if not intent.removed_files:
            raise _Reject(Reason.INVALID_OPERATION, f"{operation.value} must name the files it rewrites")
        if len(set(intent.removed_files)) != len(intent.removed_files):
            raise _Reject(Reason.INVALID_OPERATION, "a removed file is listed twice")
        for path in intent.removed_files:
            problem = invalid_path_reason(path)
            if problem:
                raise _Reject(Reason.INVALID_PATH, f"removed file {path[:200]!r} {problem}")
    elif intent.removed_files and operation in _NAMES_NO_REMOVED:
        raise _Reject(
            Reason.INVALID_OPERATION,
            f"{operation.value} is merge-on-read and cannot remove files; write delete records instead",
        )


def _check_batch(state: TableState, intent: CommitIntent) -> None:
    if (intent.app_id is None) != (intent.batch_id is None):
        raise _Reject(Reason.INVALID_OPERATION, "app_id and batch_id must be given together")
    if intent.app_id is None or intent.batch_id is None:
        return
    committed = state.batches.get(intent.app_id)
    if committed is not None and intent.batch_id <= committed[0]:
        raise _Reject(
            Reason.BATCH_ALREADY_COMMITTED,
            f"batch {intent.batch_id} of {intent.app_id!r} is at or below committed batch {committed[0]}",
            (committed[1], f"{intent.app_id}:{committed[0]}"),
        )


def _check_conflicts(
    state: TableState, policy: Policy, read_version: int, later: OpClass, scope: tuple[PartitionKey, ...] | None
) -> Rebase:
    """Apply the matrix to every class with a commit in scope newer than ``read_version``.

    The newest commit of a class in scope is the newest of the whole-table
    commits and of each partition's (or, for a whole-table scope, the newest
    over any scope).
    """
    rebase = Rebase.NONE
    worst: Last | None = None
    if scope is None:
        newest_of = state.any_scope
        lasts: list[list[Last | None]] = []
    else:
        newest_of = state.whole
        partitions = state.partitions
        lasts = [part.last for part in map(partitions.get, scope) if part is not None]
    for earlier in _CLASSES:
        newest = newest_of[earlier]
        for last in lasts:
            candidate = last[earlier]
            if candidate is not None and (newest is None or candidate[0] > newest[0]):
                newest = candidate
        if newest is None or newest[0] <= read_version:
            continue
        resolution = policy.resolve(earlier, later)
        if resolution is _LATER_FAILS:
            if worst is None or newest[0] > worst[0]:
                worst = newest
        elif resolution is not Resolution.NO_CONFLICT:
            rebase = REBASE_OF[resolution]
    if worst is not None:
        raise _Reject(
            Reason.CONFLICT_LATER_FAILS,
            f"conflicts with concurrent txn {worst[1]} committed at version {worst[0]} "
            f"(read version {read_version}, policy {policy.name})",
            worst,
        )
    return rebase


def _check_rewrite(
    state: TableState, intent: CommitIntent, removed: tuple[str, ...], scope: tuple[PartitionKey, ...] | None
) -> None:
    """A rewrite stays in its scope; MAJOR_COMPACT and CLUSTER rewrite every file of each partition they touch.

    ``removed`` are the inputs after lineage rebase (all live). Every one must
    lie in a partition of the declared scope, and so must every output's
    partition be one the inputs came from (a rewrite moves no rows between
    partitions). MAJOR_COMPACT and CLUSTER drop delete records and superseded
    rows, which is only correct when every file of the partition holding data
    the rewrite read (data version at or below its read version) is an input:
    otherwise a dropped delete would resurrect its key from a file left behind.
    Files that only hold data committed after the read version may stay.
    Costs O(live files of the partitions touched).
    """
    files = state.files
    in_scope = None if scope is None else set(scope)
    touched: dict[PartitionKey, None] = {}
    for path in removed:
        key = files[path]
        if key not in touched:
            if in_scope is not None and key not in in_scope:
                raise _Reject(
                    Reason.FILE_OUTSIDE_SCOPE,
                    f"removed file {path[:200]!r} lies in partition {list(key)!r}, outside the intent's partitions",
                )
            touched[key] = None
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    for data_file in intent.added_files:
        key = partition_key(columns, data_file.partition)  # validated by _check_files
        if key not in touched:
            raise _Reject(
                Reason.FILE_OUTSIDE_SCOPE,
                f"added file {data_file.path[:200]!r} lies in partition {list(key)!r}, "
                f"where {intent.operation.value} rewrites no file",
            )
    if intent.operation not in _WHOLE_PARTITIONS:
        return
    gone = set(removed)
    versions = state.data_versions
    read_version = intent.read_version
    partitions = state.partitions
    for key in touched:
        for path in partitions[key].live:
            if path not in gone and versions[path] <= read_version:
                raise _Reject(
                    Reason.INCOMPLETE_REWRITE,
                    f"{intent.operation.value} leaves live file {path[:200]!r} of partition {list(key)!r} "
                    f"(data of version {versions[path]} <= read version {read_version}); it must rewrite "
                    "every file of each partition it touches",
                )


def restore_retention_ms(metadata: TableMetadata) -> int:
    """The table's ``ordo.retention_hours`` in ms (the default when absent or not a number >= 0)."""
    text = metadata.properties.get(RETENTION_PROPERTY)
    try:
        hours = float(text) if text is not None else DEFAULT_RETENTION_HOURS
    except ValueError:
        hours = DEFAULT_RETENTION_HOURS
    return int(hours * 3_600_000) if 0 <= hours <= 1e9 else DEFAULT_RETENTION_HOURS * 3_600_000


def _live_at(stays: tuple[tuple[int, int, int], ...], version: int) -> tuple[int, int, int] | None:
    for stay in stays:
        if stay[0] <= version < stay[1]:
            return stay
    return None


def _check_restore(state: TableState, intent: CommitIntent, record_timestamp: int) -> set[str]:
    """A RESTORE re-adds only files this table had live at its restore version N and vacuum cannot have deleted.

    Checked as if the writer were hostile: N lies between 0 and the read
    version; the intent names the whole table and no removed file (the
    arbiter removes them); each added file is not live now, was live at N (a
    stay in ``state.gone``) in the partition it names, in a bucket of the
    table, and was removed less than the table's retention before this intent
    (else ``FILE_VACUUMED``: ``ordo vacuum`` may have deleted it). Returns the
    re-added paths. Costs O(files it re-adds).
    """
    version = intent.restore_version
    if version is None or not 0 <= version <= intent.read_version:
        raise _Reject(
            Reason.INVALID_RESTORE_VERSION,
            f"RESTORE needs a restore version between 0 and its read version {intent.read_version}, not {version}",
        )
    if intent.partitions is not None:
        raise _Reject(Reason.INVALID_PARTITION, "RESTORE applies to the whole table (partitions must be null)")
    if intent.removed_files:
        raise _Reject(
            Reason.INVALID_OPERATION, "RESTORE names no removed files: the arbiter removes every file not live at N"
        )
    if version < state.restore_floor:
        raise _Reject(
            Reason.FILE_VACUUMED,
            f"version {version} is no longer restorable: files live at it were removed before version "
            f"{state.restore_floor}, longer than the table's retention ago, and may be vacuumed",
        )
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    buckets = table_buckets(state.metadata.properties) if intent.added_files else 1
    horizon = record_timestamp - state.retention_ms
    live, gone = state.files, state.gone
    restored: set[str] = set()
    for data_file in intent.added_files:
        path = data_file.path
        if path in restored or path in live:
            raise _Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} is listed twice or live at the head (RESTORE re-adds removed files)",
            )
        restored.add(path)
        entry = gone.get(path)
        stay = None if entry is None else _live_at(entry[1], version)
        if entry is None or stay is None:
            raise _Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} was not live at version {version} of this table",
            )
        try:
            key = partition_key(columns, data_file.partition)
        except ValueError as exc:
            raise _Reject(Reason.INVALID_PARTITION, f"re-added file {path[:200]!r}: {exc}") from None
        if key != entry[0]:
            raise _Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} names partition {list(key)!r}; it was live in {list(entry[0])!r}",
            )
        if data_file.bucket >= buckets:
            raise _Reject(
                Reason.INVALID_BUCKET, f"re-added file {path[:200]!r} is in bucket {data_file.bucket} of {buckets}"
            )
        if stay[2] < horizon:
            raise _Reject(
                Reason.FILE_VACUUMED,
                f"re-added file {path[:200]!r} was removed at version {stay[1]}, longer than the table's retention "
                f"({RETENTION_PROPERTY}) before this RESTORE: vacuum may have deleted it",
            )
    return restored


def _restore_removed(state: TableState, intent: CommitIntent, restored: set[str]) -> tuple[str, ...]:
    """The files a RESTORE removes (live at the head, not at N); rejects it unless the result is version N's files.

    After the rebase (an earlier INSERT or UPDATE's files are removed like
    any file not live at N), every file live at N must be live at the head or
    re-added: a commit since the read version that removed one (a compaction,
    an overwrite) makes the intent stale. Costs O(live files + files removed
    within the retention): a RESTORE is rare and whole-table.
    """
    version = intent.restore_version
    assert version is not None
    gone, live = state.gone, state.files
    removed = []
    for path, added in state.added_at.items():
        if added > version:
            entry = gone.get(path)
            if entry is None or _live_at(entry[1], version) is None:
                removed.append(path)
    for path, (_, stays) in gone.items():
        if path not in live and path not in restored:
            stay = _live_at(stays, version)
            if stay is not None:
                raise _Reject(
                    Reason.NOT_LIVE_AT_VERSION,
                    f"file {path[:200]!r} was live at version {version} but is neither live nor re-added (removed "
                    f"at version {stay[1]}): read the table again and restore from there",
                )
    removed.sort()
    return tuple(removed)


def _live_in_scope(state: TableState, scope: tuple[PartitionKey, ...] | None) -> tuple[str, ...]:
    if scope is None:
        return tuple(sorted(state.files))
    found: list[str] = []
    for key in scope:
        part = state.partitions.get(key)
        if part is not None:
            found.extend(part.live)
    return tuple(sorted(found))


def _resolve_inputs(state: TableState, intent: CommitIntent) -> tuple[str, ...]:
    """Rebase a compaction's inputs on the head (docs/conflicts.md, compaction_completes).

    An input still live is removed as given. An input rewritten since the read
    version by an earlier compaction is replaced by that compaction's outputs,
    but only if that compaction consumed nothing but inputs of this one;
    otherwise the rewrite cannot be proven correct and the intent is rejected.
    """
    files = state.files
    wanted = set(intent.removed_files)
    removed: list[str] = []
    pending = list(intent.removed_files)
    while pending:
        path = pending.pop()
        if path in files:
            removed.append(path)
            continue
        origin = state.lineage.get(path)
        if origin is None or origin.version <= intent.read_version:
            raise _Reject(Reason.FILE_NOT_LIVE, f"removed file {path[:200]!r} is not live at the head")
        if not origin.inputs <= wanted:
            raise _Reject(
                Reason.CONFLICT_COMPACTION_LINEAGE,
                f"input {path[:200]!r} was rewritten by txn {origin.txn_id} (version {origin.version}) "
                "together with files this compaction did not read",
                (origin.version, origin.txn_id),
            )
        for output in origin.outputs:
            if output not in wanted:
                wanted.add(output)
                pending.append(output)
    removed.sort()
    return tuple(removed)


# --------------------------------------------------------------------------- apply


def apply(
    state: TableState, decision: CommitDecision, encoded: bytes | None = None, *, chain: bytes | None = None
) -> TableState:
    """Fold one decision into ``state`` (in place) and return it.

    ``encoded`` is the decision's record bytes, hashed into the chain; when not
    given the decision is encoded here. ``chain``: their hash, when the caller
    has it already (a rebuild's ``check`` computed it).
    """
    if chain is None:
        chain = chain_hash(encoded if encoded is not None else encode(decision))
    state.chain = chain
    state.last_intent_offset = decision.intent_offset
    state.decisions += 1
    if decision.duplicate_of is not None:
        return state
    if decision.txn_id:
        _remember(state, decision)
    if decision.outcome is not _ACCEPTED:
        return state
    operation = decision.operation
    version = decision.id_version
    assert operation is not None and version is not None, "accepted decision without operation or version"
    state.head_version = version
    if decision.time_version is not None:
        state.head_time_ms = datetime_to_millis(decision.time_version)
    if operation in _CREATES:
        assert decision.metadata is not None
        state.metadata = decision.metadata
        state.policy = table_policy(decision.metadata)  # keyless: concurrent appends never conflict
        state.retention_ms = restore_retention_ms(decision.metadata)
        return state
    schema_changed = False
    if operation in _CARRIES_METADATA:  # ALTER_TABLE: the new metadata (no files); its class is recorded below
        assert decision.metadata is not None
        state.metadata = decision.metadata
    elif decision.metadata is not None:  # a write that changed the schema with its data (since 0.5)
        state.metadata = decision.metadata
        schema_changed = True
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    files = state.files
    partitions = state.partitions
    versions = state.data_versions
    rewrite = operation in _REWRITES
    oldest: dict[PartitionKey, int] = {}  # a rewrite's outputs hold data as old as their inputs'
    added_at = state.added_at
    if decision.removed_files:
        _forget_stays(state)
        gone = state.gone
        gone_order = state.gone_order
        removed_ms = state.head_time_ms
        assert removed_ms is not None
        for path in decision.removed_files:
            key = files.pop(path)
            partitions[key].live.discard(path)
            data_version = versions.pop(path)
            if rewrite and data_version < oldest.get(key, version):
                oldest[key] = data_version
            stay = (added_at.pop(path), version, removed_ms)
            entry = gone.get(path)
            gone[path] = (key, (stay,) if entry is None else (*entry[1], stay))
            gone_order.append((removed_ms, version, path))
    fallback = min(oldest.values()) if oldest else version
    write_ids = state.write_ids
    txn_id = decision.txn_id
    for data_file in decision.added_files:
        path = data_file.path
        key = partition_key(columns, data_file.partition)
        part = partitions.get(key)
        if part is None:
            part = partitions[key] = PartitionState()
        part.live.add(path)
        files[path] = key
        added_at[path] = version
        versions[path] = oldest.get(key, fallback) if rewrite else version
        write_id = write_id_of(path)
        if write_id is not None:  # a name an older writer chose freely is skipped: apply never rejects
            # The txn id's own string when equal: shared with the dedupe window, in memory and in checkpoints.
            write_ids.add(txn_id if write_id == txn_id else write_id)
    if rewrite:
        _record_lineage(state, decision, version)
    last: Last = (version, decision.txn_id)
    cls = OP_CLASS[operation]
    state.any_scope[cls] = last
    if schema_changed:  # older snapshots are stale as after an ALTER_TABLE: their intents get SCHEMA_CHANGED
        state.any_scope[_ALTER] = last
    if decision.partitions is None or not columns:
        state.whole[cls] = last
    else:
        for spec in decision.partitions:
            key = partition_key(columns, spec)
            part = partitions.get(key)
            if part is None:
                part = partitions[key] = PartitionState()
            part.last[cls] = last
    if decision.app_id is not None and decision.batch_id is not None:
        state.batches[decision.app_id] = (decision.batch_id, version)
    return state


def _forget_stays(state: TableState) -> None:
    """Drop the removals older than the retention before the head's time; RESTORE cannot reach before them."""
    order = state.gone_order
    if state.head_time_ms is None:
        return
    horizon = state.head_time_ms - state.retention_ms
    gone = state.gone
    while order and order[0][0] < horizon:
        _, removed_version, path = order.popleft()
        key, stays = gone[path]
        kept = tuple(s for s in stays if s[1] != removed_version)
        if kept:
            gone[path] = (key, kept)
        else:
            del gone[path]
        if removed_version > state.restore_floor:
            state.restore_floor = removed_version


def _remember(state: TableState, decision: CommitDecision) -> None:
    txns = state.txns
    txns[decision.txn_id] = TxnRecord(
        decision.intent_offset,
        decision.outcome,
        decision.id_version,
        decision.time_version,
        decision.reason,
        decision.message,
        decision.conflicting_txn_id,
        decision.conflicting_version,
    )
    if len(txns) > DEDUPE_WINDOW:
        txns.popitem(last=False)


def _record_lineage(state: TableState, decision: CommitDecision, version: int) -> None:
    entry = Lineage(
        version, decision.txn_id, frozenset(decision.removed_files), tuple(f.path for f in decision.added_files)
    )
    for path in decision.removed_files:
        state.lineage[path] = entry
    order = state.lineage_order
    order.append(entry)
    horizon = version - LINEAGE_WINDOW
    while order and order[0].version < horizon:
        old = order.popleft()
        for path in old.inputs:
            if state.lineage.get(path) is old:
                del state.lineage[path]


def decide(
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int
) -> tuple[CommitDecision, TableState]:
    """``evaluate`` then ``apply``: the decision for ``intent`` and the state after it."""
    decision = evaluate(state, intent, record_timestamp, offset)
    return decision, apply(state, decision)


# --------------------------------------------------------------------------- rebuild


def log_head(state: TableState) -> LogHead:
    """The head of the decisions log ``state`` is a fold of (``schemas.decisionlog``)."""
    return LogHead(
        state.table,
        state.chain,
        state.last_intent_offset,
        state.head_version,
        state.head_time_ms,
        state.metadata,
        state.decisions,
    )


def fold_record(state: TableState, value: bytes | None, offset: int) -> CommitDecision:
    """Check the decisions-log record at ``offset``, then fold it into ``state``: the rebuild's step.

    The record must keep the log's invariants (``schemas.decisionlog.check``)
    and fit the state's live files: every file it removes is live
    (``NOT_LIVE``), no file it adds is (``ALREADY_LIVE``). Otherwise
    ``BrokenLogError`` is raised and ``state`` is unchanged; for a skippable
    kind (a later decision for an intent already decided) the reader goes on.
    The live path never comes here: ``apply`` folds the arbiter's own decisions.
    """
    step = check(log_head(state), value, offset)
    decision = step.decision
    if decision.outcome is _ACCEPTED and decision.duplicate_of is None:
        files = state.files
        removed = decision.removed_files
        if removed:
            live = sum(1 for path in removed if path in files)
            if live != len(removed):
                raise not_live(decision, live, offset)
        for data_file in decision.added_files:
            if data_file.path in files and data_file.path not in removed:
                raise already_live(decision, repr(data_file.path), offset)
    apply(state, decision, value, chain=step.head.chain)
    return decision


def rebuild(table: str, decisions: Iterable[bytes]) -> TableState:
    """Fold a table's decision records (bytes, in log order) into a fresh state, as every reader does.

    A later decision for an intent offset already decided is skipped; any
    other broken invariant raises ``BrokenLogError``.
    """
    state = new_state(table)
    for offset, data in enumerate(decisions):
        try:
            fold_record(state, data, offset)
        except BrokenLogError as exc:
            if not exc.kind.skippable:
                raise
    return state


__all__ = [
    "DEDUPE_WINDOW",
    "GENESIS_HASH",
    "LINEAGE_WINDOW",
    "DataFile",
    "Reason",
    "TableState",
    "apply",
    "datetime_to_millis",
    "decide",
    "evaluate",
    "evaluate_record",
    "fold_record",
    "invalid_path_reason",
    "log_head",
    "millis_to_datetime",
    "new_state",
    "partition_key",
    "rebuild",
    "reject_malformed",
    "restore_retention_ms",
]
