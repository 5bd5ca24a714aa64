"""Write the golden log of this release into ``tests/golden/log-<release>/``.

Run from the repository root, once per release and never again for a released one::

    PYTHONPATH=. .venv/bin/python tests/golden/make_golden_log.py 0.1

It starts the embedded stack (Tansu, arbiter, consumer), commits a fixed story
of hand-built intents through ``producer.CommitClient`` on three tables (one
unpartitioned, one with two partition columns): every operation, accepted
conflicts with each rebase kind, and rejections (a conflict, a malformed
record, a repeated txn id, a batch already committed, a second CREATE_TABLE);
each release adds what it brought (ALTER_TABLE, RESTORE, operation metrics,
CHECK constraints).
It then dumps each table's intents and decisions topics record by record
(offset, timestamp, key, headers, value) and the catalog the consumer built.
Data files are named ``<partition path>/<txn_id>-<n>.parquet``; they need not
exist (neither the arbiter nor the catalog reads them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Rebase, TableMetadata
from ordo.services.up import EmbeddedStack
from ordo.settings import Settings
from tests.unit.golden_log import LoggedRecord, dump_catalog, log_dir, record_to_json

PREFIX = "golden"
WRITER = "golden-writer"


def files(txn: str, spec: dict[str, str], count: int = 1, first_key: int = 1) -> tuple[DataFile, ...]:
    """``count`` hand-named data files of ``txn`` in partition ``spec``."""
    where = "/".join(f"{k}={v}" for k, v in spec.items())
    return tuple(
        DataFile(
            path=f"{where + '/' if where else ''}{txn}-{n}.parquet",
            partition=spec,
            record_count=10 + n,
            size_bytes=1000 + 17 * n,
            min_key=str(first_key + 100 * n),
            max_key=str(first_key + 100 * n + 9),
        )
        for n in range(count)
    )


class Story:
    """Commits intents one at a time and checks each answer is the one the story expects."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.live: dict[str, dict[str, DataFile]] = {}

    def commit(
        self,
        table: str,
        txn: str,
        operation: Operation,
        read_version: int,
        *,
        partitions: list[dict[str, str]] | None = None,
        added: tuple[DataFile, ...] = (),
        removed: tuple[str, ...] = (),
        metadata: TableMetadata | None = None,
        app_id: str | None = None,
        batch_id: int | None = None,
        restore_version: int | None = None,
        metrics: dict[str, int] | None = None,
        expect: Outcome = Outcome.ACCEPTED,
        rebase: Rebase = Rebase.NONE,
        reason: str | None = None,
        duplicate: bool = False,
    ) -> CommitDecision:
        intent = CommitIntent(
            txn_id=txn,
            table=table,
            operation=operation,
            read_version=read_version,
            partitions=None if partitions is None else tuple(partitions),
            added_files=added,
            removed_files=removed,
            metadata=metadata,
            app_id=app_id,
            batch_id=batch_id,
            writer=WRITER,
            **({} if restore_version is None else {"restore_version": restore_version}),
            **({} if metrics is None else {"operation_metrics": metrics}),
        )
        decision = self.client.commit(intent, timeout=60.0)
        got = (decision.outcome, decision.rebase, decision.reason, decision.duplicate_of is not None)
        want = (expect, rebase, reason, duplicate)
        if got != want:
            raise SystemExit(f"{table}/{txn}: expected {want}, got {got}: {decision.message}")
        print(
            f"{table:9} {txn:22} {operation.value:16} -> {decision.outcome.value} v{decision.id_version} "
            f"{decision.rebase.value} {decision.reason or ''}"
        )
        return decision


def metadata(location: str, schema: str, partition_columns: tuple[str, ...]) -> TableMetadata:
    """A table's CREATE_TABLE metadata."""
    return TableMetadata(
        location=location,
        schema=schema,
        primary_key=("id",),
        partition_columns=partition_columns,
        properties={"owner": "golden"},
    )


def run_story(client: Any) -> None:
    """The fixed sequence of commits; the ID version each reaches is in the comments."""
    s = Story(client)
    R = Outcome.REJECTED
    eu1 = {"region": "eu", "dt": "2024-01-01"}
    us1 = {"region": "us", "dt": "2024-01-01"}
    eu2 = {"region": "eu", "dt": "2024-01-02"}

    # orders: two partition columns
    s.commit(
        "orders",
        "o-create",
        Operation.CREATE_TABLE,
        0,
        metadata=metadata(
            "/warehouse/golden/orders", "id BIGINT, amount DOUBLE, region STRING, dt STRING", ("region", "dt")
        ),
    )  # v0
    ins1 = files("o-ins1", eu1, 2)
    s.commit("orders", "o-ins1", Operation.INSERT_INTO, 0, partitions=[eu1], added=ins1)  # v1
    s.commit("orders", "o-ins2", Operation.INSERT_INTO, 1, partitions=[us1], added=files("o-ins2", us1))  # v2
    s.commit(
        "orders",
        "o-ins3",
        Operation.INSERT_INTO,
        2,
        partitions=[eu2],
        added=files("o-ins3", eu2, 2),
        app_id="stream-a",
        batch_id=1,
    )  # v3
    s.commit(
        "orders",
        "o-ins3-again",
        Operation.INSERT_INTO,
        3,
        partitions=[eu2],
        added=files("o-ins3-again", eu2),
        app_id="stream-a",
        batch_id=1,
        expect=R,
        reason="BATCH_ALREADY_COMMITTED",
    )
    s.commit("orders", "o-ins1", Operation.INSERT_INTO, 0, partitions=[eu1], added=ins1, duplicate=True)  # repeat
    s.commit("orders", "o-upd1", Operation.UPDATE, 3, partitions=[eu1], added=files("o-upd1", eu1))  # v4
    # an INSERT that read v3 while the UPDATE of v4 committed in its partition: later fails
    s.commit(
        "orders",
        "o-ins-late",
        Operation.INSERT_INTO,
        3,
        partitions=[eu1],
        added=files("o-ins-late", eu1),
        expect=R,
        reason="CONFLICT_LATER_FAILS",
    )
    # a minor compaction that read v3 while the UPDATE of v4 committed: compaction completes
    s.commit(
        "orders",
        "o-minor1",
        Operation.MINOR_COMPACT,
        3,
        partitions=[eu1],
        added=files("o-minor1", eu1),
        removed=tuple(f.path for f in ins1),
        rebase=Rebase.COMPACTION_COMPLETES,
    )  # v5
    # an INSERT that read v4 while the compaction of v5 committed: new data written
    s.commit(
        "orders",
        "o-ins4",
        Operation.INSERT_INTO,
        4,
        partitions=[eu1],
        added=files("o-ins4", eu1),
        rebase=Rebase.NEW_DATA_WRITTEN,
    )  # v6
    # overwrite of one partition that read v1 while the INSERT of v2 committed there: later overwrites
    s.commit(
        "orders",
        "o-ovw-us",
        Operation.INSERT_OVERWRITE,
        1,
        partitions=[us1],
        added=files("o-ovw-us", us1),
        rebase=Rebase.LATER_OVERWRITES,
    )  # v7
    s.commit("orders", "o-del1", Operation.DELETE, 7, partitions=[eu2], added=files("o-del1", eu2))  # v8
    eu2_live = tuple(f.path for f in files("o-ins3", eu2, 2) + files("o-del1", eu2))
    s.commit(
        "orders",
        "o-major1",
        Operation.MAJOR_COMPACT,
        8,
        partitions=[eu2],
        added=files("o-major1", eu2),
        removed=eu2_live,
    )  # v9
    eu1_live = tuple(f.path for f in files("o-upd1", eu1) + files("o-minor1", eu1) + files("o-ins4", eu1))
    s.commit(
        "orders",
        "o-cluster1",
        Operation.CLUSTER,
        9,
        partitions=[eu1],
        added=files("o-cluster1", eu1, 2),
        removed=eu1_live,
    )  # v10
    client.publish_raw("orders", b"not an intent", key=b"garbage")  # MALFORMED_INTENT
    s.commit(
        "orders",
        "o-create-again",
        Operation.CREATE_TABLE,
        10,
        metadata=metadata("/warehouse/golden/orders", "id BIGINT", ()),
        expect=R,
        reason="TABLE_EXISTS",
    )

    # customers: unpartitioned
    s.commit(
        "customers",
        "c-create",
        Operation.CREATE_TABLE,
        0,
        metadata=metadata("/warehouse/golden/customers", "id BIGINT, name STRING", ()),
    )  # v0
    c1 = files("c-ins1", {})
    s.commit("customers", "c-ins1", Operation.INSERT_INTO, 0, added=c1)  # v1
    s.commit("customers", "c-ins2", Operation.INSERT_INTO, 1, added=files("c-ins2", {}))  # v2
    s.commit("customers", "c-ovw", Operation.INSERT_OVERWRITE, 2, added=files("c-ovw", {}, 2))  # v3 (whole table)
    s.commit("customers", "c-upd", Operation.UPDATE, 3, added=files("c-upd", {}))  # v4
    s.commit(
        "customers",
        "c-major",
        Operation.MAJOR_COMPACT,
        4,
        added=files("c-major", {}),
        removed=tuple(f.path for f in files("c-ovw", {}, 2) + files("c-upd", {})),
    )  # v5
    s.commit("customers", "c-trunc", Operation.TRUNCATE, 5)  # v6
    s.commit("customers", "c-ins3", Operation.INSERT_INTO, 6, added=files("c-ins3", {}))  # v7
    s.commit("customers", "c-ins3", Operation.INSERT_INTO, 6, added=files("c-ins3", {}), duplicate=True)

    # events: one partition column
    d1, d2 = {"dt": "2024-01-01"}, {"dt": "2024-01-02"}
    s.commit(
        "events",
        "e-create",
        Operation.CREATE_TABLE,
        0,
        metadata=metadata("/warehouse/golden/events", "id BIGINT, kind STRING, dt STRING", ("dt",)),
    )  # v0
    s.commit("events", "e-ins1", Operation.INSERT_INTO, 0, partitions=[d1], added=files("e-ins1", d1))  # v1
    s.commit("events", "e-ins2", Operation.INSERT_INTO, 1, partitions=[d2], added=files("e-ins2", d2))  # v2
    s.commit(
        "events", "e-ovw-all", Operation.INSERT_OVERWRITE, 2, added=files("e-ovw-all", d1) + files("e-ovw-all2", d2)
    )  # v3 (whole table)
    s.commit("events", "e-trunc-d1", Operation.TRUNCATE, 3, partitions=[d1])  # v4 (one partition)
    s.commit(
        "events",
        "e-ins-stale",
        Operation.INSERT_INTO,
        2,
        partitions=[d2],
        added=files("e-ins-stale", d2),
        expect=R,
        reason="CONFLICT_LATER_FAILS",
    )
    s.commit("events", "e-ins3", Operation.INSERT_INTO, 4, partitions=[d1], added=files("e-ins3", d1))  # v5
    if not hasattr(Operation, "ALTER_TABLE"):
        return  # releases before 0.3
    created = metadata("/warehouse/golden/events", "id BIGINT, kind STRING, dt STRING", ("dt",))
    altered = created.model_copy(
        update={"schema": created.schema + ", `note` string", "properties": {"owner": "golden", "tier": "gold"}}
    )
    s.commit("events", "e-alter1", Operation.ALTER_TABLE, 5, metadata=altered)  # v6
    s.commit(
        "events",
        "e-ins-before-alter",
        Operation.INSERT_INTO,
        5,
        partitions=[d2],
        added=files("e-ins-before-alter", d2),
        expect=R,
        reason="SCHEMA_CHANGED",
    )
    dropped = altered.model_copy(update={"schema": "id BIGINT, dt STRING, `note` string"})
    s.commit("events", "e-alter-drop", Operation.ALTER_TABLE, 6, metadata=dropped, expect=R, reason="UNSUPPORTED_ALTER")
    s.commit("events", "e-ins4", Operation.INSERT_INTO, 6, partitions=[d2], added=files("e-ins4", d2))  # v7
    if not hasattr(Operation, "RESTORE"):
        return  # releases before 0.4
    at_v2 = files("e-ins1", d1) + files("e-ins2", d2)  # what was live at version 2, not at 7
    s.commit("events", "e-restore2", Operation.RESTORE, 7, added=at_v2, restore_version=2)  # v8
    s.commit(
        "events",
        "e-restore-smuggle",
        Operation.RESTORE,
        8,
        added=files("e-ins1", d1) + files("e-never", d1),
        restore_version=2,
        expect=R,
        reason="NOT_LIVE_AT_VERSION",
    )
    s.commit(
        "events", "e-restore-ahead", Operation.RESTORE, 8, restore_version=9, expect=R, reason="INVALID_RESTORE_VERSION"
    )
    s.commit(
        "events", "e-ins-before-restore", Operation.INSERT_INTO, 7, partitions=[d1], added=files("e-ins-br", d1),
        expect=R, reason="CONFLICT_LATER_FAILS",
    )  # fmt: skip
    at_v7 = files("e-ovw-all2", d2) + files("e-ins3", d1) + files("e-ins4", d2)
    s.commit("events", "e-restore7", Operation.RESTORE, 8, added=at_v7, restore_version=7)  # v9: back again
    if "operation_metrics" not in CommitIntent.model_fields:
        return  # releases before 0.5
    # customers: a MERGE with the rows its writer counted (files of 10 and 11 records), then hostile claims
    merged = {"numTargetRowsInserted": 3, "numTargetRowsUpdated": 2, "numTargetRowsDeleted": 1}
    s.commit("customers", "c-merge", Operation.UPDATE, 7, added=files("c-merge", {}, 2), metrics=merged)  # v8
    lies = {"numTargetRowsInserted": 100, "numTargetRowsUpdated": 0, "numTargetRowsDeleted": 0}  # 100 rows, 10 records
    s.commit(
        "customers", "c-merge-lies", Operation.UPDATE, 8, added=files("c-merge-lies", {}), metrics=lies,
        expect=R, reason="INVALID_METRICS",
    )  # fmt: skip
    s.commit(
        "customers", "c-upd-claims", Operation.UPDATE, 8, added=files("c-upd-claims", {}),
        metrics={"numUpdatedRows": 1}, expect=R, reason="INVALID_METRICS",
    )  # fmt: skip
    s.commit(
        "customers", "c-del-negative", Operation.DELETE, 8, added=files("c-del-negative", {}),
        metrics={"numDeletedRows": -1}, expect=R, reason="INVALID_METRICS",
    )  # fmt: skip
    s.commit("customers", "c-del2", Operation.DELETE, 8, added=files("c-del2", {}))  # v9: derived metrics only
    if not hasattr(Operation, "ADD_CONSTRAINT"):
        return  # releases before 0.6
    # events: a CHECK constraint added (its writer checked the rows of v9), the commits it makes fail, then dropped
    checked = altered.model_copy(
        update={"properties": {**altered.properties, "delta.constraints.known_kind": "kind IS NOT NULL"}}
    )
    s.commit("events", "e-check", Operation.ADD_CONSTRAINT, 9, metadata=checked)  # v10
    s.commit(
        "events", "e-ins-before-check", Operation.INSERT_INTO, 9, partitions=[d1], added=files("e-ins-bc", d1),
        expect=R, reason="SCHEMA_CHANGED",
    )  # fmt: skip
    sneaked = checked.model_copy(update={"properties": {**checked.properties, "delta.constraints.sneaked": "id > 0"}})
    s.commit(
        "events", "e-alter-check", Operation.ALTER_TABLE, 10, metadata=sneaked, expect=R, reason="INVALID_CONSTRAINT"
    )
    again = altered.model_copy(
        update={"properties": {**altered.properties, "delta.constraints.known_kind": "kind <> ''"}}
    )
    s.commit(
        "events", "e-check-again", Operation.ADD_CONSTRAINT, 10, metadata=again, expect=R, reason="INVALID_CONSTRAINT"
    )
    s.commit("events", "e-ins5", Operation.INSERT_INTO, 10, partitions=[d1], added=files("e-ins5", d1))  # v11
    positive = checked.model_copy(update={"properties": {**checked.properties, "delta.constraints.positive": "id > 0"}})
    s.commit(
        "events", "e-check-stale", Operation.ADD_CONSTRAINT, 10, metadata=positive,
        expect=R, reason="CONFLICT_LATER_FAILS",
    )  # fmt: skip
    s.commit("events", "e-uncheck", Operation.DROP_CONSTRAINT, 11, metadata=altered)  # v12
    s.commit(
        "events", "e-uncheck-again", Operation.DROP_CONSTRAINT, 12, metadata=altered,
        expect=R, reason="INVALID_CONSTRAINT",
    )  # fmt: skip


def dump_topic(settings: Settings, topic: str, timeout: float = 60.0) -> list[LoggedRecord]:
    """Every record of partition 0 of ``topic`` with its key, headers and timestamp (read_committed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{settings.topic_prefix}.golden",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    records: list[LoggedRecord] = []
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                continue
            kind, timestamp = message.timestamp()
            headers = message.headers()
            records.append(
                LoggedRecord(
                    message.offset(),
                    timestamp,
                    kind,
                    message.key(),
                    None if headers is None else tuple((name, value) for name, value in headers),
                    message.value(),
                )
            )
        raise SystemExit(f"reading {topic} did not reach its end in {timeout} s")
    finally:
        consumer.close()


TABLES = ("orders", "customers", "events")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="the release whose golden log this is, e.g. 0.1")
    parser.add_argument("--force", action="store_true", help="overwrite an existing golden log (never a released one)")
    args = parser.parse_args()
    out = log_dir(args.release)
    if out.exists() and not args.force:
        raise SystemExit(f"{out} exists: a released golden log is never rewritten")
    from ordo.producer import CommitClient
    from ordo.schemas import decisions_topic, intents_topic

    work = Path(tempfile.mkdtemp(prefix="ordo-golden-"))
    try:
        with EmbeddedStack(work, topic_prefix=PREFIX) as stack:
            settings = stack.settings
            assert settings is not None
            with CommitClient(settings=settings) as client:
                run_story(client)
            logs = {
                (table, kind): dump_topic(settings, topic(PREFIX, table))
                for table in TABLES
                for kind, topic in (("intents", intents_topic), ("decisions", decisions_topic))
            }
            _wait_for_catalog(stack.catalog_path, {t: len(logs[(t, "decisions")]) for t in TABLES})
            catalog = dump_catalog(stack.catalog_path, list(TABLES))
            # The public key that signed the log (releases from 0.2 on sign decisions): readers of the golden
            # log trust it, and only it, so a later version verifies the signatures too.
            public_key = Path(f"{settings.arbiter_key}.pub").read_bytes() if settings.arbiter_key else None
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for (table, kind), records in logs.items():
            lines = [json.dumps(record_to_json(r), sort_keys=True) for r in records]
            (out / f"{table}.{kind}.jsonl").write_text("\n".join(lines) + "\n")
        (out / "catalog.json").write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n")
        if public_key is not None:
            (out / "arbiter.pub").write_bytes(public_key)
        (out / "manifest.json").write_text(
            json.dumps(
                {
                    "release": args.release,
                    "topic_prefix": PREFIX,
                    "tables": list(TABLES),
                    "made_by": "tests/golden/make_golden_log.py (embedded Tansu, ordo arbiter, ordo consumer)",
                },
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait_for_catalog(path: Path, decisions: dict[str, int], timeout: float = 60.0) -> None:
    from ordo.consumer import Catalog

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with Catalog(path) as catalog:
                if all(catalog.table(t).decisions == n for t, n in decisions.items()):
                    return
        except Exception:  # not created yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"the consumer did not apply every decision within {timeout} s")


if __name__ == "__main__":
    main()
