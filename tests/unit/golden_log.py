"""Golden logs: the intents and decisions logs written by a released version, read back by this one.

``tests/golden/log-<release>/`` holds, per table, ``<table>.intents.jsonl`` and
``<table>.decisions.jsonl`` (one JSON object per Kafka record, in offset order:
``offset``, ``timestamp`` (ms), ``timestamp_type`` (1 = CreateTime, 2 =
LogAppendTime), ``key``, ``headers`` (list of ``[name, value]`` or null) and
``value``, bytes in base64, null for none), ``catalog.json`` (the catalog that
release's consumer materialized from those logs, see ``dump_catalog``) and
``manifest.json`` (release, tables, how it was made). ``tests/golden/README.md``
tells how a release adds its log.

The pure audit and the consumer's store take record iterables, so no broker is
needed to read a golden log back: every record keeps its original offset and
timestamp, which is what the decisions depend on.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ordo.arbiter.replay import DecisionRecord, IntentRecord
from ordo.schemas.signing import Trust, signature_of
from ordo.services.audit import AuditResult, audit

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
RELEASES = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")  # every release that committed a golden log


@dataclass(frozen=True)
class LoggedRecord:
    """One Kafka record of a golden log."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] | None
    value: bytes | None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def record_to_json(record: LoggedRecord) -> dict[str, Any]:
    """The JSON object of one record line."""
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": record.timestamp_type,
        "key": _b64(record.key),
        "headers": None if record.headers is None else [[name, _b64(value)] for name, value in record.headers],
        "value": _b64(record.value),
    }


def record_from_json(line: dict[str, Any]) -> LoggedRecord:
    """One record line read back."""
    headers = line["headers"]
    return LoggedRecord(
        offset=line["offset"],
        timestamp=line["timestamp"],
        timestamp_type=line["timestamp_type"],
        key=_unb64(line["key"]),
        headers=None if headers is None else tuple((name, _unb64(value)) for name, value in headers),
        value=_unb64(line["value"]),
    )


def log_dir(release: str) -> Path:
    """Where the golden log of ``release`` lives."""
    return GOLDEN_DIR / f"log-{release}"


def manifest(release: str) -> dict[str, Any]:
    """The manifest of ``release``'s golden log."""
    return json.loads((log_dir(release) / "manifest.json").read_text())  # type: ignore[no-any-return]


def tables(release: str) -> list[str]:
    """The tables of ``release``'s golden log."""
    return list(manifest(release)["tables"])


def read_topic(release: str, table: str, kind: str) -> list[LoggedRecord]:
    """The records of ``table``'s ``kind`` (``intents`` or ``decisions``) log, in offset order."""
    path = log_dir(release) / f"{table}.{kind}.jsonl"
    return [record_from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def intent_records(release: str, table: str) -> list[IntentRecord]:
    """``table``'s intents log as the arbiter saw it (offset, record timestamp, value)."""
    return [IntentRecord(r.offset, r.timestamp, r.value) for r in read_topic(release, table, "intents")]


def decision_records(release: str, table: str) -> list[DecisionRecord]:
    """``table``'s decisions log."""
    return [DecisionRecord(r.offset, r.value, signature_of(r.headers)) for r in read_topic(release, table, "decisions")]


def trusted_key(release: str) -> Path | None:
    """The public key that signed ``release``'s golden log, or None for a log that predates signatures (0.1)."""
    path = log_dir(release) / "arbiter.pub"
    return path if path.exists() else None


def verify_table(release: str, table: str) -> AuditResult:
    """``ordo replay TABLE --verify`` on one table of a golden log: the one place the audit of old logs is run.

    A log that carries the key that signed it is verified with signatures
    required, trusting that key only. Logs of release 0.1 predate decision
    signatures: they are audited as ``--allow-unsigned`` does (chain and
    re-derivation, no signatures), and only here.
    """
    key = trusted_key(release)
    trust = None if key is None else Trust.from_spec(str(key), required=True)
    return audit(table, intent_records(release, table), decision_records(release, table), verify=True, trust=trust)


# --------------------------------------------------------------------------- the catalog


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


# The fields compared, named here so that a field a later release adds to the
# catalog's models does not change what a released catalog is compared on.
FILE_FIELDS = (
    "path",
    "partition",
    "record_count",
    "size_bytes",
    "min_key",
    "max_key",
    "added_version",
    "data_change",
    "operation",
)
HISTORY_FIELDS = (
    "log_offset",
    "log_timestamp",
    "txn_id",
    "outcome",
    "operation",
    "read_version",
    "intent_offset",
    "id_version",
    "time_version",
    "timestamp",
    "rebase",
    "reason",
    "message",
    "conflicting_txn_id",
    "conflicting_version",
    "writer",
    "app_id",
    "batch_id",
    "duplicate_of",
    "partitions",
    "files_added",
    "files_removed",
    "records_added",
    "bytes_added",
    "prev_hash",
    "hash",
)


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _history_entry(decision: Any) -> dict[str, Any]:
    entry = {field: _plain(getattr(decision, field)) for field in HISTORY_FIELDS}
    if decision.operation_metrics:  # since 0.5 (earlier logs have none, and their catalog.json no such key)
        entry["operation_metrics"] = dict(sorted(decision.operation_metrics.items()))
    return entry


def dump_catalog(path: str | Path, names: list[str]) -> dict[str, Any]:
    """What a catalog holds for ``names``: table info, every version's snapshot, the history. JSON-ready."""
    from ordo.consumer import Catalog

    result: dict[str, Any] = {}
    with Catalog(path) as catalog:
        for name in names:
            info = catalog.table(name)
            versions = []
            for version in range(info.head_version + 1):
                snapshot = catalog.snapshot(name, version)
                files = sorted(
                    ({field: _plain(getattr(f, field)) for field in FILE_FIELDS} for f in snapshot.files),
                    key=lambda f: f["path"],
                )
                entry = {"id_version": version, "time_version": _iso(snapshot.time_version), "files": files}
                if snapshot.metadata != info.metadata:  # before an ALTER TABLE (0.3): that version's own metadata
                    entry["metadata"] = snapshot.metadata.model_dump(mode="json")
                versions.append(entry)
            history = [_history_entry(d) for d in catalog.history(name)]
            result[name] = {
                "metadata": info.metadata.model_dump(mode="json"),
                "head_version": info.head_version,
                "head_time_version": _iso(info.head_time_version),
                "created_time": _iso(info.created_time),
                "decisions": info.decisions,
                "log_offset": info.log_offset,
                "error": info.error,
                "versions": versions,
                "history": history,
            }
    return result


def rebuild_catalog(release: str, path: str | Path) -> dict[str, Any]:
    """Fold ``release``'s decisions logs into a new catalog at ``path`` with today's consumer store; dump it."""
    from ordo.consumer.store import CatalogWriter, LogRecord

    prefix = manifest(release)["topic_prefix"]
    writer = CatalogWriter(path, prefix)
    try:
        for table in tables(release):
            records = [
                LogRecord(table, r.offset, r.timestamp, r.value) for r in read_topic(release, table, "decisions")
            ]
            result = writer.apply(records)
            assert not result.broken, result.broken
    finally:
        writer.close()
    return dump_catalog(path, tables(release))


def expected_catalog(release: str) -> dict[str, Any]:
    """The catalog ``release``'s own consumer materialized from its golden log."""
    return json.loads((log_dir(release) / "catalog.json").read_text())  # type: ignore[no-any-return]


def all_records(release: str) -> Iterator[tuple[str, str, LoggedRecord]]:
    """Every record of every topic of ``release``'s golden log: ``(table, kind, record)``."""
    for table in tables(release):
        for kind in ("intents", "decisions"):
            for record in read_topic(release, table, kind):
                yield table, kind, record
