"""VACUUM and RESTORE of a table, as ``DeltaTable.vacuum`` and ``DeltaTable.restoreToVersion`` run them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ordo.producer.commit import Change
from ordo.producer.data import InvalidOperationError
from ordo.schemas import DataFile, Operation
from ordo.schemas.models import MAX_FILES_PER_INTENT

if TYPE_CHECKING:
    from ordo.producer.handle import TableHandle
    from ordo.producer.results import CommitResult
    from ordo.producer.table import DeltaTable

DEFAULT_RETENTION_HOURS = 168.0  # Delta's vacuum default and safety floor
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"


def vacuum(table: TableHandle, hours: float, dry_run: bool) -> list[str]:
    """Delete the files of ``table`` no version within ``hours`` references (only list them with ``dry_run``).

    Below Delta's floor of 168 hours only with the Spark conf
    ``spark.databricks.delta.retentionDurationCheck.enabled=false``, which also
    lifts the table's ``ordo.retention_hours`` (the window RESTORE relies on).
    """
    from ordo.services.vacuum import VacuumError, apply_vacuum, plan_vacuum

    force = str(table.spark.conf.get(RETENTION_CHECK_CONF, "true")).lower() == "false"
    if hours < DEFAULT_RETENTION_HOURS and not force:
        raise VacuumError(
            f"vacuum with a retention of {hours:g} hours is below the safety floor of "
            f"{DEFAULT_RETENTION_HOURS} hours; set {RETENTION_CHECK_CONF}=false to allow it"
        )
    plan = plan_vacuum(table.catalog, table.name, hours, force=force)
    if dry_run:
        return [f.path for f in plan.files]
    deleted: list[str] = []
    apply_vacuum(table.catalog, plan, on_delete=lambda f: deleted.append(f.path))
    return deleted


def restore(table: DeltaTable, target: Any) -> CommitResult:
    """One RESTORE commit of ``table`` to the snapshot ``target``: re-add its files not live now (metadata only).

    The table's CHECK constraints stay (a RESTORE keeps the metadata): when it has some, the rows of ``target``
    are checked against them first, in one Spark job (``ConstraintViolationError``: a constraint added since).
    """
    from ordo.producer.data import check_rows, table_constraints

    head = table.catalog.snapshot(table.name)
    constraints = table_constraints(table.catalog.table(table.name).metadata.properties)
    if constraints:
        check_rows(table.read(version=target.id_version), constraints, f"version {target.id_version} of {table.name}")
    live = {f.path for f in head.files}
    added = tuple(
        DataFile(
            path=f.path,
            partition=dict(f.partition),
            record_count=f.record_count,
            size_bytes=f.size_bytes,
            min_key=f.min_key,
            max_key=f.max_key,
            bucket=f.bucket,
        )
        for f in target.files
        if f.path not in live
    )
    if len(added) > MAX_FILES_PER_INTENT:
        raise InvalidOperationError(
            f"restoring version {target.id_version} re-adds {len(added)} files, more than the "
            f"{MAX_FILES_PER_INTENT} one commit may name: restore with rewrite=True"
        )
    change = Change(
        table.name, Operation.RESTORE, added_files=added, writer=table._writer, restore_version=target.id_version
    )
    what = f"RESTORE {table.name} TO VERSION {target.id_version}"
    return table._committer().commit(change, what, read_version=head.id_version)
