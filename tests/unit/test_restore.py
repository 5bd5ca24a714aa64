"""RESTORE in the pure core: a metadata-only commit that makes version N's live files the table's again.

The expected live sets come from a model that folds the accepted decisions
(added and removed paths per version), not from the arbiter's state.
"""

from __future__ import annotations

import pytest

from ordo.arbiter.checkpoint import decode_checkpoint, encode_checkpoint, states_equal
from ordo.arbiter.core import rebuild
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Reason, Rebase, encode

from .helpers import Table


def model_live(decisions: list[CommitDecision], version: int) -> dict[str, DataFile]:
    """The live files at ``version``, folded from the accepted decisions alone."""
    live: dict[str, DataFile] = {}
    for d in decisions:
        if not d.accepted or d.duplicate_of is not None or d.id_version is None or d.id_version > version:
            continue
        for path in d.removed_files:
            del live[path]
        for f in d.added_files:
            live[f.path] = f
    return live


def restore_intent(table: Table, version: int, *, txn: str = "r", read_version: int | None = None) -> CommitIntent:
    """What an honest writer sends: version N's files that are not live at the head it read."""
    head = table.state.head_version if read_version is None else read_version
    at_n = model_live(table.decisions, version)
    at_head = model_live(table.decisions, head)
    return CommitIntent(
        txn_id=txn,
        table="t",
        operation=Operation.RESTORE,
        read_version=head,
        added_files=tuple(f for p, f in sorted(at_n.items()) if p not in at_head),
        restore_version=version,
    )


def history(table: Table) -> None:
    """v1 insert a, v2 insert b, v3 update a, v4 minor compaction of a, v5 overwrite b."""
    table.commit(Operation.INSERT_INTO, "a", txn="i1")
    table.commit(Operation.INSERT_INTO, "b", txn="i2")
    table.commit(Operation.UPDATE, "a", txn="u3")
    table.commit(Operation.MINOR_COMPACT, "a", txn="c4")
    table.commit(Operation.INSERT_OVERWRITE, "b", txn="o5")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_restore_makes_version_n_live_again_adding_and_removing_exactly_the_difference(version: int) -> None:
    table = Table()
    history(table)
    before = set(table.state.files)
    decision = table.submit(restore_intent(table, version))
    assert decision.accepted and decision.reason is None, decision.message
    assert decision.operation is Operation.RESTORE and decision.restore_version == version
    assert decision.id_version == 6 and decision.time_version is not None  # a logical change
    expected = set(model_live(table.decisions[:-1], version))
    assert set(table.state.files) == expected
    assert set(decision.removed_files) == before - expected
    assert {f.path for f in decision.added_files} == expected - before
    assert decision.partitions is None  # the whole table


def test_a_restored_table_can_be_restored_again_through_every_stay_of_a_file() -> None:
    table = Table()
    history(table)
    table.submit(restore_intent(table, 1, txn="r6"))  # i1's file back
    table.commit(Operation.TRUNCATE, None, txn="t7")  # and gone again
    for version, txn in ((1, "r8"), (5, "r9"), (6, "r10"), (0, "r11"), (3, "r12")):
        decision = table.submit(restore_intent(table, version, txn=txn))
        assert decision.accepted, (version, decision.message)
        assert set(table.state.files) == set(model_live(table.decisions[:-1], version))


def test_the_state_rebuilt_from_the_log_and_from_a_checkpoint_equals_the_live_one() -> None:
    table = Table()
    history(table)
    table.submit(restore_intent(table, 2, txn="r6"))
    table.commit(Operation.INSERT_INTO, "a", txn="i7")
    assert table.submit(restore_intent(table, 1, txn="r8")).accepted
    rebuilt = rebuild("t", [encode(d) for d in table.decisions])
    assert states_equal(rebuilt, table.state)
    loaded = decode_checkpoint(encode_checkpoint(len(table.decisions) - 1, table.state), "t").state
    assert states_equal(loaded, table.state) and loaded.gone == table.state.gone


# --------------------------------------------------------------------------- hostile intents


def _replace(intent: CommitIntent, **update: object) -> CommitIntent:
    return intent.model_copy(update=update)


def test_a_path_never_live_in_this_table_is_refused() -> None:
    table = Table()
    history(table)
    intent = restore_intent(table, 1)
    foreign = DataFile(path="dt=a/stranger-0.parquet", partition={"dt": "a"}, record_count=1, size_bytes=1)
    decision = table.submit(_replace(intent, added_files=(*intent.added_files, foreign)))
    assert decision.reason == Reason.NOT_LIVE_AT_VERSION and "stranger-0" in (decision.message or "")
    assert not decision.accepted and "dt=a/stranger-0.parquet" not in table.state.files


def test_a_path_live_at_another_version_than_n_is_refused() -> None:
    table = Table()
    history(table)
    # u3's file was added at version 3 and removed at 4: live at 3, not at 1.
    u3 = model_live(table.decisions, 3)["dt=a/u3-0.parquet"]
    intent = restore_intent(table, 1)
    decision = table.submit(_replace(intent, added_files=(*intent.added_files, u3)))
    assert decision.reason == Reason.NOT_LIVE_AT_VERSION
    assert "was not live at version 1" in (decision.message or "")


def test_a_path_live_at_the_head_or_listed_twice_is_refused() -> None:
    table = Table()
    history(table)
    head_file = model_live(table.decisions, 5)["dt=b/o5-0.parquet"]
    intent = restore_intent(table, 1)
    for added in ((*intent.added_files, head_file), (*intent.added_files, *intent.added_files)):
        decision = table.submit(_replace(intent, added_files=added, txn_id=f"r{len(added)}"))
        assert decision.reason == Reason.NOT_LIVE_AT_VERSION, decision.message


def test_a_re_added_file_in_another_partition_or_bucket_is_refused() -> None:
    table = Table()
    history(table)
    intent = restore_intent(table, 2)
    moved = intent.added_files[0].model_copy(update={"partition": {"dt": "b"}})
    decision = table.submit(_replace(intent, added_files=(moved, *intent.added_files[1:])))
    assert decision.reason == Reason.NOT_LIVE_AT_VERSION and "it was live in" in (decision.message or "")
    far = intent.added_files[0].model_copy(update={"bucket": 9})
    decision = table.submit(_replace(intent, txn_id="r2", added_files=(far, *intent.added_files[1:])))
    assert decision.reason == Reason.INVALID_BUCKET


@pytest.mark.parametrize(("version", "read"), [(None, 5), (6, 5), (5, 4), (-1, 5)])
def test_a_missing_or_wrong_restore_version_is_refused(version: int | None, read: int) -> None:
    """None, above the version the writer read (a version it cannot know the files of), or below 0."""
    table = Table()
    history(table)
    intent = restore_intent(table, 1, read_version=read)
    decision = table.submit(_replace(intent, restore_version=version))
    assert decision.reason == Reason.INVALID_RESTORE_VERSION and not decision.accepted
    assert table.state.head_version == 5


def test_restore_version_on_another_operation_is_refused() -> None:
    table = Table()
    history(table)
    intent = table.intent(Operation.INSERT_INTO, table.state.head_version, "a", restore_version=1)
    assert table.submit(intent).reason == Reason.INVALID_OPERATION


def test_smuggling_a_removed_path_under_another_operation_is_refused() -> None:
    table = Table()
    history(table)
    old = model_live(table.decisions, 1)["dt=a/i1-0.parquet"]
    intent = table.intent(Operation.INSERT_INTO, table.state.head_version, "a")
    assert table.submit(_replace(intent, added_files=(old,))).reason == Reason.PATH_REUSED


def test_a_restore_naming_partitions_or_removed_files_is_refused() -> None:
    table = Table()
    history(table)
    intent = restore_intent(table, 1)
    assert table.submit(_replace(intent, partitions=({"dt": "a"},))).reason == Reason.INVALID_PARTITION
    removed = _replace(intent, txn_id="r2", removed_files=("dt=b/o5-0.parquet",))
    assert table.submit(removed).reason == Reason.INVALID_OPERATION


def test_leaving_out_a_file_of_version_n_is_refused() -> None:
    table = Table()
    history(table)
    intent = restore_intent(table, 2)
    assert len(intent.added_files) >= 2
    decision = table.submit(_replace(intent, added_files=intent.added_files[1:]))
    assert decision.reason == Reason.NOT_LIVE_AT_VERSION and "neither live nor re-added" in (decision.message or "")


def test_a_file_removed_longer_than_the_retention_ago_is_refused_as_vacuumed() -> None:
    table = Table(properties={"ordo.retention_hours": "1"})  # 3,600,000 ms; the driver's clock ticks 1 s
    history(table)
    intent = restore_intent(table, 1)
    removed_at = table.state.gone["dt=a/i1-0.parquet"][1][-1][2]
    late = table.submit(intent, timestamp=removed_at + 3_600_001)
    assert late.reason == Reason.FILE_VACUUMED and "vacuum may have deleted it" in (late.message or "")
    in_time = table.submit(_replace(intent, txn_id="r2"), timestamp=removed_at + 3_600_000)
    assert in_time.accepted, in_time.message


def test_after_the_retention_the_state_forgets_removals_and_older_versions_are_refused() -> None:
    table = Table(properties={"ordo.retention_hours": "1"})
    history(table)
    t = 10 * 3_600_000
    table.submit(table.intent(Operation.INSERT_OVERWRITE, table.state.head_version, "a", txn="o6"), timestamp=t)
    # i1 (removed at v4) and the rest removed before t - 1 h are forgotten; v6's removal stays.
    assert table.state.restore_floor == 5
    assert set(table.state.gone) == {"dt=a/c4-0.parquet"}
    decision = table.submit(restore_intent(table, 3), timestamp=t + 1)
    assert decision.reason == Reason.FILE_VACUUMED and "no longer restorable" in (decision.message or "")
    assert table.submit(restore_intent(table, 5, txn="r5"), timestamp=t + 2).accepted


# --------------------------------------------------------------------------- the matrix


def test_restore_after_a_concurrent_insert_overwrites_it_and_an_insert_after_a_restore_fails() -> None:
    table = Table()
    history(table)
    intent = restore_intent(table, 1)
    table.commit(Operation.INSERT_INTO, "c", txn="i6")  # concurrent with the restore
    decision = table.submit(intent)
    assert decision.accepted and decision.rebase is Rebase.LATER_OVERWRITES
    assert "dt=c/i6-0.parquet" in decision.removed_files
    assert set(table.state.files) == set(model_live(table.decisions, 1))
    late = table.submit(table.intent(Operation.INSERT_INTO, 6, "a"))  # read before the restore
    assert late.reason == Reason.CONFLICT_LATER_FAILS and late.conflicting_version == 7


def test_restore_after_a_concurrent_rewrite_of_version_n_files_is_refused() -> None:
    table = Table()
    history(table)
    table.commit(Operation.INSERT_INTO, "a", txn="i6")
    intent = restore_intent(table, 6)  # nothing to re-add: every file of 6 is live
    table.commit(Operation.MINOR_COMPACT, "a", txn="c7")  # rewrites files of version 6 meanwhile
    decision = table.submit(_replace(intent, restore_version=5))
    assert decision.reason == Reason.NOT_LIVE_AT_VERSION, decision.message
