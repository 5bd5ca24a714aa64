"""What the arbiter knows of one table: its state, folded from the decisions log (``arbiter.core.apply``).

``TableState`` is a mutable accumulator owned by one fold; every field is
derived from the table's decisions, so it can be rebuilt from the log (and is
written to checkpoints, ``arbiter.checkpoint``). The operations' rules
(``arbiter.rules``, ``arbiter.ops``) read it; their fold handlers update it in
O(files and partitions a decision touches).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ordo.arbiter.policy import Policy
from ordo.schemas import OpClass, Outcome, TableMetadata
from ordo.schemas.decisionlog import GENESIS_HASH

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
Stay = tuple[int, int, int]  # a removed file's stay: (version added, version removed, removal's time in ms)


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
    gone: dict[str, tuple[PartitionKey, tuple[Stay, ...]]] = field(default_factory=dict)
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


def restore_retention_ms(metadata: TableMetadata) -> int:
    """The table's ``ordo.retention_hours`` in ms (the default when absent or not a number >= 0)."""
    text = metadata.properties.get(RETENTION_PROPERTY)
    try:
        hours = float(text) if text is not None else DEFAULT_RETENTION_HOURS
    except ValueError:
        hours = DEFAULT_RETENTION_HOURS
    return int(hours * 3_600_000) if 0 <= hours <= 1e9 else DEFAULT_RETENTION_HOURS * 3_600_000


def live_at(stays: tuple[Stay, ...], version: int) -> Stay | None:
    """The stay during which a removed file was live at ``version``, or None."""
    for stay in stays:
        if stay[0] <= version < stay[1]:
            return stay
    return None


__all__ = [
    "DEDUPE_WINDOW",
    "DEFAULT_RETENTION_HOURS",
    "LINEAGE_WINDOW",
    "RETENTION_PROPERTY",
    "Last",
    "Lineage",
    "PartitionKey",
    "PartitionState",
    "Stay",
    "TableState",
    "TxnRecord",
    "live_at",
    "new_state",
    "partition_key",
    "restore_retention_ms",
]
