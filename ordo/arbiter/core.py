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
fold (``arbiter.state``); ``apply`` updates it in place so that a decision
costs O(files and partitions it touches), never a scan of history or of the
live file set.

What differs per operation is not here: ``evaluate`` runs what every intent
shares, then the operation's rules, registered in ``arbiter.rules.CHECKS``;
``apply`` does what every decision shares, then the operation's fold step,
``arbiter.rules.FOLD`` (``arbiter.ops`` registers both, one module per family
of operations; docs/architecture.md "Operations as registered behaviour").
"""

from __future__ import annotations

from collections.abc import Iterable

from ordo.arbiter import ops  # registers every operation's rules and fold step
from ordo.arbiter.rules import CHECKS, FOLD, Attempt, Reject, Release, check_metrics, invalid_path_reason
from ordo.arbiter.rules import _plainly_valid_path as _plainly_valid_path
from ordo.arbiter.state import (
    DEDUPE_WINDOW,
    LINEAGE_WINDOW,
    RETENTION_PROPERTY,
    Lineage,
    PartitionState,
    TableState,
    TxnRecord,
    new_state,
    partition_key,
    restore_retention_ms,
)
from ordo.schemas import CodecError, CommitDecision, CommitIntent, DataFile, Outcome, Reason, Rebase, chain_hash, encode
from ordo.schemas.codec import DEFAULT_CODEC, HEADER_LEN, trusted
from ordo.schemas.decisionlog import GENESIS_HASH, BrokenLogError, LogHead, already_live, check, not_live
from ordo.schemas.models import datetime_to_millis, millis_to_datetime
from ordo.schemas.operations import REGISTRY

assert ops  # imported for its registrations
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant a datetime holds
_MALFORMED_INTENT = str(Reason.MALFORMED_INTENT)
_ACCEPTED = Outcome.ACCEPTED
_DATA_CHANGES = frozenset(op for op, spec in REGISTRY.items() if spec.data_change)  # decisions with a time version
# The hot path's dispatch: the tables as plain dicts, once every handler is registered (``ops`` imported above).
_RULES = CHECKS.resolved()
_FOLD_STEPS = FOLD.resolved()

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


# --------------------------------------------------------------------------- evaluate


def evaluate(
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int, *, rules: Release | None = None
) -> CommitDecision:
    """Decide one intent against ``state`` without changing it.

    ``record_timestamp`` is the intent record's Kafka timestamp in milliseconds,
    ``offset`` its position in the intents log. ``rules``: the release of the schema the intent was written
    with when older than the current one, so it is decided by the rules of its time (a write carrying metadata
    is refused before 0.5, as it was then), and replays of older logs re-derive what was logged.
    """
    previous = state.txns.get(intent.txn_id)
    if previous is not None:
        return _repeat(state, intent, offset, previous)
    try:
        if not 0 <= record_timestamp <= MAX_TIMESTAMP_MS:
            # Any producer may set a record's CreateTime; a time version must be a real instant.
            raise Reject(
                Reason.MALFORMED_INTENT,
                f"record timestamp {record_timestamp} ms is outside 1970-01-01..9999-12-31 (no time version possible)",
            )
        return _accept(state, intent, record_timestamp, offset, rules)
    except Reject as rejection:
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
    return evaluate(state, intent, record_timestamp, offset, rules=_rules_of(value))


_read_intent = DEFAULT_CODEC.read_intent


def _rules_of(value: bytes) -> Release | None:
    """The release whose schema ``value`` was written with (None: the current schema, or one of no release)."""
    release = DEFAULT_CODEC.releases.get(bytes(value[2:HEADER_LEN]))
    if release is None:
        return None
    major, minor = release.split(".")
    return int(major), int(minor)


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


def _reject(state: TableState, intent: CommitIntent, offset: int, rejection: Reject) -> CommitDecision:
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
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int, rules: Release | None = None
) -> CommitDecision:
    """Every intent's rules, then its operation's (``CHECKS``); the accepted decision, or ``Reject`` raised."""
    if intent.table != state.table:
        raise Reject(
            Reason.TABLE_MISMATCH, f"intent names table {intent.table!r} but was published for {state.table!r}"
        )
    if intent.operation_metrics:
        check_metrics(intent)
    attempt = Attempt(state, intent, record_timestamp, rules)
    _RULES[intent.operation](attempt)
    time_version = None
    if intent.operation in _DATA_CHANGES:  # a logical change: it gets a time version
        millis = record_timestamp if state.head_time_ms is None else max(record_timestamp, state.head_time_ms + 1)
        if millis > MAX_TIMESTAMP_MS:
            raise Reject(Reason.MALFORMED_INTENT, "no time version is left after 9999-12-31 for this table")
        time_version = millis_to_datetime(millis)
    return _decision(
        state,
        intent,
        offset,
        {
            "outcome": _ACCEPTED,
            "id_version": state.head_version + 1,
            "time_version": time_version,
            "partitions": attempt.partitions,
            "added_files": intent.added_files,
            "removed_files": attempt.removed,
            "metadata": attempt.metadata,
            "rebase": attempt.rebase,
            "app_id": attempt.app_id,
            "batch_id": attempt.batch_id,
            "operation_metrics": intent.operation_metrics,
        },
    )


# --------------------------------------------------------------------------- apply


def apply(
    state: TableState, decision: CommitDecision, encoded: bytes | None = None, *, chain: bytes | None = None
) -> TableState:
    """Fold one decision into ``state`` (in place) and return it.

    ``encoded`` is the decision's record bytes, hashed into the chain; when not
    given the decision is encoded here. ``chain``: their hash, when the caller
    has it already (a rebuild's ``check`` computed it). An accepted decision's
    effect is its operation's fold step (``FOLD``).
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
    _FOLD_STEPS[operation](state, decision, version)
    return state


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


def decide(
    state: TableState, intent: CommitIntent, record_timestamp: int, offset: int
) -> tuple[CommitDecision, TableState]:
    """``evaluate`` then ``apply``: the decision for ``intent`` and the state after it."""
    decision = evaluate(state, intent, record_timestamp, offset)
    return decision, apply(state, decision)


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
    "RETENTION_PROPERTY",
    "DataFile",
    "Lineage",
    "PartitionState",
    "Reason",
    "TableState",
    "TxnRecord",
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
