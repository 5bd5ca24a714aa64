"""RESTORE (since 0.4): the live files of an earlier version again, made of files the table already had.

A whole-table overwrite (class OVERWRITE) that writes no data: the intent
re-adds files live at its restore version N, the arbiter removes every file
live at the head that was not (docs/conflicts.md "RESTORE"). Read as a write
by the folds.
"""

from __future__ import annotations

from ordo.arbiter.ops.writes import fold_write
from ordo.arbiter.rules import CHECKS, FOLD, Attempt, Reject, admit, in_scope, matrix, streaming_batch
from ordo.arbiter.state import RETENTION_PROPERTY, TableState, live_at, partition_key
from ordo.schemas import CommitIntent, Operation, Reason
from ordo.schemas.buckets import table_buckets


@CHECKS.register(Operation.RESTORE)
def restore(attempt: Attempt) -> None:
    """Its re-added files (``re_added_files``), the matrix, then what it removes, checked to leave version N."""
    admit(attempt, may_carry_metadata=False)
    in_scope(attempt)
    state, intent = attempt.state, attempt.intent
    restored = re_added_files(state, intent, attempt.record_timestamp)
    streaming_batch(attempt)
    matrix(attempt)
    attempt.removed = removed_by_restore(state, intent, restored)


FOLD.register(Operation.RESTORE)(fold_write)  # new live files and removed ones, as a write's


def re_added_files(state: TableState, intent: CommitIntent, record_timestamp: int) -> set[str]:
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
        raise Reject(
            Reason.INVALID_RESTORE_VERSION,
            f"RESTORE needs a restore version between 0 and its read version {intent.read_version}, not {version}",
        )
    if intent.partitions is not None:
        raise Reject(Reason.INVALID_PARTITION, "RESTORE applies to the whole table (partitions must be null)")
    if intent.removed_files:
        raise Reject(
            Reason.INVALID_OPERATION, "RESTORE names no removed files: the arbiter removes every file not live at N"
        )
    if version < state.restore_floor:
        raise Reject(
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
            raise Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} is listed twice or live at the head (RESTORE re-adds removed files)",
            )
        restored.add(path)
        entry = gone.get(path)
        stay = None if entry is None else live_at(entry[1], version)
        if entry is None or stay is None:
            raise Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} was not live at version {version} of this table",
            )
        try:
            key = partition_key(columns, data_file.partition)
        except ValueError as exc:
            raise Reject(Reason.INVALID_PARTITION, f"re-added file {path[:200]!r}: {exc}") from None
        if key != entry[0]:
            raise Reject(
                Reason.NOT_LIVE_AT_VERSION,
                f"re-added file {path[:200]!r} names partition {list(key)!r}; it was live in {list(entry[0])!r}",
            )
        if data_file.bucket >= buckets:
            raise Reject(
                Reason.INVALID_BUCKET, f"re-added file {path[:200]!r} is in bucket {data_file.bucket} of {buckets}"
            )
        if stay[2] < horizon:
            raise Reject(
                Reason.FILE_VACUUMED,
                f"re-added file {path[:200]!r} was removed at version {stay[1]}, longer than the table's retention "
                f"({RETENTION_PROPERTY}) before this RESTORE: vacuum may have deleted it",
            )
    return restored


def removed_by_restore(state: TableState, intent: CommitIntent, restored: set[str]) -> tuple[str, ...]:
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
            if entry is None or live_at(entry[1], version) is None:
                removed.append(path)
    for path, (_, stays) in gone.items():
        if path not in live and path not in restored:
            stay = live_at(stays, version)
            if stay is not None:
                raise Reject(
                    Reason.NOT_LIVE_AT_VERSION,
                    f"file {path[:200]!r} was live at version {version} but is neither live nor re-added (removed "
                    f"at version {stay[1]}): read the table again and restore from there",
                )
    removed.sort()
    return tuple(removed)
