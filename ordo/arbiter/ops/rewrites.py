"""The rewrites: MINOR_COMPACT, MAJOR_COMPACT and CLUSTER, which replace files without changing data.

The intent names the files it rewrites; the arbiter rebases them through
the lineage of the rewrites committed since its read version
(docs/conflicts.md, ``compaction_completes``), keeps the rewrite in its scope,
and for MAJOR_COMPACT and CLUSTER (which drop delete records) requires every
file of a partition it touches. A rewrite gets no time version; its outputs
keep the oldest data version of their inputs.
"""

from __future__ import annotations

from ordo.arbiter.rules import (
    CHECKS,
    FOLD,
    Attempt,
    Reject,
    added_files,
    admit,
    fold_class,
    fold_files,
    in_scope,
    invalid_path_reason,
    matrix,
    no_restore_version,
    streaming_batch,
    takes_metadata,
)
from ordo.arbiter.state import LINEAGE_WINDOW, Lineage, PartitionKey, TableState, partition_key
from ordo.schemas import CommitDecision, CommitIntent, Operation, Reason


@CHECKS.register(Operation.MINOR_COMPACT)
def minor_compact(attempt: Attempt) -> None:
    """Its named inputs, rebased through lineage, and its outputs stay in its scope (delete records are kept)."""
    rewrite(attempt)


@CHECKS.register(Operation.MAJOR_COMPACT, Operation.CLUSTER)
def major_compact(attempt: Attempt) -> None:
    """As a minor compaction, and every file of each partition it touches that holds data it read is an input."""
    rewrites_whole_partitions(attempt, rewrite(attempt))


def rewrite(attempt: Attempt) -> dict[PartitionKey, None]:
    """The rules of every rewrite, in order; the partitions its inputs lie in."""
    admit(attempt, may_carry_metadata=False)
    in_scope(attempt)
    no_restore_version(attempt)
    added_files(attempt)
    names_its_inputs(attempt)
    streaming_batch(attempt)
    matrix(attempt)
    attempt.removed = resolve_inputs(attempt.state, attempt.intent)
    return stays_in_scope(attempt)


def names_its_inputs(attempt: Attempt) -> None:
    """A rewrite names the files it rewrites: at least one, each once, each a valid path."""
    intent = attempt.intent
    if not intent.removed_files:
        raise Reject(Reason.INVALID_OPERATION, f"{intent.operation.value} must name the files it rewrites")
    if len(set(intent.removed_files)) != len(intent.removed_files):
        raise Reject(Reason.INVALID_OPERATION, "a removed file is listed twice")
    for path in intent.removed_files:
        problem = invalid_path_reason(path)
        if problem:
            raise Reject(Reason.INVALID_PATH, f"removed file {path[:200]!r} {problem}")


def resolve_inputs(state: TableState, intent: CommitIntent) -> tuple[str, ...]:
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
            raise Reject(Reason.FILE_NOT_LIVE, f"removed file {path[:200]!r} is not live at the head")
        if not origin.inputs <= wanted:
            raise Reject(
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


def stays_in_scope(attempt: Attempt) -> dict[PartitionKey, None]:
    """A rewrite stays in its scope: its inputs (after the rebase) lie in it, its outputs where its inputs were.

    Every input must lie in a partition of the declared scope, and so must
    every output's partition be one the inputs came from (a rewrite moves no
    rows between partitions). Returns the partitions its inputs lie in.
    """
    state, intent, removed, scope = attempt.state, attempt.intent, attempt.removed, attempt.scope
    files = state.files
    wanted = None if scope is None else set(scope)
    touched: dict[PartitionKey, None] = {}
    for path in removed:
        key = files[path]
        if key not in touched:
            if wanted is not None and key not in wanted:
                raise Reject(
                    Reason.FILE_OUTSIDE_SCOPE,
                    f"removed file {path[:200]!r} lies in partition {list(key)!r}, outside the intent's partitions",
                )
            touched[key] = None
    assert state.metadata is not None
    columns = state.metadata.partition_columns
    for data_file in intent.added_files:
        key = partition_key(columns, data_file.partition)  # validated by added_files
        if key not in touched:
            raise Reject(
                Reason.FILE_OUTSIDE_SCOPE,
                f"added file {data_file.path[:200]!r} lies in partition {list(key)!r}, "
                f"where {intent.operation.value} rewrites no file",
            )
    return touched


def rewrites_whole_partitions(attempt: Attempt, touched: dict[PartitionKey, None]) -> None:
    """MAJOR_COMPACT and CLUSTER rewrite every file of each partition they touch that holds data they read.

    They drop delete records and superseded rows, which is only correct when
    every file of the partition holding data the rewrite read (data version at
    or below its read version) is an input: otherwise a dropped delete would
    resurrect its key from a file left behind. Files that only hold data
    committed after the read version may stay. Costs O(live files of the
    partitions touched).
    """
    state, intent = attempt.state, attempt.intent
    gone = set(attempt.removed)
    versions = state.data_versions
    read_version = intent.read_version
    partitions = state.partitions
    for key in touched:
        # The live files are a set: the message names the smallest path left, so that it does not depend on the
        # interpreter's string hashing (PYTHONHASHSEED) and replaying the intents log gives the same bytes.
        left = [path for path in partitions[key].live if path not in gone and versions[path] <= read_version]
        if left:
            path = min(left)
            raise Reject(
                Reason.INCOMPLETE_REWRITE,
                f"{intent.operation.value} leaves live file {path[:200]!r} of partition {list(key)!r} "
                f"(data of version {versions[path]} <= read version {read_version}); it must rewrite "
                "every file of each partition it touches",
            )


@FOLD.register(Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER)
def fold_rewrite(state: TableState, decision: CommitDecision, version: int) -> None:
    """The outputs replace the inputs and keep, per partition, the oldest data version of the inputs there; the
    lineage remembers which outputs replaced which inputs."""
    schema_changed = takes_metadata(state, decision)
    files, versions = state.files, state.data_versions
    oldest: dict[PartitionKey, int] = {}
    for path in decision.removed_files:
        key = files[path]
        data_version = versions[path]
        if data_version < oldest.get(key, version):
            oldest[key] = data_version
    fold_files(state, decision, version, oldest)
    record_lineage(state, decision, version)
    fold_class(state, decision, version, schema_changed)


def record_lineage(state: TableState, decision: CommitDecision, version: int) -> None:
    """Remember which inputs the rewrite replaced by which outputs (for ``LINEAGE_WINDOW`` versions)."""
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
