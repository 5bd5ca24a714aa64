"""``ordo vacuum``: delete data files that no retained version references.

Files stay on storage after a commit removes them from the live set, so time
travel keeps working (DESIGN section 2). Vacuum bounds that: with a retention
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
and commit) and that were last modified more than ``H`` hours ago; the
``_staging`` area of running writes is never touched.

Dry run by default: ``plan_vacuum`` only lists; ``apply_vacuum`` deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ordo.errors import OrdoError, VersionNotFoundError
from ordo.files import filesystem

log = logging.getLogger("ordo.vacuum")

STAGING_DIR = "_staging"


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
    missing: list[str] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        """Bytes freed."""
        return sum(f.size_bytes for f in self.deleted)


def _join(location: str, path: str) -> str:
    return location.rstrip("/") + "/" + path


def plan_vacuum(
    catalog: Any, table: str, retain_hours: float, *, now: datetime | None = None, orphans: bool = False
) -> VacuumPlan:
    """The files of ``table`` that no version inside the retention window references (see the module docstring)."""
    if retain_hours < 0:
        raise VacuumError(f"retention must be >= 0 hours, not {retain_hours:g}")
    info = catalog.table(table)
    if info.error is not None:
        raise VacuumError(
            f"table {table!r} is stopped at version {info.head_version} by a broken decision log "
            f"(offset {info.error_offset}); repair it before vacuuming"
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
    existing = _existing(candidates)
    gone = len(candidates) - len(existing)
    result = existing
    if orphans:
        result = result + _orphans(location, set(added), live, boundary_time)
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
    catalog: Any, plan: VacuumPlan, *, on_delete: Callable[[VacuumFile], None] | None = None
) -> VacuumResult:
    """Delete the plan's files, re-checking first that none is live at the head or at the boundary now."""
    head = catalog.snapshot(plan.table)
    live = {f.path for f in head.files}
    if plan.boundary_version is not None:
        live |= {f.path for f in catalog.snapshot(plan.table, version=plan.boundary_version).files}
    result = VacuumResult()
    for item in plan.files:
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


__all__ = ["VacuumError", "VacuumFile", "VacuumPlan", "VacuumResult", "apply_vacuum", "plan_vacuum"]
