"""Decisions without Kafka transactions (``ORDO_DECISIONS_TRANSACTIONS=false``) on a real broker.

The arbiter's ``DirectSink`` writes each batch with an idempotent producer and no transaction: the decisions
log holds no transaction markers (its offsets are contiguous), every record carries the ``ordo-epoch`` header,
each batch's last record is signed, and every reader (commit client, ``ordo replay --verify``) takes the log as
it takes a transactional one. With transactions (the default) each batch ends with a commit marker.
"""

from __future__ import annotations

from collections.abc import Callable

from ordo.kernel.logread import read_to_end
from ordo.producer import CommitClient
from ordo.schemas import decisions_topic
from ordo.schemas.signing import EPOCH_HEADER, SIGNATURE_HEADER, epoch_of
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings

from ..chaos.common import create_intent, insert_intent
from .test_signed_decisions import replay_verify


def test_the_log_has_no_transaction_markers_and_verifies(
    arbiter: Callable[..., ManagedProcess], settings: Settings, decisions_transactions: bool, broker_kind: str
) -> None:
    table = "direct"
    process = arbiter()
    with CommitClient(settings=settings) as client:
        assert client.commit(create_intent(table), timeout=60).id_version == 0
        for i in range(1, 6):
            assert client.commit(insert_intent(table, f"w{i}", "p", read_version=i - 1), timeout=60).id_version == i
    config = settings.kafka_config(
        **{"group.id": f"{settings.topic_prefix}.check", "isolation.level": "read_committed"}
    )
    records = list(read_to_end(config, decisions_topic(settings.topic_prefix, table), transactional=True))
    offsets = [m.offset() for m in records]
    assert len(records) == 6
    signed = [m.offset() for m in records if any(k == SIGNATURE_HEADER for k, _ in m.headers() or ())]
    assert signed and signed[-1] == offsets[-1], "the last record of the last batch is signed"
    epochs = {epoch_of(m.headers()) for m in records}
    if decisions_transactions:
        assert epochs == {None}
        if broker_kind == "kafka":  # a commit marker after each batch (Tansu's markers are not offsets here)
            assert offsets != list(range(6))
    else:
        assert offsets == list(range(6)), "no transaction, no markers"
        assert all(any(k == EPOCH_HEADER for k, _ in m.headers() or ()) for m in records)
        assert len(epochs) == 1 and None not in epochs
    code, report = replay_verify(settings, table)
    assert code == 0, report
    assert process.running
