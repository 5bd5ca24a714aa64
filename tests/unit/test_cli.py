"""The read commands of the ``ordo`` CLI against a real SQLite catalog and real Parquet files (no broker, no Spark).

``Builder`` drives the pure arbiter core like the Kafka loop would, writes the
data files each intent names with pyarrow (the writer's file contract:
table columns plus ``_ordo_op``/``_ordo_seq``), and folds the decision
records into a catalog with the consumer's ``CatalogWriter``. A plain dict
per version is the oracle for row counts and change rows.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ordo.arbiter.core import apply, evaluate, new_state
from ordo.cli import main
from ordo.consumer.store import CatalogWriter, LogRecord
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, TableMetadata, encode

SCHEMA = "id BIGINT, v STRING, dt STRING"
HOUR_MS = 3_600_000


class Builder:
    """One table's history: real files, decisions from the pure core, a catalog, and a model per version."""

    def __init__(self, root: Path, name: str = "events", *, start: datetime | None = None) -> None:
        self.name = name
        self.location = root / "warehouse" / name
        self.catalog_path = root / "catalog.db"
        self.state = new_state(name)
        self.offset = 0
        # commits an hour apart, the last ones close to now (vacuum's windows are relative to now)
        self.clock = int(((start or datetime.now(UTC) - timedelta(hours=20)).timestamp()) * 1000)
        self.model: dict[tuple[str, int], str] = {}
        self.versions: dict[int, dict[tuple[str, int], str]] = {}
        self.decisions: list[CommitDecision] = []
        writer = CatalogWriter(self.catalog_path, "ordo")
        writer.close()
        self.submit(
            CommitIntent(
                txn_id="create",
                table=name,
                operation=Operation.CREATE_TABLE,
                read_version=0,
                metadata=TableMetadata(
                    location=str(self.location),
                    schema=SCHEMA,
                    primary_key=("id",),
                    partition_columns=("dt",),
                    properties={},
                ),
            )
        )

    @property
    def head(self) -> int:
        return self.state.head_version

    def submit(self, intent: CommitIntent) -> CommitDecision:
        self.clock += HOUR_MS
        decision = evaluate(self.state, intent, self.clock, self.offset)
        data = encode(decision)
        apply(self.state, decision, data)
        writer = CatalogWriter(self.catalog_path, "ordo")
        try:
            writer.apply([LogRecord(self.name, self.offset, self.clock + 5, data)])
        finally:
            writer.close()
        self.offset += 1
        self.decisions.append(decision)
        if decision.accepted and decision.id_version is not None:
            self.versions[decision.id_version] = dict(self.model)
        return decision

    def write(self, txn: str, dt: str, records: list[dict[str, Any]], n: int = 0) -> DataFile:
        path = f"dt={dt}/{txn}-{n}.parquet"
        target = self.location / path
        target.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {
                "id": pa.array([r["id"] for r in records], pa.int64()),
                "v": pa.array([r.get("v") for r in records], pa.string()),
                "dt": pa.array([dt] * len(records), pa.string()),
                "_ordo_op": pa.array([r.get("op", "upsert") for r in records], pa.string()),
                "_ordo_seq": pa.array([r.get("seq") for r in records], pa.int64()),
            }
        )
        pq.write_table(table, target)
        return DataFile(path=path, partition={"dt": dt}, record_count=len(records), size_bytes=target.stat().st_size)

    def _intent(self, operation: Operation, dt: str, files: tuple[DataFile, ...], **kw: Any) -> CommitIntent:
        return CommitIntent(
            txn_id=kw.pop("txn", None) or uuid.uuid4().hex[:12],
            table=self.name,
            operation=operation,
            read_version=kw.pop("read_version", self.head),
            partitions=({"dt": dt},),
            added_files=files,
            **kw,
        )

    def insert(self, dt: str, values: dict[int, str], **kw: Any) -> CommitDecision:
        txn = uuid.uuid4().hex[:12]
        data = self.write(txn, dt, [{"id": k, "v": v} for k, v in values.items()])
        decision = None
        model = dict(self.model)
        for k, v in values.items():
            model[(dt, k)] = v
        decision = self._commit(self._intent(Operation.INSERT_INTO, dt, (data,), txn=txn, **kw), model)
        return decision

    def delete(self, dt: str, ids: list[int], **kw: Any) -> CommitDecision:
        txn = uuid.uuid4().hex[:12]
        data = self.write(txn, dt, [{"id": k, "op": "delete"} for k in ids])
        model = {key: v for key, v in self.model.items() if not (key[0] == dt and key[1] in ids)}
        return self._commit(self._intent(Operation.DELETE, dt, (data,), txn=txn, **kw), model)

    def compact(self, dt: str, **kw: Any) -> CommitDecision:
        """MAJOR COMPACT of ``dt``: the live rows, keeping their sequence numbers, into one file."""
        txn = uuid.uuid4().hex[:12]
        live = sorted(p for p in self.state.files if p.startswith(f"dt={dt}/"))
        records = [{"id": k, "v": v, "seq": self.head} for (part, k), v in sorted(self.model.items()) if part == dt]
        data = self.write(txn, dt, records)
        intent = self._intent(Operation.MAJOR_COMPACT, dt, (data,), txn=txn, removed_files=tuple(live), **kw)
        return self._commit(intent, dict(self.model))

    def overwrite(self, dt: str, values: dict[int, str], **kw: Any) -> CommitDecision:
        txn = uuid.uuid4().hex[:12]
        data = self.write(txn, dt, [{"id": k, "v": v} for k, v in values.items()])
        model = {key: v for key, v in self.model.items() if key[0] != dt}
        model.update({(dt, k): v for k, v in values.items()})
        return self._commit(self._intent(Operation.INSERT_OVERWRITE, dt, (data,), txn=txn, **kw), model)

    def restore(self, version: int, **kw: Any) -> CommitDecision:
        """RESTORE to ``version``: its files live again (those not live now re-added), its model the table's."""
        live = {f.path: f for d in self.decisions if d.accepted and d.id_version is not None for f in d.added_files}
        at = self.state_files_at(version)
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex[:12],
            table=self.name,
            operation=Operation.RESTORE,
            read_version=self.head,
            added_files=tuple(live[p] for p in sorted(at - set(self.state.files))),
            restore_version=version,
            **kw,
        )
        return self._commit(intent, dict(self.versions[version]))

    def state_files_at(self, version: int) -> set[str]:
        files: set[str] = set()
        for d in self.decisions:
            if d.accepted and d.duplicate_of is None and d.id_version is not None and d.id_version <= version:
                files -= set(d.removed_files)
                files |= {f.path for f in d.added_files}
        return files

    def _commit(self, intent: CommitIntent, model: dict[tuple[str, int], str]) -> CommitDecision:
        decision_model = model
        previous = self.model
        self.model = decision_model
        decision = self.submit(intent)
        if not decision.accepted:
            self.model = previous
            self.versions.pop(decision.id_version or -1, None)
        return decision

    def rows(self, version: int | None = None) -> int:
        return len(self.versions[self.head if version is None else version])


def sample(root: Path) -> Builder:
    """A small history: inserts, a delete, a compaction, an overwrite, and one rejected concurrent insert."""
    b = Builder(root)
    b.insert("2024-05-01", {1: "a", 2: "b", 3: "c"})  # v1
    b.insert("2024-05-02", {10: "x", 11: "y"})  # v2
    b.insert("2024-05-01", {2: "B", 4: "d"})  # v3 (2 is an upsert)
    b.delete("2024-05-01", [1])  # v4
    b.compact("2024-05-01")  # v5
    b.insert("2024-05-02", {12: "z"}, read_version=2)  # v6: nothing else in dt=2024-05-02 since v2, not concurrent
    b.overwrite("2024-05-02", {20: "o"})  # v7
    lost = b.insert("2024-05-02", {21: "p"}, read_version=6)  # concurrent with the overwrite at v7: rejected
    assert not lost.accepted and lost.reason == "CONFLICT_LATER_FAILS"
    return b


@pytest.fixture
def built(tmp_path: Path) -> Builder:
    return sample(tmp_path)


def run(builder: Builder | None, *args: str, catalog: str | None = None, env: dict[str, str] | None = None) -> Any:
    env = {
        "ORDO_CATALOG": catalog if catalog is not None else str(builder.catalog_path) if builder else "",
        **(env or {}),
    }
    env["COLUMNS"] = "200"
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result


# --------------------------------------------------------------------------- read commands


def test_tables_lists_the_table_with_its_head(built: Builder) -> None:
    result = run(built, "tables")
    assert result.exit_code == 0, result.output
    assert "events" in result.output and str(built.location) in result.output
    data = json.loads(run(built, "tables", "--json").output)
    assert [(t["name"], t["head_version"]) for t in data] == [("events", built.head)]


def test_tables_shows_files_per_partition_last_compaction_and_pending_work(built: Builder) -> None:
    from ordo.consumer import Catalog

    with Catalog(built.catalog_path) as catalog:
        snapshot = catalog.snapshot("events")
        rewrites = [c for c in catalog.commits("events", 0, include_rewrites=True) if c.operation.rewrites]
    per_partition: dict[str, int] = {}
    for f in snapshot.files:
        key = "/".join(f.partition[c] for c in snapshot.metadata.partition_columns) or "-"
        per_partition[key] = per_partition.get(key, 0) + 1
    layout = json.loads(run(built, "tables", "--json").output)[0]["layout"]
    assert layout["files"] == len(snapshot.files) and layout["files_per_partition"] == per_partition
    assert layout["max_files_per_partition"] == max(per_partition.values())
    live_rewrites = {
        f.added_version for f in snapshot.files if f.operation in ("MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER")
    }
    if live_rewrites:
        assert layout["last_compaction"]["id_version"] == max(live_rewrites)
    else:
        assert layout["last_compaction"] is None, rewrites
    assert layout["compaction_enabled"] is True and isinstance(layout["pending"], list)
    text = run(built, "tables").output
    assert "max files/partition" in text and str(layout["files"]) in text


def test_history_shows_every_decision_newest_first(built: Builder) -> None:
    result = run(built, "history", "events")
    assert result.exit_code == 0, result.output
    for text in ("INSERT_OVERWRITE", "MAJOR_COMPACT", "CONFLICT_LATER_FAILS", "rejected", "accepted"):
        assert text in result.output
    data = json.loads(run(built, "history", "events", "--json").output)
    assert len(data) == len(built.decisions)
    assert [d["txn_id"] for d in data] == [d.txn_id for d in reversed(built.decisions)]
    rejected = [d for d in data if d["outcome"] == "REJECTED"]
    assert len(rejected) == 1 and rejected[0]["conflicting_version"] == 7
    limited = json.loads(run(built, "history", "events", "--limit", "2", "--json").output)
    assert len(limited) == 2


@pytest.mark.parametrize("version", [None, 1, 3, 4, 5, 7])
def test_show_counts_rows_like_merge_on_read(built: Builder, version: int | None) -> None:
    args = ["show", "events"] + ([] if version is None else ["--version", str(version)])
    data = json.loads(run(built, *args, "--json").output)
    assert data["id_version"] == (built.head if version is None else version)
    assert data["rows"] == built.rows(version)
    text = run(built, *args).output
    assert f"{built.rows(version)} rows (merge-on-read)" in text
    assert "primary key" in text and "partition" in text


def test_show_as_of_a_timestamp(built: Builder) -> None:
    at_v3 = next(d for d in built.decisions if d.id_version == 3)
    assert at_v3.time_version is not None
    stamp = (at_v3.time_version + timedelta(minutes=30)).isoformat()
    data = json.loads(run(built, "show", "events", "--timestamp", stamp, "--json").output)
    assert data["id_version"] == 3 and data["rows"] == built.rows(3)
    millis = str(int(at_v3.time_version.timestamp() * 1000))
    assert json.loads(run(built, "show", "events", "--timestamp", millis, "--json").output)["id_version"] == 3


def test_changes_by_id_lists_commits_and_rows(built: Builder) -> None:
    data = json.loads(run(built, "changes", "events", "--from", "3", "--to", "7", "--rows", "--json").output)
    assert [c["id_version"] for c in data["commits"]] == [3, 4, 6, 7]  # v5 is a compaction
    kinds = [(r["_commit_version"], r["_change_type"], r["id"]) for r in data["rows"]]
    assert (3, "upsert", 2) in kinds and (3, "upsert", 4) in kinds
    assert (4, "delete", 1) in kinds
    assert kinds.index((7, "truncate", None)) < kinds.index((7, "upsert", 20))
    deleted = next(r for r in data["rows"] if r["_change_type"] == "delete")
    assert deleted["dt"] == "2024-05-01"
    text = run(built, "changes", "events", "--from", "3", "--to", "7", "--rows").output
    assert "change rows" in text and "truncate" in text
    rewrites = json.loads(run(built, "changes", "events", "--from", "3", "--include-rewrites", "--json").output)
    assert 5 in [c["id_version"] for c in rewrites["commits"]]


def test_a_restores_change_rows_are_the_difference_and_history_names_its_target(built: Builder) -> None:
    """v8 restores v3: id 1 back in dt=2024-05-01 (deleted at v4), dt=2024-05-02 as before the overwrite."""
    decision = built.restore(3)
    assert decision.accepted and decision.id_version == 8, decision.message
    data = json.loads(run(built, "changes", "events", "--from", "8", "--rows", "--json").output)
    rows = sorted((r["_change_type"], r["dt"], r["id"], r["v"]) for r in data["rows"])
    assert rows == [
        ("delete", "2024-05-02", 20, "o"),
        ("upsert", "2024-05-01", 1, "a"),
        ("upsert", "2024-05-02", 10, "x"),
        ("upsert", "2024-05-02", 11, "y"),
    ]  # ids 2 (B: v3's file keeps sequence 3 over v1's b), 3 and 4 are as they were: no row
    assert {r["_commit_version"] for r in data["rows"]} == {8}
    assert "RESTORE TO v3" in run(built, "history", "events").output
    assert built.versions[8] == built.versions[3]


def test_changes_by_time(built: Builder) -> None:
    times = {d.id_version: d.time_version for d in built.decisions if d.time_version is not None}
    low, high = times[2].isoformat(), times[4].isoformat()
    data = json.loads(run(built, "changes", "events", "--by", "time", "--from", low, "--to", high, "--json").output)
    assert [c["id_version"] for c in data["commits"]] == [2, 3, 4]


def test_tail_prints_commits_until_idle(built: Builder) -> None:
    result = run(built, "tail", "events", "--from", "0", "--idle-timeout", "0.5")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("v")]
    assert [line.split()[0] for line in lines] == ["v0", "v1", "v2", "v3", "v4", "v6", "v7"]
    raw = run(built, "tail", "events", "--from", "5", "--include-rewrites", "--json", "--idle-timeout", "0.3").output
    assert [json.loads(line)["id_version"] for line in raw.splitlines()] == [5, 6, 7]


# --------------------------------------------------------------------------- errors: one sentence, exit 1


def error_of(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_no_catalog_file(tmp_path: Path) -> None:
    line = error_of(run(None, "tables", catalog=str(tmp_path / "missing.db")))
    assert "missing.db does not exist" in line


def test_unreachable_catalog_service() -> None:
    from ordo.broker import free_port

    line = error_of(run(None, "history", "events", catalog=f"http://127.0.0.1:{free_port()}"))
    assert "unreachable" in line


def test_unknown_table(built: Builder) -> None:
    for args in (("history", "nope"), ("show", "nope"), ("changes", "nope", "--from", "0"), ("tail", "nope")):
        assert "table 'nope' is not in the catalog" in error_of(run(built, *args))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("show", "events", "--version", "99"), "version 99 does not exist"),
        (("show", "events", "--version", "abc"), "bad version 'abc'"),
        (("show", "events", "--version", "-1"), "bad version '-1'"),
        (("changes", "events", "--from", "x"), "bad --from version 'x'"),
        (("changes", "events", "--from", "99"), "does not exist"),
        (("show", "events", "--timestamp", "yesterday"), "bad timestamp 'yesterday'"),
        (("show", "events", "--timestamp", "2024-13-45T00:00:00"), "bad timestamp"),
        (("changes", "events", "--by", "time", "--from", "noon"), "bad --from timestamp 'noon'"),
        (("show", "events", "--timestamp", "2000-01-01T00:00:00Z"), "is before table 'events' was created"),
        (("show", "events", "--version", "1", "--timestamp", "2024-01-01"), "not both"),
    ],
)
def test_bad_versions_and_timestamps(built: Builder, args: tuple[str, ...], expected: str) -> None:
    assert expected in error_of(run(built, *args))


def test_no_broker_reachable(tmp_path: Path) -> None:
    """The services refuse to start, in one sentence, when the broker does not answer."""
    from ordo.broker import free_port

    servers = f"127.0.0.1:{free_port()}"
    for command in (["arbiter"], ["consumer", "--catalog", str(tmp_path / "c.db"), "--no-http"]):
        result = CliRunner().invoke(
            main, ["--bootstrap-servers", servers, *command, "--broker-timeout", "1"], catch_exceptions=False
        )
        assert f"no Kafka broker reachable at {servers}" in error_of(result)
    result = CliRunner().invoke(main, ["arbiter"], env={"ORDO_BOOTSTRAP_SERVERS": ""}, catch_exceptions=False)
    assert "no Kafka broker configured" in error_of(result)


def test_debug_shows_the_traceback(built: Builder, tmp_path: Path) -> None:
    from ordo.consumer.errors import CatalogUnavailableError

    with pytest.raises(CatalogUnavailableError):
        CliRunner().invoke(
            main,
            ["tables"],
            env={"ORDO_CATALOG": str(tmp_path / "none.db"), "ORDO_DEBUG": "1"},
            catch_exceptions=False,
        )


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("up", "broker", "arbiter", "consumer", "demo", "tables", "history", "show", "changes", "tail"):
        assert name in main.commands and name in result.output
    assert "vacuum" in main.commands and "replay" in main.commands
    assert "ordo replay" in result.output and "ordo vacuum" in result.output


def test_module_entry_point_runs(tmp_path: Path) -> None:
    """``python -m ordo`` is the same CLI (what ``ordo.services.stack`` starts)."""
    import subprocess
    import sys

    env = {**os.environ, "ORDO_CATALOG": str(tmp_path / "none.db")}
    done = subprocess.run([sys.executable, "-m", "ordo", "tables"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("error: catalog file") and "Traceback" not in done.stderr


def test_demo_without_java_says_what_to_install() -> None:
    result = CliRunner().invoke(main, ["demo"], env={"PATH": "/nonexistent", "JAVA_HOME": ""}, catch_exceptions=False)
    assert "Spark needs Java 17 or newer" in error_of(result) and "openjdk-17" in error_of(result)


def test_history_names_a_merge(built: Builder) -> None:
    """An UPDATE whose writer counted a MERGE's rows (0.5) shows as UPDATE (MERGE); a plain one does not."""
    txn = uuid.uuid4().hex[:12]
    data = built.write(txn, "2024-05-01", [{"id": 1, "v": "m"}, {"id": 70, "v": "n"}, {"id": 2, "op": "delete"}])
    counts = {"numTargetRowsInserted": 1, "numTargetRowsUpdated": 1, "numTargetRowsDeleted": 1}
    model = {key: v for key, v in built.model.items() if key != ("2024-05-01", 2)}
    model.update({("2024-05-01", 1): "m", ("2024-05-01", 70): "n"})
    intent = built._intent(Operation.UPDATE, "2024-05-01", (data,), txn=txn, operation_metrics=counts)
    decision = built._commit(intent, model)
    assert decision.accepted and decision.operation_metrics == counts, decision.message
    lines = [line for line in run(built, "history", "events").output.splitlines() if "UPDATE" in line]
    assert len(lines) == 1 and "UPDATE (MERGE)" in lines[0]
