"""The read-side commands of the CLI: ``tables``, ``history``, ``show``, ``changes``, ``tail``, ``vacuum``.

Each reads the consumer's catalog through ``consumer.Catalog`` (``ORDO_CATALOG``:
the SQLite file or the consumer's ``http://`` URL), so they work the same
next to the consumer and from another machine. Output is a ``rich`` table,
or JSON with ``--json`` for scripts. Errors are ``OrdoError``s with a one-sentence
message; ``ordo.cli`` prints them as ``error: ...``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ordo.kernel.errors import OrdoError
from ordo.schemas.operations import delta_operation

if TYPE_CHECKING:
    from rich.console import Console

    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit, DecisionRecord
    from ordo.kernel.settings import Settings


class CommandError(OrdoError, ValueError):
    """Raised for a bad command-line value (a version that is not a number, a malformed timestamp)."""


# --------------------------------------------------------------------------- helpers


def make_console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); wide enough for the tables when not on a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def open_catalog(settings: Settings) -> Catalog:
    """The consumer's catalog named by the settings (``ORDO_CATALOG``)."""
    from ordo.consumer.catalog import Catalog

    return Catalog(settings.catalog)


def parse_version(text: str | int | None, what: str = "version") -> int | None:
    """An ID version from the command line: a whole number >= 0."""
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise CommandError(f"bad {what} {text!r}: an ID version is a whole number >= 0") from None
    if value < 0:
        raise CommandError(f"bad {what} {text!r}: an ID version is a whole number >= 0")
    return value


def parse_timestamp(text: str | None, what: str = "timestamp") -> int | None:
    """A timestamp from the command line (ISO 8601, or epoch milliseconds) as epoch milliseconds."""
    if text is None:
        return None
    from ordo.consumer.catalog import to_millis

    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        return to_millis(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise CommandError(
            f"bad {what} {text!r}: use ISO 8601 (2024-05-01T12:00:00Z, a date, or with an offset) or epoch milliseconds"
        ) from None


def fmt_time(value: datetime | None) -> str:
    """``2024-05-01 12:00:00.123Z`` (UTC, milliseconds); empty for None."""
    if value is None:
        return ""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def fmt_bytes(size: int) -> str:
    """Human-readable size."""
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{size} B"


def fmt_scope(partitions: Sequence[Mapping[str, str]] | None) -> str:
    """``dt=2024-05-01`` per partition, or ``table`` for a whole-table scope."""
    if partitions is None:
        return "table"
    return ", ".join("/".join(f"{k}={v}" for k, v in p.items()) for p in partitions) or "-"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    """JSON on stdout (datetimes as ISO 8601)."""
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default) + "\n")


def outcome_text(decision: DecisionRecord) -> str:
    """``accepted`` / ``rejected`` / ``duplicate`` with rich markup."""
    if decision.duplicate_of is not None:
        return "[dim]duplicate[/dim]"
    return "[green]accepted[/green]" if decision.accepted else "[red]rejected[/red]"


def history_table(decisions: Sequence[DecisionRecord], title: str | None = None, *, txn: bool = True) -> Any:
    """A rich table of decisions: version, time version, operation, outcome, reason, rebase, scope (and txn)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    names = ["version", "time version", "operation", "outcome", "reason", "vs", "rebase", "read", "scope"]
    for name in [*names, "txn"] if txn else names:
        if name == "scope":
            table.add_column(name, min_width=13, overflow="fold")
        else:
            table.add_column(name, justify="right" if name in ("version", "read") else "left", no_wrap=True)
    for d in decisions:
        if d.time_version is not None:
            time_version = fmt_time(d.time_version)
        else:
            time_version = "[dim](inherited)[/dim]" if d.accepted and d.duplicate_of is None else ""
        operation = d.operation.value if d.operation else "?"
        if d.restore_version is not None:
            operation += f" TO v{d.restore_version}"
        if d.operation is not None and delta_operation(d.operation, d.operation_metrics) == "MERGE":
            operation += " (MERGE)"
        row = [
            "" if d.id_version is None or d.duplicate_of is not None else str(d.id_version),
            time_version,
            operation,
            outcome_text(d),
            d.reason or "",
            "" if d.conflicting_version is None else f"v{d.conflicting_version}",
            "" if d.rebase.value == "NONE" else d.rebase.value.lower(),
            "" if d.read_version is None or operation == "CREATE_TABLE" else str(d.read_version),
            fmt_scope(d.partitions),
        ]
        if txn:
            row.append(d.txn_id[:8])
        table.add_row(*row)
    return table


# --------------------------------------------------------------------------- commands


def check_tables_command(settings: Settings, as_json: bool) -> int:
    """``ordo tables --check``: each table's topics against the durability policy; 1 when any can lose history."""
    from confluent_kafka.admin import AdminClient

    from ordo.kernel.admin import existing_topics, lossy_findings, topic_policy
    from ordo.schemas import parse_topic

    admin = AdminClient(settings.kafka_config(**{"client.id": f"{settings.topic_prefix}.check"}))
    policy = topic_policy(admin, settings)
    by_table: dict[str, list[str]] = {}
    for topic in sorted(existing_topics(admin)):
        parsed = parse_topic(settings.topic_prefix, topic)
        if parsed is not None:
            by_table.setdefault(parsed[0], []).append(topic)
    report = {table: lossy_findings(admin, topics, policy) for table, topics in sorted(by_table.items())}
    bad = {table: findings for table, findings in report.items() if findings}
    if as_json:
        print_json(
            {
                "replication_factor": policy.replication_factor,
                "min_insync_replicas": policy.min_insync_replicas,
                "allow_lossy_logs": policy.allow_lossy,
                "tables": {table: {"durable": not f, "findings": f} for table, f in report.items()},
            }
        )
    else:
        console = make_console()
        console.print(
            f"{len(report)} table(s) under prefix {settings.topic_prefix!r}; required: replication factor >= "
            f"{policy.replication_factor}, min.insync.replicas >= {policy.min_insync_replicas}, infinite retention, "
            "no compaction, no unclean leader election",
            highlight=False,
        )
        for table, findings in report.items():
            console.print(f"{table}: " + ("durable" if not findings else "CAN LOSE HISTORY"), highlight=False)
            for finding in findings:
                console.print(f"  {finding}", highlight=False, soft_wrap=True)
        if bad and policy.allow_lossy:
            console.print(
                "ORDO_ALLOW_LOSSY_LOGS is set: the arbiter and the consumer accept these logs", highlight=False
            )
        elif bad:
            console.print(
                "the arbiter and the consumer refuse these tables; fix the topics or set ORDO_ALLOW_LOSSY_LOGS=true "
                "(development only)",
                highlight=False,
            )
    return 1 if bad and not policy.allow_lossy else 0


def tables_command(settings: Settings, as_json: bool) -> None:
    """``ordo tables``: each table's head, and its layout (files per partition, last compaction, pending work)."""
    from rich.table import Table

    from ordo.services.compactor import table_layout

    catalog = open_catalog(settings)
    infos = catalog.tables()
    layouts: dict[str, dict[str, Any]] = {}
    for i in infos:
        if i.error is None:
            with contextlib.suppress(OrdoError):
                layouts[i.name] = table_layout(catalog, i.name)
    if as_json:
        print_json([{**i.to_dict(), "layout": layouts.get(i.name)} for i in infos])
        return
    console = make_console()
    if not infos:
        console.print(f"no tables in the catalog {catalog.location}")
        return
    table = Table(header_style="bold")
    for name in ("table", "version", "time version", "primary key", "partitioned by", "location", "status"):
        table.add_column(name, justify="right" if name == "version" else "left")
    for i in infos:
        table.add_row(
            i.name,
            str(i.head_version),
            fmt_time(i.head_time_version),
            ", ".join(i.metadata.user_key) or "(keyless)",
            ", ".join(i.metadata.partition_columns) or "-",
            i.metadata.location,
            "ok" if i.error is None else f"[red]stopped at offset {i.error_offset}: {i.error}[/red]",
        )
    console.print(table)
    if not layouts:
        return
    service = Table(header_style="bold", title="layout and table service (ordo compactor)", title_justify="left")
    for name in ("table", "files", "partitions", "max files/partition", "last compaction", "pending"):
        service.add_column(name, justify="right" if name in ("files", "partitions", "max files/partition") else "left")
    for name, lay in layouts.items():
        service.add_row(
            name,
            str(lay["files"]),
            str(lay["partitions"]),
            str(lay["max_files_per_partition"]),
            _fmt_compaction(lay),
            _fmt_pending(lay),
        )
    console.print(service)


def _fmt_compaction(layout: Mapping[str, Any] | None) -> str:
    last = None if layout is None else layout["last_compaction"]
    if last is None:
        return "-"
    return f"{last['operation']} v{last['id_version']} {last['timestamp'][:19]}"


def _fmt_pending(layout: Mapping[str, Any] | None) -> str:
    if layout is None:
        return "-"
    if not layout["compaction_enabled"]:
        return "off" if layout["policy_error"] is None else f"[red]{layout['policy_error']}[/red]"
    counts: dict[str, int] = {}
    for action in layout["pending"]:
        counts[action["operation"]] = counts.get(action["operation"], 0) + 1
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items())) or "none"


def history_command(settings: Settings, table: str, limit: int | None, as_json: bool) -> None:
    """``ordo history TABLE``: every decision, newest first (like DESCRIBE HISTORY)."""
    catalog = open_catalog(settings)
    decisions = catalog.history(table, limit)
    if as_json:
        print_json([d.to_dict() for d in decisions])
        return
    console = make_console()
    console.print(history_table(decisions, title=f"history of {table} (newest first)"))


def show_command(
    settings: Settings, table: str, version: str | None, timestamp: str | None, rows: bool, as_json: bool
) -> None:
    """``ordo show TABLE``: schema, files and rows at the head, a version, or a point in time."""
    from rich.table import Table

    from ordo.services.files import ddl_columns, live_row_count

    if version is not None and timestamp is not None:
        raise CommandError("give --version or --timestamp, not both")
    catalog = open_catalog(settings)
    info = catalog.table(table)
    snapshot = catalog.snapshot(table, version=parse_version(version), timestamp=parse_timestamp(timestamp))
    metadata = snapshot.metadata
    live_rows = live_row_count(snapshot) if rows else None
    partitions: dict[str, list[int]] = {}
    for f in snapshot.files:
        key = fmt_scope([f.partition]) if metadata.partition_columns else "(table)"
        counts = partitions.setdefault(key, [0, 0, 0])
        counts[0] += 1
        counts[1] += f.record_count
        counts[2] += f.size_bytes
    if as_json:
        print_json(
            {
                "table": table,
                "id_version": snapshot.id_version,
                "time_version": snapshot.time_version,
                "head_version": info.head_version,
                "metadata": info.to_dict()["metadata"],
                "files": len(snapshot.files),
                "records_in_files": snapshot.record_count,
                "rows": live_rows,
                "size_bytes": snapshot.size_bytes,
                "partitions": {k: {"files": v[0], "records": v[1], "size_bytes": v[2]} for k, v in partitions.items()},
            }
        )
        return
    console = make_console()
    at = "head" if snapshot.id_version == info.head_version else f"head is {info.head_version}"
    console.print(
        f"[bold]{table}[/bold] at version {snapshot.id_version} ({at}), time {fmt_time(snapshot.time_version)}"
    )
    console.print(f"location {metadata.location}")
    policy = metadata.properties.get("ordo.conflict_policy", "maxcompute")
    console.print(f"conflict policy {policy}")
    schema = Table(title="schema", title_justify="left", header_style="bold")
    schema.add_column("column")
    schema.add_column("type")
    schema.add_column("role")
    for name, data_type in ddl_columns(metadata.user_schema):  # a keyless table's row id is not shown
        role = []
        if name in metadata.user_key:
            role.append("primary key")
        if name in metadata.partition_columns:
            role.append("partition")
        schema.add_row(name, data_type, ", ".join(role))
    console.print(schema)
    rows_text = "" if live_rows is None else f", {live_rows} rows (merge-on-read)"
    console.print(
        f"{len(snapshot.files)} live files, {fmt_bytes(snapshot.size_bytes)}, "
        f"{snapshot.record_count} records in files{rows_text}"
    )
    if metadata.partition_columns and partitions:
        parts = Table(title="partitions", title_justify="left", header_style="bold")
        for name in ("partition", "files", "records", "size"):
            parts.add_column(name, justify="left" if name == "partition" else "right")
        for key in sorted(partitions):
            files, records, size = partitions[key]
            parts.add_row(key, str(files), str(records), fmt_bytes(size))
        console.print(parts)


def _bounds(start: str, end: str | None, by: str) -> tuple[Any, Any]:
    if by == "id":
        return parse_version(start, "--from version"), parse_version(end, "--to version")
    return parse_timestamp(start, "--from timestamp"), parse_timestamp(end, "--to timestamp")


def commits_table(commits: Sequence[Commit], title: str | None = None) -> Any:
    """A rich table of commits: version, time, operation, scope, files and records added, files removed."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("version", "time version", "operation", "scope", "files +", "records +", "files -", "txn"):
        table.add_column(name, justify="right" if name in ("version", "files +", "records +", "files -") else "left")
    for c in commits:
        table.add_row(
            str(c.id_version),
            fmt_time(c.time_version) if c.time_version else "[dim](inherited)[/dim]",
            c.operation.value,
            fmt_scope(c.partitions),
            str(len(c.added_files)),
            str(sum(f.record_count for f in c.added_files)),
            str(len(c.removed_files)),
            c.txn_id[:8],
        )
    return table


def changes_command(
    settings: Settings,
    table: str,
    start: str,
    end: str | None,
    by: str,
    rows: bool,
    limit: int,
    include_rewrites: bool,
    as_json: bool,
) -> None:
    """``ordo changes TABLE --from X --to Y``: the commits (and with ``--rows`` the records) in a range."""
    from rich.table import Table

    from ordo.services.files import change_rows, ddl_columns

    low, high = _bounds(start, end, by)
    catalog = open_catalog(settings)
    info = catalog.table(table)
    commits = catalog.commits(table, low, high, by=by, include_rewrites=include_rewrites)
    columns = [name for name, _ in ddl_columns(info.metadata.schema)]
    records = change_rows(catalog, table, commits) if rows else None
    if as_json:
        data: dict[str, Any] = {"table": table, "by": by, "commits": [c.to_dict() for c in commits]}
        if records is not None:
            data["rows"] = records
        print_json(data)
        return
    console = make_console()
    what = "ID versions" if by == "id" else "time versions"
    bounds = f"{start} .. {end if end is not None else 'head'}"
    console.print(commits_table(commits, title=f"changes of {table}, {what} {bounds} (inclusive)"))
    if not commits:
        console.print("no logical commits in this range")
    if records is None:
        return
    counts: dict[str, int] = {}
    for r in records:
        counts[r["_change_type"]] = counts.get(r["_change_type"], 0) + 1
    console.print(
        f"{len(records)} change rows: " + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        if records
        else "0 change rows"
    )
    shown = Table(header_style="bold")
    names = [*columns, "_change_type", "_commit_version", "_commit_timestamp"]
    for name in names:
        shown.add_column(name)
    for r in records[:limit]:
        shown.add_row(
            *["" if r[n] is None else fmt_time(r[n]) if isinstance(r[n], datetime) else str(r[n]) for n in names]
        )
    if records:
        console.print(shown)
    if len(records) > limit:
        console.print(f"... {len(records) - limit} more (--limit, or --json for all)")


def tail_command(
    settings: Settings,
    table: str,
    start: str | None,
    include_rewrites: bool,
    idle_timeout: float | None,
    as_json: bool,
) -> None:
    """``ordo tail TABLE``: follow the table's commits as they are materialized, until Ctrl-C."""
    catalog = open_catalog(settings)
    info = catalog.table(table)
    first = parse_version(start, "--from version")
    if first is None:
        first = info.head_version + 1
    console = make_console()
    if not as_json:
        console.print(
            f"following {table} from version {first} (head is {info.head_version}) in {catalog.location}; Ctrl-C ends",
            style="dim",
        )
    try:
        for commit in catalog.subscribe(
            table, first, poll_interval=0.2, include_rewrites=include_rewrites, idle_timeout=idle_timeout
        ):
            if as_json:
                sys.stdout.write(json.dumps(commit.to_dict(), default=_json_default) + "\n")
                sys.stdout.flush()
                continue
            records = sum(f.record_count for f in commit.added_files)
            console.print(
                f"v{commit.id_version:<5} {fmt_time(commit.timestamp)}  {commit.operation.value:<16} "
                f"{fmt_scope(commit.partitions):<24} +{len(commit.added_files)} files ({records} records) "
                f"-{len(commit.removed_files)} files  txn {commit.txn_id[:8]}"
            )
    except KeyboardInterrupt:
        if not as_json:
            console.print("stopped", style="dim")


def vacuum_command(
    settings: Settings,
    table: str,
    retain: float,
    apply: bool,
    orphans: bool,
    as_json: bool,
    orphan_age: float | None = None,
    force: bool = False,
) -> None:
    """``ordo vacuum TABLE --retain HOURS``: list (or with ``--apply`` delete) files no retained version needs."""
    from rich.table import Table

    from ordo.services.vacuum import (
        DEFAULT_ORPHAN_AGE_HOURS,
        VacuumError,
        apply_vacuum,
        kafka_intents_reader,
        plan_vacuum,
    )

    age = DEFAULT_ORPHAN_AGE_HOURS if orphan_age is None else orphan_age
    intents = None
    if orphans:
        if not settings.bootstrap_servers:
            raise VacuumError(
                "--orphans reads the intents log to keep the files of undecided intents: set ORDO_BOOTSTRAP_SERVERS"
            )
        intents = kafka_intents_reader(settings)
    catalog = open_catalog(settings)
    plan = plan_vacuum(catalog, table, retain, orphans=orphans, intents=intents, orphan_age_hours=age, force=force)
    result = apply_vacuum(catalog, plan, intents=intents) if apply else None
    if as_json:
        data: dict[str, Any] = {
            "table": table,
            "retain_hours": retain,
            "boundary_time": plan.boundary_time,
            "boundary_version": plan.boundary_version,
            "head_version": plan.head_version,
            "applied": apply,
            "files": [
                {
                    "path": f.path,
                    "kind": f.kind,
                    "size_bytes": f.size_bytes,
                    "removed_version": f.removed_version,
                    "removed_at": f.removed_at,
                }
                for f in plan.files
            ],
            "kept_in_window": plan.kept_removed,
        }
        if result is not None:
            data["deleted"] = [f.path for f in result.deleted]
            data["skipped_live"] = result.skipped_live
            data["skipped_pending"] = result.skipped_pending
            data["missing"] = result.missing
        print_json(data)
        return
    console = make_console()
    boundary = "before the table was created" if plan.boundary_version is None else f"version {plan.boundary_version}"
    console.print(
        f"{table}: retaining {retain:g} h: every version from {fmt_time(plan.boundary_time)} on "
        f"({boundary} .. head {plan.head_version}) stays readable"
    )
    if plan.files:
        listing = Table(header_style="bold")
        for name in ("file", "kind", "removed at version", "removed / modified", "size"):
            listing.add_column(name, justify="right" if name in ("size", "removed at version") else "left")
        for f in plan.files:
            listing.add_row(
                f.path,
                f.kind,
                "" if f.removed_version is None else str(f.removed_version),
                fmt_time(f.removed_at),
                fmt_bytes(f.size_bytes),
            )
        console.print(listing)
    kept = f"; {plan.kept_removed} removed file(s) kept inside the retention window" if plan.kept_removed else ""
    if result is None:
        verb = "would delete" if plan.files else "nothing to delete"
        count = f" {len(plan.files)} file(s), {fmt_bytes(plan.size_bytes)}" if plan.files else ""
        hint = " (dry run: add --apply to delete)" if plan.files else ""
        console.print(f"{verb}{count}{kept}{hint}")
    else:
        console.print(f"deleted {len(result.deleted)} file(s), {fmt_bytes(result.size_bytes)}{kept}")
        if result.skipped_live:
            console.print(f"[yellow]kept {len(result.skipped_live)} file(s) that became live meanwhile[/yellow]")
        if result.skipped_pending:
            console.print(f"[yellow]kept {len(result.skipped_pending)} file(s) an undecided intent names[/yellow]")


def repair_command(settings: Settings, table: str, timeout: float, as_json: bool) -> int:
    """``ordo repair TABLE``: re-materialize a table from its decisions log; 0 when it is served again, else 1."""
    from ordo.consumer.repair import repair

    data = repair(settings, table, timeout)
    if as_json:
        print_json(data)
    else:
        console = make_console()
        if data["error"] is None:
            console.print(
                f"{table}: re-materialized from its decisions log: head version {data['head_version']}, "
                f"{data['decisions']} decision(s), log offset {data['next_offset']}; served again"
            )
        else:
            console.print(
                f"[red]{table}: stopped again at log offset {data['error_offset']}: {data['error']}[/red]\n"
                f"the record is still in the log: `ordo replay {table} --verify` shows what is wrong with it"
            )
    return 0 if data["error"] is None else 1


__all__ = [
    "CommandError",
    "changes_command",
    "commits_table",
    "fmt_bytes",
    "fmt_scope",
    "fmt_time",
    "history_command",
    "history_table",
    "make_console",
    "open_catalog",
    "parse_timestamp",
    "parse_version",
    "repair_command",
    "show_command",
    "tables_command",
    "tail_command",
    "vacuum_command",
]
