"""Sharing tables among processes through a Kafka consumer group.

A *membership* consumer subscribes to a pattern of per-table topics in a
consumer group (cooperative-sticky: members keep what they keep through a
rebalance) and never reads a record: every assigned partition is paused at
once. Its assignment is the set of tables the process owns; the process reads
the topics with its own ``assign()``-based consumers, from the offsets its own
store keeps. Group offsets are never committed.

``poll()`` serves the group (rebalance callbacks run inside it) and returns
what changed since the last call, so the caller acts on it between its own
batches. A table revoked or lost may be owned by another member before the
caller has stopped following it: what the two do meanwhile must be safe on
its own (the consumer's catalog transactions adopt a newer stored offset; the
arbiter's per-table transactional ids fence).

Imports ``confluent_kafka`` (lazily) and nothing of ours but ``schemas.errors``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ordo.schemas.errors import OrdoError

log = logging.getLogger("ordo.membership")

# A killed member's tables move after this (6 s: Kafka's default group.min.session.timeout.ms).
DEFAULT_SESSION_TIMEOUT_MS = 6000
DEFAULT_HEARTBEAT_INTERVAL_MS = 1000
# The longest a member may go without serving the group (and the rebalance timeout: see the config below).
DEFAULT_MAX_POLL_INTERVAL_MS = 60_000


class MembershipError(OrdoError):
    """The group gave no assignment in time."""


@dataclass
class Changes:
    """What the group changed since the last ``poll()``: table names."""

    assigned: set[str] = field(default_factory=set)
    revoked: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.assigned or self.revoked or self.lost)


class GroupMembership:
    """This process's share of the tables whose topics match ``pattern``, decided by consumer group ``group``."""

    def __init__(
        self,
        config: dict[str, Any],
        group: str,
        pattern: str,
        table_of: Callable[[str], str | None],
    ) -> None:
        """``config`` is the librdkafka base (servers, security, ``session.timeout.ms`` to tune the handover)."""
        self.group = group
        self.pattern = pattern
        self._table_of = table_of
        self._config = {
            "session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": DEFAULT_HEARTBEAT_INTERVAL_MS,
            **config,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,  # the caller's store keeps progress, never the group
            "enable.auto.offset.store": False,
            # Also the classic protocol's rebalance timeout: a member killed while a rebalance is under way is
            # removed only after it, not after the session timeout, and every table waits meanwhile. At
            # librdkafka's 300 s a killed arbiter's tables stayed unowned for minutes on Apache Kafka
            # (tests/chaos/test_arbiter_fleet.py, about 1 run in 3); ordo's members poll far more often.
            "max.poll.interval.ms": DEFAULT_MAX_POLL_INTERVAL_MS,
            "topic.metadata.refresh.interval.ms": 1000,  # new topics join the pattern within about a second
            "allow.auto.create.topics": False,
        }
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._pending = Changes()
        self.owned: set[str] = set()
        self.assigned_once = False
        self.rebalances = 0

    def join(self, *, wait: bool, timeout: float = 120.0, stop: threading.Event | None = None) -> None:
        """Subscribe; with ``wait``, serve the group until its first assignment (Tansu: seconds)."""
        from confluent_kafka import Consumer

        self._consumer = Consumer(self._config)
        self._consumer.subscribe(
            [self.pattern], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while not self.assigned_once:
            if stop is not None and stop.is_set():
                return
            if time.monotonic() > deadline:
                raise MembershipError(f"no assignment from consumer group {self.group!r} within {timeout:g} s")
            self._consumer.poll(0.1)

    def poll(self) -> Changes:
        """Serve the group (heartbeats run in librdkafka's threads; callbacks here) and return what changed."""
        if self._consumer is not None:
            self._consumer.poll(0)
        with self._lock:
            changes, self._pending = self._pending, Changes()
        return changes

    def close(self) -> None:
        """Leave the group: the other members take this one's tables at once."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # leaving is best effort; the session timeout does it otherwise
                log.debug("closing the membership consumer of %s failed", self.group, exc_info=True)
            self._consumer = None

    def _tables(self, partitions: list[Any]) -> set[str]:
        names = set()
        for tp in partitions:
            name = self._table_of(tp.topic)
            if name is not None:
                names.add(name)
        return names

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigned_once = True
        if partitions:
            consumer.pause(partitions)  # membership only: never fetch
        names = self._tables(partitions)
        with self._lock:
            self.rebalances += 1
            self.owned |= names
            self._pending.assigned |= names
            self._pending.revoked -= names
            self._pending.lost -= names
        if names:
            log.info("group %s assigned table(s) %s", self.group, ", ".join(sorted(names)))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        names = self._tables(partitions)
        with self._lock:
            self.owned -= names
            self._pending.revoked |= names
            self._pending.assigned -= names
        if names:
            log.info("group %s revoked table(s) %s", self.group, ", ".join(sorted(names)))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        names = self._tables(partitions)
        with self._lock:
            self.owned -= names
            self._pending.lost |= names
            self._pending.assigned -= names
        if names:
            log.warning("group %s: lost table(s) %s (this member left the group)", self.group, ", ".join(sorted(names)))


__all__ = ["Changes", "GroupMembership", "MembershipError"]
