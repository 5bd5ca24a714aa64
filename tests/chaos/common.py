"""Helpers of the chaos tests: intents, reading both logs of a table, and the exactly-once check."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ordo.arbiter.replay import DecisionRecord, IntentRecord
from ordo.schemas import (
    CommitDecision,
    CommitIntent,
    DataFile,
    Operation,
    Outcome,
    TableMetadata,
    decisions_topic,
    decode,
    intents_topic,
)
from ordo.schemas.signing import Trust
from ordo.services.audit import audit, read_partition
from ordo.settings import Settings


def create_intent(table: str, location: str | None = None) -> CommitIntent:
    """CREATE_TABLE of a table partitioned by ``p``."""
    return CommitIntent(
        txn_id=f"create-{table}",
        table=table,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(
            location=location or f"/warehouse/{table}",
            schema="id BIGINT, v STRING, p STRING",
            primary_key=("id",),
            partition_columns=("p",),
        ),
    )


def insert_intent(table: str, txn_id: str, partition: str, read_version: int = 0) -> CommitIntent:
    """INSERT_INTO of one file into partition ``p=partition``."""
    spec = {"p": partition}
    return CommitIntent(
        txn_id=txn_id,
        table=table,
        operation=Operation.INSERT_INTO,
        read_version=read_version,
        partitions=(spec,),
        added_files=(
            DataFile(path=f"p={partition}/{txn_id}-0.parquet", partition=spec, record_count=1, size_bytes=10),
        ),
        writer="chaos",
    )


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


@dataclass
class Logs:
    """Both logs of one table as read (read_committed) from the broker."""

    table: str
    intents: list[IntentRecord]
    decisions: list[DecisionRecord]
    models: list[CommitDecision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.models = []
        for record in self.decisions:
            decision = decode(record.value or b"")
            assert isinstance(decision, CommitDecision), f"offset {record.offset} holds a {type(decision)}"
            self.models.append(decision)


def read_logs(settings: Settings, table: str, timeout: float = 60.0) -> Logs:
    """Read the intents and decisions topics of ``table`` to their ends (decisions with their signatures)."""
    intents = [
        IntentRecord(o, t, v)
        for o, t, v in read_partition(settings, intents_topic(settings.topic_prefix, table), timeout)
    ]
    signatures: dict[int, bytes] = {}
    records = read_partition(settings, decisions_topic(settings.topic_prefix, table), timeout, signatures=signatures)
    decisions = [DecisionRecord(o, v, signatures.get(o)) for o, _, v in records]
    return Logs(table, intents, decisions)


@dataclass
class ExactlyOnce:
    """What ``check_exactly_once`` established."""

    intents: int
    first: dict[int, CommitDecision]  # intent offset -> its decision (the first in log order)
    later: int  # decisions a reader skips (a later one for an intent already decided)
    accepted: int
    rejected: int
    duplicates: int


def first_decisions(logs: Logs) -> tuple[dict[int, CommitDecision], int]:
    """The reader rule of docs/tansu.md: the first decision for an intent offset is the decision."""
    first: dict[int, CommitDecision] = {}
    last = -1
    later = 0
    for decision in logs.models:
        if decision.intent_offset <= last:
            later += 1
            continue
        last = decision.intent_offset
        first[decision.intent_offset] = decision
    return first, later


def check_exactly_once(logs: Logs, *, replay: bool = True, trust: Trust | None = None) -> ExactlyOnce:
    """Every intent has exactly one decision, ID versions are contiguous and unique, and (with ``replay``) the
    decisions log is exactly what the pure core derives from the intents log.

    With ``trust`` the replay is of the records its keys vouch for, as every reader folds the log: on Tansu an
    aborted transaction stays visible, unsigned, and the next owner re-decides its intents to the same bytes
    (docs/tansu.md); without, every record is replayed and such a log fails."""
    first, later = first_decisions(logs)
    offsets = [record.offset for record in logs.intents]
    assert offsets == list(range(len(offsets))), "intents log offsets are not contiguous"
    missing = sorted(set(offsets) - set(first))
    assert not missing, f"{len(missing)} intent(s) without a decision, first at offset {missing[:5]}"
    extra = sorted(set(first) - set(offsets))
    assert not extra, f"decisions for intent offsets that do not exist: {extra[:5]}"
    versions = [d.id_version for d in first.values() if d.accepted and d.duplicate_of is None]
    assert versions == list(range(len(versions))), "ID versions not contiguous from 0 in log order"
    assert len(set(versions)) == len(versions), "an ID version was assigned twice"
    if replay:
        result = audit(logs.table, logs.intents, logs.decisions, verify=True, trust=trust)
        assert result.ok, f"audit replay diverges: {result.first}"
    return ExactlyOnce(
        intents=len(offsets),
        first=first,
        later=later,
        accepted=len(versions),
        rejected=sum(1 for d in first.values() if d.outcome is Outcome.REJECTED and d.duplicate_of is None),
        duplicates=sum(1 for d in first.values() if d.duplicate_of is not None),
    )


def check_later_are_copies(logs: Logs, settings: Settings) -> int:
    """A log written without Kafka transactions (``settings.decisions_transactions`` false) may hold a twin's or a
    restart's records for intents already decided: each must be a byte-identical copy of the first decision for
    its intent (docs/log-format.md, "Several writers"); with transactions there must be none. Returns the copies."""
    firsts: dict[int, bytes] = {}
    copies = 0
    last = -1
    for record, decision in zip(logs.decisions, logs.models, strict=True):
        if decision.intent_offset > last:
            last = decision.intent_offset
            firsts[decision.intent_offset] = record.value or b""
            continue
        assert record.value == firsts.get(decision.intent_offset), (
            f"offset {record.offset}: a later decision for intent {decision.intent_offset} differs from the first"
        )
        copies += 1
    if settings.decisions_transactions:
        assert copies == 0, f"{copies} later decision(s) for intents already decided"
    return copies
