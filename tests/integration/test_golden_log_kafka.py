"""A released version's golden log put back on a real broker: the real ``ordo replay --verify`` and ``ordo consumer``.

The records are produced again with their keys, headers and timestamps
(CreateTime topics, so the broker keeps them). Intent offsets come out the
same (the intents log has no gaps); decision offsets do not (the original ones
skip the arbiter's transaction markers): decision offsets are only positions
in the log, the catalog's copy of them is compared through that mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ordo.broker import DECISIONS_CONFIG, create_topics
from ordo.schemas import CommitDecision, decisions_topic, intents_topic
from ordo.services.audit import EXIT_OK, run_replay
from ordo.settings import Settings
from tests.unit.golden_log import RELEASES, dump_catalog, expected_catalog, read_topic, tables, trusted_key


def _load(settings: Settings, release: str) -> dict[str, dict[int, int]]:
    """Produce ``release``'s golden log under ``settings``' prefix; return each table's decision offset mapping."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_config())
    names = tables(release)
    create_topics(
        admin,
        {
            topic(settings.topic_prefix, table): DECISIONS_CONFIG  # CreateTime: the golden timestamps are kept
            for table in names
            for topic in (intents_topic, decisions_topic)
        },
    )
    producer = Producer(settings.kafka_config(**{"enable.idempotence": True}))
    offsets: dict[str, dict[int, int]] = {}
    for table in names:
        for kind, topic in (("intents", intents_topic), ("decisions", decisions_topic)):
            records = read_topic(release, table, kind)
            for record in records:
                producer.produce(
                    topic(settings.topic_prefix, table),
                    record.value,
                    record.key,
                    timestamp=record.timestamp,
                    headers=None if record.headers is None else list(record.headers),
                )
            if kind == "decisions":
                offsets[table] = {record.offset: position for position, record in enumerate(records)}
        assert producer.flush(30) == 0
    return offsets


@pytest.mark.parametrize("release", RELEASES)
def test_a_golden_log_on_a_real_broker_verifies_and_materializes(
    release: str, settings: Settings, consumer: Callable[..., Any]
) -> None:
    offsets = _load(settings, release)
    key = trusted_key(release)
    if key is None:
        # A log of 0.1 predates signed decisions: readable with the upgrade switch, refused without it.
        readers = settings.with_overrides(require_signatures=False)
    else:
        # A signed log: verified trusting the key that signed it (and refused trusting only the fixture's key).
        readers = settings.with_overrides(trusted_keys=str(key), require_signatures=True)
    for table in tables(release):
        lines: list[str] = []
        assert run_replay(readers, table, verify=True, echo=lines.append) == EXIT_OK, "\n".join(lines)
        assert "RESULT: OK" in lines[-1]
        assert run_replay(settings, table, verify=True, echo=lines.append) != EXIT_OK
    running = consumer(settings=readers)
    expected = expected_catalog(release)
    for table, mapping in offsets.items():
        expected[table]["log_offset"] = len(mapping)
        for row in expected[table]["history"]:
            row["log_offset"] = mapping[row["log_offset"]]
    assert dump_catalog(running.catalog_path, tables(release)) == expected


def test_this_arbiter_continues_a_0_1_log_and_the_whole_log_verifies(
    settings: Settings,
    arbiter: Callable[..., Any],
    consumer: Callable[..., Any],
    commit_client: Any,
    decisions_transactions: bool,
) -> None:
    """The rolling upgrade's arbiter step: a new arbiter rebuilds from 0.1 decisions and appends 0.2 ones.

    The 0.1 log is unsigned: the upgraded arbiter runs once with signatures not required (and its key),
    and its first signed decision vouches for the whole 0.1 history for every reader that requires them.
    """
    from ordo.schemas import CommitIntent, DataFile, Operation, Outcome

    _load(settings, "0.1")
    arbiter(settings=settings.with_overrides(require_signatures=False))
    spec = {"region": "eu", "dt": "2024-01-03"}

    def after_upgrade(txn: str, bucket: int) -> CommitDecision:
        return commit_client.commit(
            CommitIntent(
                txn_id=txn,
                table="orders",
                operation=Operation.INSERT_INTO,
                read_version=10,
                partitions=(spec,),
                added_files=(
                    DataFile(
                        path=f"region=eu/dt=2024-01-03/{txn}-0.parquet",
                        partition=spec,
                        record_count=1,
                        size_bytes=100,
                        bucket=bucket,
                    ),
                ),
            ),
            timeout=60.0,
        )

    # A 0.1 table has no ordo.buckets: one bucket, so bucket 7 is refused and bucket 0 is the writer's only choice.
    assert after_upgrade("o-bucket-7", 7).reason == "INVALID_BUCKET"
    decision = after_upgrade("o-after-upgrade", 0)
    assert decision.outcome is Outcome.ACCEPTED and decision.id_version == 11, decision.message
    lines: list[str] = []
    assert run_replay(settings, "orders", verify=True, echo=lines.append) == EXIT_OK, "\n".join(lines)
    with consumer().catalog() as catalog:
        info = catalog.wait_for_version("orders", 11, timeout=60.0)
        assert info.error is None
        files = {f.path: f.bucket for f in catalog.snapshot("orders").files}
    assert files["region=eu/dt=2024-01-03/o-after-upgrade-0.parquet"] == 0
    assert files["region=eu/dt=2024-01-01/o-cluster1-0.parquet"] == 0
