"""``ordo vacuum``: delete data files that no retained version references.

Files stay on storage after a commit removes them from the live set, so time
travel keeps working. Vacuum bounds that: with a retention
of ``H`` hours it keeps every version a reader may still ask for, i.e. the
snapshot "as of now - H" (the *retention boundary*, version ``B``) and every
version after it, and deletes a file only when both hold:

1. the commit that removed it has ID version ``<= B``: the file is live in no
   version ``>= B`` (a file never becomes live again once removed);
2. that commit was decided more than ``H`` hours ago (its decision record's
   Kafka timestamp), so a job that pinned an older version less than ``H``
   hours ago still finds its files. Compaction inherits an old time version;
   this wall-clock rule is what protects readers of the version before it.

Files the catalog lists as live, at the head or at ``B``, are never deleted:
the plan is checked against both snapshots again right before anything is
removed. With ``orphans=True`` it also deletes Parquet files under the table
location that no commit ever added (left by writers that died between staging
and commit), but never one a transaction may still commit:

* the ``_staging`` area of running writes is never touched;
* a file last modified less than ``orphan_age_hours`` ago (default
  ``DEFAULT_ORPHAN_AGE_HOURS``; below ``MIN_ORPHAN_AGE_HOURS`` only with
  ``force``) may belong to a writer that has not published its intent yet;
* a file an *undecided* intent names, or whose name
  (``<partition path>/<txn id>-<n>.parquet``) carries the transaction id of
  one, may still be accepted. Undecided means: in the intents log after the
  last intent the catalog knows as decided. The catalog is read first, the
  intents log's tail after it, so an intent the catalog has not seen decided
  yet (the arbiter may have decided it, the consumer not applied it) counts as
  undecided: lag only keeps more files. ``apply_vacuum`` reads both again right
  before deleting.

A retention below the table's ``ordo.retention_hours`` (default 168) is
refused unless ``force``: a RESTORE may re-add any file removed within that
window (the arbiter refuses older ones as ``FILE_VACUUMED``, docs/conflicts.md),
so vacuum must not delete them.

Dry run by default: ``plan_vacuum`` only lists; ``apply_vacuum`` deletes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ordo.arbiter.core import RETENTION_PROPERTY, restore_retention_ms
from ordo.kernel.errors import OrdoError, VersionNotFoundError
from ordo.schemas.paths import STAGING_DIR
from ordo.services.files import filesystem

log = logging.getLogger("ordo.vacuum")

DEFAULT_ORPHAN_AGE_HOURS = 24.0  # an orphan younger than this may be a running writer's file
MIN_ORPHAN_AGE_HOURS = 1.0  # going below this needs ``force``: longer than any sane write + publish
_TXN_FILE = re.compile(r"(?P<txn>.+)-\d+\.parquet")


class VacuumError(OrdoError):
    """Raised when a table cannot be vacuumed safely (its catalog stopped at a broken log, or a bad retention)."""


@dataclass(frozen=True, slots=True)
class VacuumFile:
    """A file vacuum would delete, and why it may."""

    path: str
    absolute_path: str
    size_bytes: int
    kind: str  # "removed" (by a commit) or "orphan" (never committed)
    removed_version: int | None
    removed_at: datetime | None


@dataclass(frozen=True)
class VacuumPlan:
    """What ``apply_vacuum`` would delete for one table."""

    table: str
    location: str
    retain_hours: float
    now: datetime
    boundary_time: datetime
    boundary_version: int | None  # None: the boundary lies before the table's creation
    head_version: int
    files: tuple[VacuumFile, ...]
    kept_removed: int  # files removed from the live set but still inside the retention window
    already_gone: int  # removed files no longer on storage (an earlier vacuum, or deleted by hand)

    @property
    def size_bytes(self) -> int:
        """Bytes the plan would free."""
        return sum(f.size_bytes for f in self.files)


@dataclass
class VacuumResult:
    """What ``apply_vacuum`` did."""

    deleted: list[VacuumFile] = field(default_factory=list)
    skipped_live: list[str] = field(default_factory=list)
    skipped_pending: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        """Bytes freed."""
        return sum(f.size_bytes for f in self.deleted)


@dataclass(frozen=True)
class PendingIntents:
    """What the undecided intents of a table name: files and transaction ids (their files are kept)."""

    from_offset: int  # the first intents-log offset not known as decided
    end_offset: int  # the intents log's end when it was read
    paths: frozenset[str] = frozenset()
    txn_ids: frozenset[str] = frozenset()

    def protects(self, path: str) -> bool:
        """True when ``path`` is named by an undecided intent or carries the transaction id of one."""
        if path in self.paths:
            return True
        match = _TXN_FILE.fullmatch(path.rsplit("/", 1)[-1])
        return match is not None and match.group("txn") in self.txn_ids


# Reads the intents of a table from an offset to the log's end: (table, from_offset) -> PendingIntents.
IntentsReader = Callable[[str, int], PendingIntents]


def first_undecided_offset(catalog: Any, table: str) -> int:
    """The intents-log offset after the last intent the catalog knows as decided (0 if none)."""
    return max((d.intent_offset for d in catalog.history(table)), default=-1) + 1


def check_orphan_age(hours: float, *, force: bool = False) -> None:
    """Refuse an orphan age below ``MIN_ORPHAN_AGE_HOURS`` unless ``force`` (and any negative one)."""
    if hours < 0:
        raise VacuumError(f"orphan age must be >= 0 hours, not {hours:g}")
    if hours < MIN_ORPHAN_AGE_HOURS and not force:
        raise VacuumError(
            f"orphan age {hours:g} h is below the safe floor of {MIN_ORPHAN_AGE_HOURS:g} h: a writer still staging "
            "or publishing may own such files (pass --force to go below it anyway)"
        )


def kafka_intents_reader(settings: Any, timeout: float = 30.0) -> IntentsReader:
    """An ``IntentsReader`` over the broker of ``settings`` (read_uncommitted: it sees every intent there is)."""

    def read(table: str, from_offset: int) -> PendingIntents:
        return read_pending_intents(settings, table, from_offset, timeout)

    return read


def read_pending_intents(settings: Any, table: str, from_offset: int, timeout: float = 30.0) -> PendingIntents:
    """The files and transaction ids named by ``table``'s intents at ``from_offset`` and after."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    from ordo.kernel.admin import existing_topics
    from ordo.schemas import CommitIntent, decode, intents_topic

    topic = intents_topic(settings.topic_prefix, table)
    try:
        topics = existing_topics(
            AdminClient(settings.kafka_config(**{"client.id": f"{settings.topic_prefix}.vacuum.admin"})),
            timeout=timeout,
        )
    except OrdoError as exc:
        raise VacuumError(f"cannot read the intents log of {table!r} to protect undecided intents: {exc}") from exc
    if topic not in topics:
        return PendingIntents(from_offset, from_offset)  # no intent was ever published
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{settings.topic_prefix}.vacuum",  # never joined: assign() only
                "client.id": f"{settings.topic_prefix}.vacuum",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "enable.partition.eof": True,
                "allow.auto.create.topics": False,
                "fetch.wait.max.ms": 20,
            }
        )
    )
    paths: set[str] = set()
    txn_ids: set[str] = set()
    try:
        try:
            consumer.list_topics(timeout=timeout)
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        except KafkaException as exc:
            raise VacuumError(f"cannot read the intents log {topic}: {exc.args[0]}") from exc
        if high <= from_offset:
            return PendingIntents(from_offset, high)
        consumer.assign([TopicPartition(topic, 0, from_offset)])
        deadline = time.monotonic() + timeout
        while True:
            message = consumer.poll(0.2)
            if message is None:
                if time.monotonic() > deadline:
                    raise VacuumError(f"reading the intents log {topic} did not reach its end within {timeout:g} s")
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return PendingIntents(from_offset, message.offset() or high, frozenset(paths), frozenset(txn_ids))
                if error.fatal():
                    raise VacuumError(f"reading the intents log {topic}: {error.str()}")
                continue
            deadline = time.monotonic() + timeout
            try:
                intent = decode(message.value() or b"")
            except Exception:
                continue  # the arbiter rejects it as malformed: it names no file that can be committed
            if isinstance(intent, CommitIntent):
                txn_ids.add(intent.txn_id)
                paths.update(f.path for f in intent.added_files)
    finally:
        consumer.close()


def _join(location: str, path: str) -> str:
    return location.rstrip("/") + "/" + path


def plan_vacuum(
    catalog: Any,
    table: str,
    retain_hours: float,
    *,
    now: datetime | None = None,
    orphans: bool = False,
    intents: IntentsReader | None = None,
    orphan_age_hours: float = DEFAULT_ORPHAN_AGE_HOURS,
    force: bool = False,
) -> VacuumPlan:
    """The files of ``table`` that no version inside the retention window references (see the module docstring).

    ``orphans`` needs ``intents`` (see ``kafka_intents_reader``): without the
    intents log it cannot know which files an undecided intent names.
    """
    if retain_hours < 0:
        raise VacuumError(f"retention must be >= 0 hours, not {retain_hours:g}")
    if orphans:
        check_orphan_age(orphan_age_hours, force=force)
        if intents is None:
            raise VacuumError("deleting orphans needs the intents log (the broker) to keep undecided intents' files")
    info = catalog.table(table)
    if info.error is not None:
        raise VacuumError(
            f"table {table!r} is stopped at version {info.head_version} by a broken decision log "
            f"(offset {info.error_offset}: {info.error}); repair it (ordo repair {table}) before vacuuming"
        )
    restorable = restore_retention_ms(info.metadata) / 3_600_000
    if retain_hours < restorable and not force:
        raise VacuumError(
            f"a retention of {retain_hours:g} hours is below table {table!r}'s {RETENTION_PROPERTY} of "
            f"{restorable:g}: a RESTORE may still re-add files removed within it (pass --force to vacuum them anyway)"
        )
    now = now or datetime.now(UTC)
    boundary_time = now - timedelta(hours=retain_hours)
    location = info.metadata.location
    try:
        boundary = catalog.snapshot(table, timestamp=boundary_time)
        boundary_version: int | None = boundary.id_version
        boundary_live = {f.path for f in boundary.files}
    except VersionNotFoundError:  # the boundary lies before the table existed: every version is retained
        boundary_version, boundary_live = None, set()
    head = catalog.snapshot(table)
    live = {f.path for f in head.files} | boundary_live
    decided_at = {
        d.id_version: d.log_timestamp for d in catalog.history(table) if d.accepted and d.duplicate_of is None
    }
    added: dict[str, Any] = {}
    removed_by: dict[str, int] = {}
    for commit in catalog.commits(table, 0, head.id_version, include_rewrites=True):
        for entry in commit.added_files:
            added[entry.path] = entry
        for path in commit.removed_files:
            removed_by[path] = commit.id_version
    candidates: list[VacuumFile] = []
    kept = 0
    for path, version in sorted(removed_by.items()):
        when = decided_at.get(version)
        retained = boundary_version is None or version > boundary_version or when is None or when > boundary_time
        if retained or path in live:  # live at the boundary or head: removed after B (never re-added)
            kept += 1
            continue
        entry = added.get(path)
        absolute = entry.absolute_path if entry is not None else _join(location, path)
        size = entry.size_bytes if entry is not None else 0
        candidates.append(VacuumFile(path, absolute, size, "removed", version, when))
    pending: PendingIntents | None = None
    if intents is not None:  # the catalog was read above; the intents log's tail only now
        pending = intents(table, first_undecided_offset(catalog, table))
        candidates = [f for f in candidates if not pending.protects(f.path)]
    existing = _existing(candidates)
    gone = len(candidates) - len(existing)
    result = existing
    if orphans:
        assert pending is not None
        found = _orphans(location, set(added), live, now - timedelta(hours=orphan_age_hours))
        result = result + [f for f in found if not pending.protects(f.path)]
    return VacuumPlan(
        table=table,
        location=location,
        retain_hours=retain_hours,
        now=now,
        boundary_time=boundary_time,
        boundary_version=boundary_version,
        head_version=head.id_version,
        files=tuple(result),
        kept_removed=kept,
        already_gone=gone,
    )


def _existing(files: list[VacuumFile]) -> list[VacuumFile]:
    """The files still on storage (one metadata call per filesystem)."""
    from pyarrow import fs as pafs

    by_fs: dict[int, tuple[Any, list[tuple[VacuumFile, str]]]] = {}
    for f in files:
        filesys, path = filesystem(f.absolute_path)
        by_fs.setdefault(id(type(filesys)), (filesys, []))[1].append((f, path))
    keep: list[VacuumFile] = []
    for filesys, items in by_fs.values():
        infos = filesys.get_file_info([p for _, p in items])
        keep.extend(f for (f, _), i in zip(items, infos, strict=True) if i.type == pafs.FileType.File)
    return keep


def _orphans(location: str, committed: set[str], live: set[str], older_than: datetime) -> list[VacuumFile]:
    """Parquet files under ``location`` no commit added, modified before ``older_than`` (staging excluded)."""
    from pyarrow import fs as pafs

    filesys, root = filesystem(location)
    root = root.rstrip("/")
    try:
        infos = filesys.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise VacuumError(f"cannot list the table location {location}: {exc}") from exc
    found = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.path.endswith(".parquet"):
            continue
        relative = info.path[len(root) + 1 :]
        if relative.split("/", 1)[0] == STAGING_DIR or relative in committed or relative in live:
            continue
        mtime = info.mtime
        if mtime is None:
            continue
        if mtime.tzinfo is None:
            mtime = mtime.replace(tzinfo=UTC)
        if mtime > older_than:
            continue
        found.append(VacuumFile(relative, _join(location, relative), int(info.size or 0), "orphan", None, mtime))
    return sorted(found, key=lambda f: f.path)


def apply_vacuum(
    catalog: Any,
    plan: VacuumPlan,
    *,
    on_delete: Callable[[VacuumFile], None] | None = None,
    intents: IntentsReader | None = None,
) -> VacuumResult:
    """Delete the plan's files, re-checking first that none is live at the head or at the boundary now.

    With ``intents`` (required when the plan holds orphans) the intents log's
    tail is read again and no file an undecided intent names is deleted.
    """
    if intents is None and any(f.kind == "orphan" for f in plan.files):
        raise VacuumError("deleting orphans needs the intents log (the broker) to keep undecided intents' files")
    head = catalog.snapshot(plan.table)
    live = {f.path for f in head.files}
    if plan.boundary_version is not None:
        live |= {f.path for f in catalog.snapshot(plan.table, version=plan.boundary_version).files}
    pending = intents(plan.table, first_undecided_offset(catalog, plan.table)) if intents is not None else None
    result = VacuumResult()
    for item in plan.files:
        if pending is not None and pending.protects(item.path):
            log.warning("not deleting %s: an undecided intent names it", item.path)
            result.skipped_pending.append(item.path)
            continue
        if item.path in live:
            log.warning("not deleting %s: it is live", item.path)
            result.skipped_live.append(item.path)
            continue
        filesys, path = filesystem(item.absolute_path)
        try:
            filesys.delete_file(path)
        except FileNotFoundError:
            result.missing.append(item.path)
            continue
        except OSError as exc:
            raise VacuumError(f"cannot delete {item.absolute_path}: {exc}") from exc
        result.deleted.append(item)
        if on_delete is not None:
            on_delete(item)
    return result


__all__ = [
    "DEFAULT_ORPHAN_AGE_HOURS",
    "MIN_ORPHAN_AGE_HOURS",
    "IntentsReader",
    "PendingIntents",
    "VacuumError",
    "VacuumFile",
    "VacuumPlan",
    "VacuumResult",
    "apply_vacuum",
    "check_orphan_age",
    "first_undecided_offset",
    "kafka_intents_reader",
    "plan_vacuum",
    "read_pending_intents",
]
