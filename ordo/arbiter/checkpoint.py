"""Checkpoints of the arbiter's table state, so that a restart folds only the tail of the decisions log.

A checkpoint is a snapshot of one table's ``TableState`` plus the offset of the
last decision record folded into it. Restarting = load the checkpoint, check it
against the log, fold the records after that offset. The decisions log stays
the only source of truth: a checkpoint is a cache of a fold over it, and any
checkpoint that cannot be proven to be such a fold is thrown away for a full
replay (never used to guess).

How a checkpoint is proven (the Kafka half is in ``arbiter.loader``):

1. the file's SHA-256 trailer matches its content (torn writes, bit rot);
2. its format fingerprint matches this code: the shape of ``TableState`` and its
   parts, the dedupe and lineage windows, the operation classes, the Python
   ``marshal`` format. A core that folds differently cannot reuse old state;
3. it names this table;
4. the decision record at ``log_offset`` in the decisions topic exists and
   ``chain_hash(record) == state.chain``, and it answers
   ``state.last_intent_offset``: the state is a fold of *this* log up to there
   (a recreated topic, a restarted in-memory broker or a foreign file fails).

Files are written atomically (temporary file in the same directory, fsync,
rename, fsync of the directory), so a crash leaves the old checkpoint or the
new one, never a mix. The body uses ``marshal`` over plain built-in values
(no pickle: loading cannot run code). The state directory must still be
private to the arbiter (mode 0700): whoever can write there can hand it a
wrong but well-formed state. ``ordo replay --verify`` would expose the
decisions that followed from it.

Why the layout looks the way it does: with a million decisions of history the
state is dominated by the dedupe window (``arbiter.core.DEDUPE_WINDOW`` txn ids
and their answers). Building a million ``TxnRecord`` objects at load costs
seconds, so the window is stored as plain tuples and loaded into
``CheckpointTxns``, an ``OrderedDict`` that turns a tuple into a ``TxnRecord``
only when the core looks that txn id up (a repeated intent). Order and contents
are those of the original window, so decisions are unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import os
import struct
import sys
import tempfile
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ordo.arbiter.core import (
    DEDUPE_WINDOW,
    LINEAGE_WINDOW,
    Lineage,
    PartitionState,
    TableState,
    TxnRecord,
    datetime_to_millis,
    millis_to_datetime,
)
from ordo.arbiter.policy import OpClass, table_policy
from ordo.schemas import Outcome, TableMetadata
from ordo.schemas.errors import OrdoError

FORMAT_VERSION = 3  # 2: data versions of live files and the write ids of accepted commits; 3: RESTORE's stays
MAGIC = b"ORDOCKPT"
SUFFIX = ".ckpt"
_HEADER_LEN = struct.Struct("<I")
_DIGEST_LEN = 32

# The state the serializer below knows how to write. If the core's dataclasses
# change shape, the fingerprint changes and old checkpoints are refused; if
# they change in a way this module does not know, checkpoints are disabled
# (``supported()``) rather than written incompletely.
_KNOWN_FIELDS = {
    TableState: (
        "table",
        "metadata",
        "policy",
        "head_version",
        "head_time_ms",
        "last_intent_offset",
        "decisions",
        "chain",
        "partitions",
        "whole",
        "any_scope",
        "files",
        "data_versions",
        "write_ids",
        "txns",
        "batches",
        "lineage",
        "lineage_order",
        "added_at",
        "gone",
        "gone_order",
        "restore_floor",
        "retention_ms",
    ),
    TxnRecord: (
        "offset",
        "outcome",
        "id_version",
        "time_version",
        "reason",
        "message",
        "conflicting_txn_id",
        "conflicting_version",
    ),
    Lineage: ("version", "txn_id", "inputs", "outputs"),
    PartitionState: ("live", "last"),
}


class CheckpointError(OrdoError):
    """Raised when a checkpoint file cannot be used (missing, corrupt, foreign, or written by other code)."""


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def supported() -> bool:
    """True when this module knows every field of the core's state (else checkpoints are off)."""
    return all(_field_names(cls) == names for cls, names in _KNOWN_FIELDS.items())


def fingerprint() -> str:
    """Identity of the state format: changes whenever a checkpoint of this code would not fit other code."""
    parts = {
        "format": FORMAT_VERSION,
        "fields": {cls.__name__: _field_names(cls) for cls in _KNOWN_FIELDS},
        "dedupe_window": DEDUPE_WINDOW,
        "lineage_window": LINEAGE_WINDOW,
        "op_classes": [c.name for c in OpClass],
        "marshal": marshal.version,
        "python": list(sys.version_info[:2]),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class CheckpointTxns(OrderedDict):  # type: ignore[type-arg]
    """The dedupe window as loaded from a checkpoint: values stay tuples until looked up.

    ``get`` and ``[]`` return a ``TxnRecord`` (converting, and caching, a tuple
    on first access); order, length and eviction behave as the ``OrderedDict``
    the core keeps. Iterating ``values()`` may yield raw tuples.
    """

    def get(self, key: Any, default: Any = None) -> Any:
        """The ``TxnRecord`` of txn id ``key``, or ``default``."""
        value = OrderedDict.get(self, key, _MISSING)
        if value is _MISSING:
            return default
        if type(value) is tuple:
            value = _record(value)
            OrderedDict.__setitem__(self, key, value)  # an existing key keeps its position
        return value

    def __getitem__(self, key: Any) -> Any:
        value = OrderedDict.__getitem__(self, key)
        if type(value) is tuple:
            value = _record(value)
            OrderedDict.__setitem__(self, key, value)
        return value


_MISSING = object()


def _row(record: Any) -> tuple[Any, ...]:
    if type(record) is tuple:
        return record
    time_version = record.time_version
    return (
        record.offset,
        record.outcome is Outcome.ACCEPTED,
        record.id_version,
        None if time_version is None else datetime_to_millis(time_version),
        record.reason,
        record.message,
        record.conflicting_txn_id,
        record.conflicting_version,
    )


def _record(row: tuple[Any, ...]) -> TxnRecord:
    offset, accepted, id_version, time_ms, reason, message, conflicting_txn_id, conflicting_version = row
    return TxnRecord(
        offset,
        Outcome.ACCEPTED if accepted else Outcome.REJECTED,
        id_version,
        None if time_ms is None else millis_to_datetime(time_ms),
        reason,
        message,
        conflicting_txn_id,
        conflicting_version,
    )


# --------------------------------------------------------------------------- state <-> bytes


def dump_state(state: TableState) -> bytes:
    """Serialize ``state`` (marshal over built-in values); ``CheckpointError`` if it is not self-consistent."""
    if not supported():
        raise CheckpointError("the arbiter core's state has fields this checkpoint format does not know")
    order = list(state.lineage_order)
    index = {id(entry): i for i, entry in enumerate(order)}
    refs: list[tuple[str, int]] = []
    for path, entry in state.lineage.items():
        position = index.get(id(entry))
        if position is None:
            raise CheckpointError(f"lineage of {path!r} is not in the lineage order (inconsistent state)")
        refs.append((path, position))
    partitions = [(key, part.live, tuple(part.last)) for key, part in state.partitions.items()]
    if sum(len(part.live) for part in state.partitions.values()) != len(state.files):
        raise CheckpointError("live files per partition do not add up to the table's live files (inconsistent state)")
    if len(state.data_versions) != len(state.files) or len(state.added_at) != len(state.files):
        raise CheckpointError("data or added versions do not cover exactly the live files (inconsistent state)")
    body = (
        state.table,
        None if state.metadata is None else state.metadata.model_dump_json(),
        state.head_version,
        state.head_time_ms,
        state.last_intent_offset,
        state.decisions,
        state.chain,
        partitions,
        tuple(state.whole),
        tuple(state.any_scope),
        (list(state.txns.keys()), [_row(value) for value in state.txns.values()]),
        dict(state.batches),
        [(e.version, e.txn_id, e.inputs, e.outputs) for e in order],
        refs,
        dict(state.data_versions),
        set(state.write_ids),
        dict(state.added_at),
        dict(state.gone),
        list(state.gone_order),
        state.restore_floor,
        state.retention_ms,
    )
    return marshal.dumps(body)


def load_state(data: bytes) -> TableState:
    """Inverse of ``dump_state``; ``CheckpointError`` if ``data`` is not such a body."""
    try:
        return _load_state(data)
    except CheckpointError:
        raise
    except Exception as exc:  # a body that passed the checksum but has another shape: written by other code
        raise CheckpointError(f"checkpoint body does not decode: {type(exc).__name__}: {exc}") from exc


def _load_state(data: bytes) -> TableState:
    (
        table,
        metadata_json,
        head_version,
        head_time_ms,
        last_intent_offset,
        decisions,
        chain,
        partitions,
        whole,
        any_scope,
        (txn_keys, txn_rows),
        batches,
        lineage_entries,
        lineage_refs,
        data_versions,
        write_ids,
        added_at,
        gone,
        gone_order,
        restore_floor,
        retention_ms,
    ) = marshal.loads(data)
    metadata = None if metadata_json is None else TableMetadata.model_validate_json(metadata_json)
    policy = None
    if metadata is not None:
        policy = table_policy(metadata)
    state = TableState(
        table=table,
        metadata=metadata,
        policy=policy,
        head_version=head_version,
        head_time_ms=head_time_ms,
        last_intent_offset=last_intent_offset,
        decisions=decisions,
        chain=chain,
    )
    files: dict[Any, Any] = {}
    for key, live, last in partitions:
        state.partitions[key] = PartitionState(live, list(last))
        files.update(dict.fromkeys(live, key))
    state.files = files
    if data_versions.keys() != files.keys():
        raise CheckpointError("data versions do not cover exactly the live files")
    state.data_versions = data_versions
    if added_at.keys() != files.keys():
        raise CheckpointError("added versions do not cover exactly the live files")
    state.added_at = added_at
    state.gone = gone
    state.gone_order = deque(gone_order)
    state.restore_floor = restore_floor
    state.retention_ms = retention_ms
    state.write_ids = write_ids
    state.whole = list(whole)
    state.any_scope = list(any_scope)
    state.txns = CheckpointTxns(zip(txn_keys, txn_rows, strict=True))
    state.batches = batches
    entries = [Lineage(version, txn_id, inputs, outputs) for version, txn_id, inputs, outputs in lineage_entries]
    state.lineage_order = deque(entries)
    state.lineage = {path: entries[position] for path, position in lineage_refs}
    return state


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Checkpoint:
    """A table state and the decisions-log offset of the last record folded into it."""

    table: str
    log_offset: int
    state: TableState
    written_at: float
    size: int


def checkpoint_path(state_dir: str | os.PathLike[str], prefix: str, table: str) -> Path:
    """Where the checkpoint of ``table`` under topic ``prefix`` lives: ``<state_dir>/<prefix>/<table>.ckpt``."""
    return Path(state_dir) / prefix / f"{table}{SUFFIX}"


def encode_checkpoint(log_offset: int, state: TableState) -> bytes:
    """The bytes of a checkpoint file: magic, header length, JSON header, body, SHA-256 of all before it."""
    body = dump_state(state)
    header = json.dumps(
        {
            "format": FORMAT_VERSION,
            "fingerprint": fingerprint(),
            "table": state.table,
            "log_offset": log_offset,
            "chain": state.chain.hex(),
            "decisions": state.decisions,
            "head_version": state.head_version,
            "last_intent_offset": state.last_intent_offset,
            "written_at": time.time(),
            "body_len": len(body),
        },
        sort_keys=True,
    ).encode()
    content = MAGIC + _HEADER_LEN.pack(len(header)) + header + body
    return content + hashlib.sha256(content).digest()


def decode_checkpoint(data: bytes, table: str) -> Checkpoint:
    """Check and read checkpoint bytes for ``table``; ``CheckpointError`` saying why they cannot be used."""
    if len(data) < len(MAGIC) + _HEADER_LEN.size + _DIGEST_LEN or not data.startswith(MAGIC):
        raise CheckpointError("not a checkpoint file (bad magic or too short)")
    content, digest = data[:-_DIGEST_LEN], data[-_DIGEST_LEN:]
    if hashlib.sha256(content).digest() != digest:
        raise CheckpointError("checksum mismatch (torn write or corruption)")
    (header_len,) = _HEADER_LEN.unpack_from(content, len(MAGIC))
    start = len(MAGIC) + _HEADER_LEN.size
    try:
        header = json.loads(content[start : start + header_len])
    except ValueError as exc:
        raise CheckpointError(f"unreadable header: {exc}") from exc
    if header.get("format") != FORMAT_VERSION or header.get("fingerprint") != fingerprint():
        raise CheckpointError("written by a different version of the arbiter core (state format changed)")
    if header.get("table") != table:
        raise CheckpointError(f"belongs to table {header.get('table')!r}, not {table!r}")
    body = content[start + header_len :]
    if len(body) != header.get("body_len"):
        raise CheckpointError("body length does not match the header")
    state = load_state(body)
    if (
        state.table != table
        or state.chain.hex() != header["chain"]
        or state.decisions != header["decisions"]
        or state.last_intent_offset != header["last_intent_offset"]
    ):
        raise CheckpointError("header and body disagree")
    log_offset = header["log_offset"]
    if not isinstance(log_offset, int) or log_offset < 0:
        raise CheckpointError(f"invalid log offset {log_offset!r}")
    return Checkpoint(table, log_offset, state, float(header["written_at"]), len(data))


def write_checkpoint(path: str | os.PathLike[str], log_offset: int, state: TableState) -> int:
    """Write the checkpoint of ``state`` (folded up to decisions-log ``log_offset``) atomically; returns its size.

    1. serialize everything in memory;
    2. write a temporary file in the target directory and fsync it;
    3. rename it over the old checkpoint (atomic on POSIX);
    4. fsync the directory so the rename itself survives a power cut.
    """
    data = encode_checkpoint(log_offset, state)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)
    return len(data)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_checkpoint(path: str | os.PathLike[str], table: str) -> Checkpoint:
    """Read and check the checkpoint at ``path``; ``CheckpointError`` if missing or unusable."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CheckpointError("no checkpoint file") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc}") from exc
    return decode_checkpoint(data, table)


def remove_stale_temporaries(directory: str | os.PathLike[str], older_than: float = 60.0) -> int:
    """Delete temporary files a crashed writer left in ``directory``; returns how many."""
    removed = 0
    now = time.time()
    try:
        entries = list(Path(directory).glob(f".*{SUFFIX}.*.tmp"))
    except OSError:
        return 0
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > older_than:
                entry.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def states_equal(a: TableState, b: TableState) -> bool:
    """True when two states hold the same fold (dedupe-window values compared as rows); for tests and tools."""
    if list(a.txns) != list(b.txns):
        return False
    if [_row(v) for v in a.txns.values()] != [_row(v) for v in b.txns.values()]:
        return False
    lineage_a = {p: (e.version, e.txn_id, e.inputs, e.outputs) for p, e in a.lineage.items()}
    lineage_b = {p: (e.version, e.txn_id, e.inputs, e.outputs) for p, e in b.lineage.items()}
    return (
        a.table == b.table
        and a.metadata == b.metadata
        and (a.policy.name if a.policy else None) == (b.policy.name if b.policy else None)
        and (a.head_version, a.head_time_ms, a.last_intent_offset, a.decisions, a.chain)
        == (b.head_version, b.head_time_ms, b.last_intent_offset, b.decisions, b.chain)
        and {k: (p.live, p.last) for k, p in a.partitions.items()}
        == {k: (p.live, p.last) for k, p in b.partitions.items()}
        and a.whole == b.whole
        and a.any_scope == b.any_scope
        and a.files == b.files
        and a.data_versions == b.data_versions
        and a.added_at == b.added_at
        and a.gone == b.gone
        and list(a.gone_order) == list(b.gone_order)
        and (a.restore_floor, a.retention_ms) == (b.restore_floor, b.retention_ms)
        and a.write_ids == b.write_ids
        and a.batches == b.batches
        and list(a.lineage_order) == list(b.lineage_order)
        and lineage_a == lineage_b
    )


__all__ = [
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointTxns",
    "checkpoint_path",
    "decode_checkpoint",
    "dump_state",
    "encode_checkpoint",
    "fingerprint",
    "load_state",
    "read_checkpoint",
    "remove_stale_temporaries",
    "states_equal",
    "supported",
    "write_checkpoint",
]
