"""The arbiter's per-operation tables, and the named rules and fold steps the operations share.

Two ``OperationTable``s (``schemas.dispatch``) hold what the arbiter does per
operation; ``arbiter.ops`` fills them, one module per family of operations:

* ``CHECKS[op](attempt)``: the operation's rules, in order. Each rule is a
  named function that reads the state and the intent and raises ``Reject``
  with a reason, or records what it found on the ``Attempt`` (the scope, the
  metadata after, the files removed, the rebase). Every operation registers
  its own (the table does not inherit): an operation's rules are its contract.
* ``FOLD[op](state, decision, version)``: what an accepted decision of the
  operation does to ``TableState``, besides what ``arbiter.core.apply`` does
  for every decision (the chain, the dedupe window, the head).

The rules shared by several operations are here, in the style of delta-rs's
conflict checker: one function per question (``admit``, ``in_scope``,
``added_files``, ``streaming_batch``, ``matrix``...), called in order by each
operation's handler, so that handler reads as the list of its checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ordo.arbiter.policy import REBASE_OF, Policy, Resolution
from ordo.arbiter.state import Last, PartitionKey, PartitionState, TableState, partition_key
from ordo.schemas import OP_CLASS, CommitDecision, CommitIntent, OpClass, Reason, Rebase, TableMetadata
from ordo.schemas.buckets import table_buckets
from ordo.schemas.dispatch import OperationTable
from ordo.schemas.models import MAX_VERSION, PartitionSpec
from ordo.schemas.operations import REGISTRY
from ordo.schemas.paths import FILE_NAME_PATTERN, partition_path, split_data_file_path, write_id_of

Release = tuple[int, int]  # (major, minor) of a release: the rules an intent is decided by

# Hot-path constants: enum class attributes cost a lookup each in Python 3.11.
_CLASSES = tuple(OpClass)
# The class whose last commit makes every older snapshot stale (SCHEMA_CHANGED): ALTER's, the registry's fixed row.
_ALTER = OpClass.ALTER
_LATER_FAILS = Resolution.LATER_FAILS


class Reject(Exception):
    """Carries a rejection out of the rules: its reason, message and the commit it conflicts with."""

    def __init__(self, reason: str, message: str, conflicting: Last | None = None) -> None:
        super().__init__(message)
        self.reason = str(reason)  # a plain string, as a decision read back from the log holds
        self.message = message
        self.conflicting = conflicting


@dataclass(slots=True)
class Attempt:
    """One intent being decided: what the rules read, and what they found so far (the accepted decision's fields).

    ``rules``: the release whose rules decide it, that of the schema it was
    written with; None for the current schema. An intent of an older writer is
    decided as its release decided it, so replays of older logs re-derive what
    was logged.
    """

    state: TableState
    intent: CommitIntent
    record_timestamp: int
    rules: Release | None = None
    scope: tuple[PartitionKey, ...] | None = None  # the partitions it read or wrote; None: the whole table
    metadata: TableMetadata | None = None  # the table's metadata after it, when it changes them
    removed: tuple[str, ...] = ()  # the files it removes, as the arbiter computed them
    rebase: Rebase = Rebase.NONE
    # A table's first commit has no scope and belongs to no stream (CREATE_TABLE's rule sets them None).
    partitions: tuple[PartitionSpec, ...] | None = None
    app_id: str | None = None
    batch_id: int | None = None

    def __post_init__(self) -> None:
        intent = self.intent
        self.partitions, self.app_id, self.batch_id = intent.partitions, intent.app_id, intent.batch_id

    def older_than(self, release: Release) -> bool:
        """True when the intent was written with the schema of a release before ``release``."""
        return self.rules is not None and self.rules < release


Rule = Callable[[Attempt], None]
FoldStep = Callable[[TableState, CommitDecision, int], None]
# What an intent of each operation must satisfy (its handler calls its rules in order; no inheritance).
CHECKS: OperationTable[Rule] = OperationTable("the arbiter's rules", "ordo.arbiter.ops", inherits=False)
# What an accepted decision of each operation does to the table's state.
FOLD: OperationTable[FoldStep] = OperationTable("the arbiter's fold", "ordo.arbiter.ops")


# --------------------------------------------------------------------------- rules every operation may call


def admit(attempt: Attempt, *, may_carry_metadata: bool) -> None:
    """The rules of every intent on an existing table, first: the table exists (``UNKNOWN_TABLE``), metadata only
    where the operation takes it (``INVALID_OPERATION``), a read version at or below the head
    (``READ_VERSION_AHEAD``) and after the last schema change (``SCHEMA_CHANGED``)."""
    state, intent = attempt.state, attempt.intent
    if state.metadata is None or state.policy is None:
        raise Reject(Reason.UNKNOWN_TABLE, f"table {state.table!r} does not exist (no CREATE_TABLE accepted)")
    if intent.metadata is not None and not may_carry_metadata:
        # The message predates ALTER_TABLE; it stays as logged so that replays of older logs match.
        raise Reject(Reason.INVALID_OPERATION, "metadata may only be given with CREATE_TABLE")
    if intent.read_version > state.head_version:
        raise Reject(
            Reason.READ_VERSION_AHEAD,
            f"read version {intent.read_version} is ahead of the head version {state.head_version}",
        )
    altered = state.any_scope[_ALTER]
    if altered is not None and altered[0] > intent.read_version:
        raise Reject(
            Reason.SCHEMA_CHANGED,
            f"the table's schema or properties changed at version {altered[0]} (txn {altered[1]}), after read "
            f"version {intent.read_version}: read the table again and redo the work against the new schema",
            altered,
        )


def in_scope(attempt: Attempt) -> None:
    """The partitions the intent read or wrote (``INVALID_PARTITION`` for a spec that names other columns)."""
    state = attempt.state
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    partitions = attempt.intent.partitions
    if partitions is None:
        return
    if not columns:
        if any(spec for spec in partitions):
            raise Reject(Reason.INVALID_PARTITION, f"table {state.table!r} is not partitioned")
        return
    keys: dict[PartitionKey, None] = {}
    try:
        for spec in partitions:
            keys[partition_key(columns, spec)] = None
    except ValueError as exc:
        raise Reject(Reason.INVALID_PARTITION, str(exc)) from None
    if not keys:
        raise Reject(Reason.INVALID_PARTITION, "empty partition list (use null for the whole table)")
    attempt.scope = tuple(keys)


def no_restore_version(attempt: Attempt) -> None:
    """Only a RESTORE names a restore version."""
    if attempt.intent.restore_version is not None:
        raise Reject(
            Reason.INVALID_OPERATION, f"{attempt.intent.operation.value} has no restore version (only RESTORE)"
        )


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


def added_files(attempt: Attempt) -> None:
    """Each added file: in a bucket of the table, a valid path not listed twice nor live, in the intent's scope,
    named ``<partition path>/<write id>-<n>.parquet`` under its partition's path, with a write id no accepted
    commit used."""
    state, intent = attempt.state, attempt.intent
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    scope = attempt.scope
    wanted = None if scope is None else set(scope)
    live = state.files
    seen: set[str] = set()
    prefixes: dict[PartitionKey, str] = {}
    buckets = table_buckets(state.metadata.properties) if intent.added_files else 1
    for data_file in intent.added_files:
        path = data_file.path
        if data_file.bucket >= buckets:
            raise Reject(
                Reason.INVALID_BUCKET,
                f"added file {path[:200]!r} is in bucket {data_file.bucket}, but table {state.table!r} has "
                f"{buckets} bucket(s) (ordo.buckets): 0 to {buckets - 1}",
            )
        if _plainly_valid_path(path) is None:
            problem = invalid_path_reason(path)
            if problem:
                raise Reject(Reason.INVALID_PATH, f"added file {path[:200]!r} {problem}")
        if path in seen or path in live:
            raise Reject(Reason.INVALID_PATH, f"added file {path[:200]!r} is listed twice or already live")
        seen.add(path)
        try:
            key = partition_key(columns, data_file.partition)
        except ValueError as exc:
            raise Reject(Reason.INVALID_PARTITION, f"added file {path[:200]!r}: {exc}") from None
        if wanted is not None and key not in wanted:
            raise Reject(Reason.INVALID_PARTITION, f"added file {path[:200]!r} lies outside the intent's partitions")
        layout = split_data_file_path(path)
        if layout is None:
            raise Reject(
                Reason.INVALID_PATH, f"added file {path[:200]!r} is not named {FILE_NAME_PATTERN} (schemas.paths)"
            )
        prefix = prefixes.get(key)
        if prefix is None:
            prefix = prefixes[key] = partition_path(columns, data_file.partition)
        if layout[0] != prefix:
            raise Reject(
                Reason.PATH_PARTITION_MISMATCH,
                f"added file {path[:200]!r} lies under {layout[0][:200]!r} but its partition values give "
                f"{prefix[:200]!r}",
            )
        write_id = layout[1]
        if write_id in state.write_ids:
            raise Reject(
                Reason.PATH_REUSED,
                f"write id {write_id[:256]!r} of added file {path[:200]!r} was already used by an accepted commit "
                "(a path that was live once cannot be added again)",
            )


def adds_no_files(attempt: Attempt) -> None:
    """An operation that writes no data (TRUNCATE, ALTER_TABLE) adds no file."""
    intent = attempt.intent
    if intent.added_files:
        raise Reject(Reason.INVALID_OPERATION, f"{intent.operation.value} cannot add files")


def removes_no_files(attempt: Attempt) -> None:
    """A merge-on-read write (and a metadata change) names no removed file: it writes delete records."""
    intent = attempt.intent
    if intent.removed_files:
        raise Reject(
            Reason.INVALID_OPERATION,
            f"{intent.operation.value} is merge-on-read and cannot remove files; write delete records instead",
        )


def streaming_batch(attempt: Attempt) -> None:
    """A streaming batch commits at most once: ``(app_id, batch_id)`` above the app's last committed batch."""
    state, intent = attempt.state, attempt.intent
    if (intent.app_id is None) != (intent.batch_id is None):
        raise Reject(Reason.INVALID_OPERATION, "app_id and batch_id must be given together")
    if intent.app_id is None or intent.batch_id is None:
        return
    committed = state.batches.get(intent.app_id)
    if committed is not None and intent.batch_id <= committed[0]:
        raise Reject(
            Reason.BATCH_ALREADY_COMMITTED,
            f"batch {intent.batch_id} of {intent.app_id!r} is at or below committed batch {committed[0]}",
            (committed[1], f"{intent.app_id}:{committed[0]}"),
        )


def matrix(attempt: Attempt) -> None:
    """The conflict matrix against every commit in scope since the read version: the rebase, or a conflict."""
    state = attempt.state
    assert state.policy is not None
    intent = attempt.intent
    attempt.rebase = check_conflicts(
        state, state.policy, intent.read_version, OP_CLASS[intent.operation], attempt.scope
    )


def check_conflicts(
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
        raise Reject(
            Reason.CONFLICT_LATER_FAILS,
            f"conflicts with concurrent txn {worst[1]} committed at version {worst[0]} "
            f"(read version {read_version}, policy {policy.name})",
            worst,
        )
    return rebase


def check_metrics(intent: CommitIntent) -> None:
    """A writer's operation metrics are a claim (since 0.5): ``INVALID_METRICS`` unless each is a name the
    operation may claim (``OperationSpec.metrics``: a MERGE's, on an UPDATE), all of them, each a count in
    0..2**62, and the rows counted are at most the records of the files it adds (each changed row is one record)."""
    operation = intent.operation
    metrics = intent.operation_metrics
    allowed = REGISTRY[operation].metrics
    unknown = sorted(name for name in metrics if name not in allowed)
    if unknown:
        may = f"may claim only {list(allowed)}" if allowed else "claims no metric"
        raise Reject(Reason.INVALID_METRICS, f"{operation.value} {may}, not {[n[:64] for n in unknown[:4]]}")
    if len(metrics) != len(allowed):
        missing = [name for name in allowed if name not in metrics]
        raise Reject(Reason.INVALID_METRICS, f"{operation.value} claims {list(allowed)} together: {missing} missing")
    for name in allowed:
        if not 0 <= metrics[name] <= MAX_VERSION:
            raise Reject(Reason.INVALID_METRICS, f"metric {name} is {metrics[name]}: a count is in 0..2**62")
    rows = sum(metrics.values())
    records = sum(f.record_count for f in intent.added_files)
    if rows > records:
        claimed = ", ".join(f"{name}={metrics[name]}" for name in allowed)
        raise Reject(
            Reason.INVALID_METRICS,
            f"the metrics count {rows} changed rows ({claimed}) but the commit's files hold {records} records",
        )


# --------------------------------------------------------------------------- fold steps the operations share


def takes_metadata(state: TableState, decision: CommitDecision) -> bool:
    """A commit of files that changed the schema with its data (since 0.5): its metadata holds from now on."""
    if decision.metadata is None:
        return False
    state.metadata = decision.metadata
    return True


def fold_files(
    state: TableState, decision: CommitDecision, version: int, oldest: dict[PartitionKey, int] | None
) -> None:
    """The decision's removed files leave the live set (each stay kept for RESTORE), its added files join it.

    ``oldest``: for a rewrite, per partition the oldest data version of its inputs, which its outputs keep (their
    data is as old); None for a commit of new data (its files hold data of ``version``).
    """
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    files = state.files
    partitions = state.partitions
    versions = state.data_versions
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
            del versions[path]
            stay = (added_at.pop(path), version, removed_ms)
            entry = gone.get(path)
            gone[path] = (key, (stay,) if entry is None else (*entry[1], stay))
            gone_order.append((removed_ms, version, path))
    fallback = version if not oldest else min(oldest.values())
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
        versions[path] = version if oldest is None else oldest.get(key, fallback)
        write_id = write_id_of(path)
        if write_id is not None:  # a name an older writer chose freely is skipped: apply never rejects
            # The txn id's own string when equal: shared with the dedupe window, in memory and in checkpoints.
            write_ids.add(txn_id if write_id == txn_id else write_id)


def fold_class(state: TableState, decision: CommitDecision, version: int, schema_changed: bool) -> None:
    """The decision is the newest commit of its class in its scope (what the matrix reads), and its stream's."""
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    last: Last = (version, decision.txn_id)
    operation = decision.operation
    assert operation is not None
    cls = OP_CLASS[operation]
    state.any_scope[cls] = last
    if schema_changed:  # older snapshots are stale as after an ALTER_TABLE: their intents get SCHEMA_CHANGED
        state.any_scope[_ALTER] = last
    if decision.partitions is None or not columns:
        state.whole[cls] = last
    else:
        partitions = state.partitions
        for spec in decision.partitions:
            key = partition_key(columns, spec)
            part = partitions.get(key)
            if part is None:
                part = partitions[key] = PartitionState()
            part.last[cls] = last
    if decision.app_id is not None and decision.batch_id is not None:
        state.batches[decision.app_id] = (decision.batch_id, version)


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


__all__ = [
    "CHECKS",
    "FOLD",
    "Attempt",
    "Reject",
    "Release",
    "added_files",
    "adds_no_files",
    "admit",
    "check_conflicts",
    "check_metrics",
    "fold_class",
    "fold_files",
    "in_scope",
    "invalid_path_reason",
    "matrix",
    "no_restore_version",
    "removes_no_files",
    "streaming_batch",
    "takes_metadata",
]
