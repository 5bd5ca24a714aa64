"""A table's decisions log, read: one fold with one set of invariants, for every reader.

Every reader of a decisions log checks each record with ``check`` and folds it
on a ``LogHead``: the arbiter rebuilding its state (``arbiter.core.fold_record``),
the consumer materializing its catalog (``consumer.store``), and ``ordo replay
--verify`` (``fold(..., collect=True)``, through ``arbiter.replay``). Signatures
are checked before, by ``schemas.signing.ChainVerifier``: a record reaches the
fold only once a trusted signature vouched for it. Pure: no Kafka, no clock.

The invariants, in the order ``check`` tests them (``LogProblem`` names each):

1. the record decodes (``UNDECODABLE``) to a ``CommitDecision`` (``NOT_DECISION``)
   of this table (``WRONG_TABLE``);
2. its intent offset is above the last decided one. A record for the same
   intent offset (``REPEATED_INTENT``) or an earlier one (``REORDERED``) is
   *skippable*: readers skip it, because the first decision in log order for an
   intent offset is the decision (docs/tansu.md); an audit reports it;
3. ``prev_hash`` is the SHA-256 of the previous decision record folded
   (``GENESIS_HASH`` for the first) (``CHAIN``);
4. an accepted decision that is not a repeat names its operation and ID
   version (``INCOMPLETE``); ``CREATE_TABLE`` comes first (``NO_CREATE``) and
   once (``SECOND_CREATE``); ID versions run 0, 1, 2, ... (``VERSION_GAP``
   when some are missing, ``VERSION_REUSED`` when one repeats or goes back);
   a decision has a time version exactly when its operation changes data, and
   time versions strictly increase (``TIME_VERSION``, one problem when both
   rules fail); ``CREATE_TABLE`` and ``ALTER_TABLE`` carry metadata
   (``NO_METADATA``); an added file's partition names exactly the partition
   columns of the metadata before the record (``PARTITION``); no file is
   removed or added twice in one decision (``NOT_LIVE``, ``ALREADY_LIVE``).
   Every accepted commit that carries metadata sets the table's metadata.

A record naming another table is checked no further than the chain: its
intent offset counts in that table's intents topic. Every other problem a
record has is reported (``fold(collect=True)``), each kind once.

Which files are live is each reader's own state (the arbiter's memory, the
catalog's rows): a removed file that is not live raises ``not_live`` and an
added file that is already live ``already_live``, with the same kinds.

A ``BrokenLogError`` says where (record offset, intent offset) and which
invariant; its ``str`` starts with the kind (``chain: hash chain broken: ...``)
so that a stop reason stored as text still tells it (``LogProblem.of``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from ordo.schemas.codec import chain_hash, decode
from ordo.schemas.dispatch import OperationTable
from ordo.schemas.errors import CodecError, OrdoError
from ordo.schemas.models import CommitDecision, Outcome, TableMetadata, datetime_to_millis
from ordo.schemas.operations import REGISTRY, Operation

GENESIS_HASH = bytes(32)  # the prev_hash of a table's first decision

_ACCEPTED = Outcome.ACCEPTED
_CREATE = Operation.CREATE_TABLE
_DATA_CHANGES = frozenset(op for op, t in REGISTRY.items() if t.data_change)


class LogProblem(enum.StrEnum):
    """Which invariant of a decisions log a record breaks."""

    UNDECODABLE = "undecodable"  # empty, or not a record of any known schema
    NOT_DECISION = "not_decision"  # a record of another event type (an intent)
    WRONG_TABLE = "wrong_table"  # a decision of another table
    REPEATED_INTENT = "repeated_intent"  # a second decision for the intent offset decided last (skippable)
    REORDERED = "reordered"  # a decision for an intent offset below the last decided one (skippable)
    CHAIN = "chain"  # prev_hash is not the hash of the previous record folded
    INCOMPLETE = "incomplete"  # accepted without an operation or an ID version
    NO_CREATE = "no_create"  # an accepted commit before CREATE_TABLE
    SECOND_CREATE = "second_create"  # CREATE_TABLE accepted again
    VERSION_GAP = "version_gap"  # ID versions skipped
    VERSION_REUSED = "version_reused"  # an ID version repeated or going back
    TIME_VERSION = "time_version"  # a time version missing, unexpected or not increasing
    NO_METADATA = "no_metadata"  # CREATE_TABLE or ALTER_TABLE without metadata
    PARTITION = "partition"  # an added file's partition does not name exactly the partition columns
    NOT_LIVE = "not_live"  # a removed file is not live
    ALREADY_LIVE = "already_live"  # an added file is live already
    LOST = "lost"  # the log no longer holds records a reader folded (a lost or recreated topic)

    @property
    def skippable(self) -> bool:
        """True for a later decision for an intent offset already decided: readers skip it."""
        return self in _SKIPPABLE

    @classmethod
    def of(cls, text: str | None) -> LogProblem | None:
        """The kind a stop reason stored as text starts with (``str(BrokenLogError)``), or None."""
        if not text:
            return None
        head, colon, _ = text.partition(":")
        try:
            return cls(head) if colon else None
        except ValueError:
            return None


_SKIPPABLE = frozenset({LogProblem.REPEATED_INTENT, LogProblem.REORDERED})


class BrokenLogError(OrdoError):
    """Raised when a decisions-log record breaks an invariant of the log (``kind`` says which)."""

    def __init__(
        self, kind: LogProblem, message: str, *, offset: int | None = None, intent_offset: int | None = None
    ) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind
        self.message = message
        self.offset = offset
        self.intent_offset = intent_offset


class LogHead(NamedTuple):
    """What the invariants need to know of a log folded up to some record (and no more). Immutable."""

    table: str
    chain: bytes = GENESIS_HASH  # hash of the last record folded
    last_intent_offset: int = -1
    version: int = -1  # the head ID version (-1: no CREATE_TABLE yet)
    time_ms: int | None = None  # the time version of the last commit that changed data
    metadata: TableMetadata | None = None
    decisions: int = 0  # decision records folded

    @property
    def created(self) -> bool:
        """True once CREATE_TABLE was folded."""
        return self.metadata is not None


@dataclass(frozen=True, slots=True)
class Step:
    """One record checked: its decision and the head after it."""

    decision: CommitDecision
    head: LogHead


@dataclass
class Folded:
    """What ``fold`` found: the head after the last record, and the problems met (in log order)."""

    head: LogHead
    problems: list[BrokenLogError] = field(default_factory=list)


def check(head: LogHead, value: bytes | None, offset: int) -> Step:
    """Check the record at ``offset`` against ``head``; its decision and the next head, else ``BrokenLogError``.

    A skippable problem (``kind.skippable``) is raised too: the reader skips
    the record and keeps ``head`` as it was.
    """
    decision, problems, after = _inspect(head, value, offset)
    if problems:
        raise problems[0]
    assert decision is not None
    return Step(decision, after)


def fold(head: LogHead, records: Iterable[tuple[int, bytes | None]], *, collect: bool = False) -> Folded:
    """Fold ``(offset, value)`` records from ``head``.

    Strict (default): a skippable record is skipped (and listed in
    ``problems``), any other problem raises ``BrokenLogError``. With
    ``collect`` nothing raises: every problem of every record is listed (the
    chain break first) and the fold re-synchronizes on the record as it
    stands -- the chain continues from every decision record, the intent
    offset from each one in order, versions from each accepted one -- so
    each problem is reported once, where it is.
    """
    result = Folded(head)
    for offset, value in records:
        _, problems, after = _inspect(result.head, value, offset)
        if not problems:
            result.head = after
            continue
        if collect:
            result.problems.extend(sorted(problems, key=lambda p: p.kind is not LogProblem.CHAIN))
            result.head = after
        elif problems[0].kind.skippable:
            result.problems.append(problems[0])
        else:
            raise problems[0]
    return result


def not_live(decision: CommitDecision, live: int, offset: int | None) -> BrokenLogError:
    """The error for a decision that removes files of which only ``live`` are live (the reader counted)."""
    removes = f"removes {len(decision.removed_files)} files but only {live} of them are live"
    return _file_error(LogProblem.NOT_LIVE, decision, removes, offset)


def already_live(decision: CommitDecision, what: str, offset: int | None) -> BrokenLogError:
    """The error for a decision that adds a file that is live already (``what`` names it, or how it was found)."""
    return _file_error(LogProblem.ALREADY_LIVE, decision, f"adds a file that is live already: {what}", offset)


def _file_error(kind: LogProblem, decision: CommitDecision, what: str, offset: int | None) -> BrokenLogError:
    return BrokenLogError(
        kind, f"version {decision.id_version} {what}", offset=offset, intent_offset=decision.intent_offset
    )


def _inspect(
    head: LogHead, value: bytes | None, offset: int
) -> tuple[CommitDecision | None, list[BrokenLogError], LogHead]:
    """The record's decision, every problem it has (in ``check``'s order) and the head after it, re-synchronized."""
    if value is None:
        return (
            None,
            [BrokenLogError(LogProblem.UNDECODABLE, "empty record (no value) in the decisions log", offset=offset)],
            head,
        )
    try:
        decision = decode(value)
    except CodecError as exc:
        return (
            None,
            [BrokenLogError(LogProblem.UNDECODABLE, f"undecodable decision record: {exc}", offset=offset)],
            head,
        )
    if not isinstance(decision, CommitDecision):
        found = type(decision).__name__
        return (
            None,
            [BrokenLogError(LogProblem.NOT_DECISION, f"expected a CommitDecision, found a {found}", offset=offset)],
            head,
        )
    intent = decision.intent_offset
    problems: list[BrokenLogError] = []
    chain = chain_hash(value)
    if decision.table != head.table:
        _add(problems, LogProblem.WRONG_TABLE, f"decision names table {decision.table!r}, not {head.table!r}")
    elif intent <= head.last_intent_offset:
        last = head.last_intent_offset
        if intent == last:
            _add(
                problems, LogProblem.REPEATED_INTENT, f"a second decision for intent offset {intent} (already decided)"
            )
        else:
            _add(problems, LogProblem.REORDERED, f"decision for intent offset {intent} after one for {last}")
    if decision.prev_hash != head.chain:
        got = "none" if decision.prev_hash is None else decision.prev_hash.hex()
        _add(
            problems,
            LogProblem.CHAIN,
            f"hash chain broken: prev_hash {got} does not match the hash {head.chain.hex()} of the previous decision record",
        )
    if problems and problems[0].kind in _STOP_THERE:
        return decision, _located(problems, offset, intent), _replace_chain(head, chain)
    version, time_ms, metadata = head.version, head.time_ms, head.metadata
    if decision.outcome is _ACCEPTED and decision.duplicate_of is None:
        operation, id_version = decision.operation, decision.id_version
        if operation is None or id_version is None:
            _add(problems, LogProblem.INCOMPLETE, "accepted decision without operation or ID version")
        else:
            if operation is _CREATE:
                if head.metadata is not None:
                    _add(problems, LogProblem.SECOND_CREATE, "a second CREATE_TABLE was accepted")
            elif head.metadata is None:
                _add(problems, LogProblem.NO_CREATE, f"{operation.value} accepted before CREATE_TABLE")
            if id_version != version + 1:
                _add(
                    problems,
                    LogProblem.VERSION_GAP if id_version > version + 1 else LogProblem.VERSION_REUSED,
                    f"ID version {id_version} does not follow the head version {version}",
                )
            own = decision.time_version
            time_problems = _time_problems(operation, id_version, own, time_ms)
            if time_problems:  # both rules may fail: one problem, both named (a verdict names each kind once)
                _add(problems, LogProblem.TIME_VERSION, "; ".join(time_problems))
            if own is not None:
                time_ms = datetime_to_millis(own)
            metadata = _METADATA_STEPS[operation](problems, decision, metadata)
            if decision.added_files or decision.removed_files:
                # Against the metadata in force before this record: none for a table's first CREATE_TABLE, whose
                # files (no reader adds them) are then not checked; a write's new metadata keeps the partitions.
                _check_files(problems, decision, head.metadata)
            version = id_version
    after = LogHead(head.table, chain, intent, version, time_ms, metadata, head.decisions + 1)
    return decision, _located(problems, offset, intent) if problems else problems, after


def _time_problems(operation: Operation, id_version: int, own: datetime | None, last_ms: int | None) -> list[str]:
    """What is wrong with an accepted commit's time version: it has one exactly when its operation changes data,
    and it is above the last one (two rules, checked separately)."""
    found = []
    changes = operation in _DATA_CHANGES
    if changes and own is None:
        found.append(f"{operation.value} at version {id_version} has no time version")
    elif not changes and own is not None:
        found.append(f"{operation.value} at version {id_version} carries a time version")
    if own is not None and last_ms is not None and datetime_to_millis(own) <= last_ms:
        found.append(f"time version {own.isoformat()} does not increase over the previous one")
    return found


MetadataStep = Callable[[list[BrokenLogError], CommitDecision, "TableMetadata | None"], "TableMetadata | None"]
# The table's metadata after an accepted decision, per operation (the fold's step: ``schemas.dispatch``).
METADATA_STEP: OperationTable[MetadataStep] = OperationTable("the log's fold", "ordo.schemas.decisionlog")


@METADATA_STEP.register(Operation.CREATE_TABLE, Operation.ALTER_TABLE)
def _sets_metadata(
    problems: list[BrokenLogError], decision: CommitDecision, metadata: TableMetadata | None
) -> TableMetadata | None:
    """CREATE_TABLE and ALTER_TABLE carry the table's metadata from their version on (``NO_METADATA`` without)."""
    if decision.metadata is None:
        assert decision.operation is not None
        _add(
            problems,
            LogProblem.NO_METADATA,
            f"{decision.operation.value} at version {decision.id_version} carries no metadata",
        )
        return metadata
    return decision.metadata


@METADATA_STEP.register(
    Operation.INSERT_INTO,
    Operation.INSERT_OVERWRITE,
    Operation.TRUNCATE,
    Operation.UPDATE,
    Operation.DELETE,
    Operation.MINOR_COMPACT,
    Operation.MAJOR_COMPACT,
    Operation.CLUSTER,
    Operation.RESTORE,
)
def _may_change_schema(
    problems: list[BrokenLogError], decision: CommitDecision, metadata: TableMetadata | None
) -> TableMetadata | None:
    """A commit of files keeps the metadata, unless it changed the schema with its data (since 0.5)."""
    return metadata if decision.metadata is None else decision.metadata


_METADATA_STEPS = METADATA_STEP.resolved()  # the hot path's dispatch: a plain dict
_STOP_THERE = frozenset({LogProblem.WRONG_TABLE, *_SKIPPABLE})  # no further check of such a record
_COLUMN_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _add(problems: list[BrokenLogError], kind: LogProblem, message: str) -> None:
    problems.append(BrokenLogError(kind, message))


def _located(problems: list[BrokenLogError], offset: int, intent: int) -> list[BrokenLogError]:
    for problem in problems:
        problem.offset, problem.intent_offset = offset, intent
    return problems


def _replace_chain(head: LogHead, chain: bytes) -> LogHead:
    return LogHead(
        head.table, chain, head.last_intent_offset, head.version, head.time_ms, head.metadata, head.decisions
    )


def _check_files(problems: list[BrokenLogError], decision: CommitDecision, metadata: TableMetadata | None) -> None:
    """Partition specs of the added files; no path listed twice (liveness against state is the reader's)."""
    added = decision.added_files
    removed = decision.removed_files
    if len(removed) > 1 and len(set(removed)) != len(removed):
        _add(problems, LogProblem.NOT_LIVE, f"version {decision.id_version} removes a file twice")
    if not added:
        return
    if len(added) > 1 and len({f.path for f in added}) != len(added):
        _add(problems, LogProblem.ALREADY_LIVE, f"version {decision.id_version} adds a file twice")
    if metadata is None:
        return
    columns = metadata.partition_columns
    names = _COLUMN_SETS.get(columns)
    if names is None:
        names = _COLUMN_SETS.setdefault(columns, frozenset(columns))
    for data_file in added:
        spec = data_file.partition
        if spec.keys() != names:
            _add(
                problems,
                LogProblem.PARTITION,
                f"added file {data_file.path!r}: partition {dict(spec)} does not match partition columns "
                f"{list(columns)}",
            )
            return


__all__ = [
    "GENESIS_HASH",
    "BrokenLogError",
    "Folded",
    "LogHead",
    "LogProblem",
    "Step",
    "already_live",
    "check",
    "fold",
    "not_live",
]
