"""Which tables an ``ordo compactor`` rewrites: every table it follows, or its share of a compactor fleet.

A fleet (``ordo compactor --fleet``, or ``ORDO_COMPACTOR_GROUP``; default group
``<prefix>.compactors``) shares tables the way the arbiter fleet does
(``arbiter.ownership``): a membership consumer (``kernel.membership.GroupMembership``)
subscribes to the tables' intents topics in a Kafka consumer group of its own,
never fetches, and its assignment (one topic, so one table, per partition) is
the set of tables this process compacts. A table moves when a member stops,
dies or joins.

One table is never rewritten by two members at once: a member starts a
rewrite only while the group assigns it the table, and looks again before it
publishes; when the group revokes a table, the revoke callback (run before the
group hands the table on) abandons the table's rewrite in flight (its Spark job
is cancelled and its staged files deleted) and waits for it to end, up to
``RELEASE_WAIT_S``, which is below the group's rebalance timeout. A rewrite
whose intents were already published when the table moved is decided like any
other: the arbiter's matrix rejects the later of two overlapping rewrites
(MINOR after MINOR, MAJOR after MINOR fail), so even a member that overran the
wait can only waste work, never lose data. A member that dies loses its
tables after the session timeout (6 s); its staged files are orphans that
``ordo vacuum --orphans`` removes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ordo.kernel.membership import Changes, GroupMembership
from ordo.schemas import intents_pattern, parse_topic

if TYPE_CHECKING:
    from ordo.kernel.settings import Settings

log = logging.getLogger("ordo.compactor")
kafka_log = logging.getLogger("ordo.kafka")

RELEASE_WAIT_S = 8.0  # a revoked table's rewrite gets this long to stop (the group's rebalance timeout is 10 s)
JOIN_WAIT_S = 60.0  # at start-up, wait this long for the first assignment when tables exist


def default_group(settings: Settings) -> str:
    """The compactor fleet's consumer group: ``ORDO_COMPACTOR_GROUP``, else ``<prefix>.compactors``."""
    return settings.compactor_group or f"{settings.topic_prefix}.compactors"


class Claims:
    """The tables this compactor may rewrite: all of them, or what its fleet's group assigns it."""

    def __init__(self, settings: Settings, group: str | None) -> None:
        self.settings = settings
        self.group = group
        self.prefix = settings.topic_prefix
        self.membership: GroupMembership | None = None
        self._release: Callable[[set[str]], None] = lambda tables: None
        self._lock = threading.Lock()

    def describe(self) -> str:
        """``every table`` or ``its share of group 'x'`` (for the ready line)."""
        return "every table" if self.group is None else f"its share of group {self.group!r}"

    def on_release(self, release: Callable[[set[str]], None]) -> None:
        """Call ``release(tables)`` when the group takes tables away (before it hands them on)."""
        with self._lock:
            self._release = release

    def _released(self, tables: set[str]) -> None:
        with self._lock:
            release = self._release
        release(tables)

    def table_of(self, topic: str) -> str | None:
        """The table whose intents topic ``topic`` is, or None."""
        parsed = parse_topic(self.prefix, topic)
        return parsed[0] if parsed is not None and parsed[1] == "intents" else None

    def join(self) -> None:
        """Fleet: join the group (its first assignment comes while Spark starts; ``wait_assigned`` waits)."""
        if self.group is None:
            return
        config = self.settings.kafka_config(**{"client.id": f"{self.prefix}.compactor.membership", "logger": kafka_log})
        self.membership = GroupMembership(
            config, self.group, intents_pattern(self.prefix), self.table_of, on_release=self._released
        )
        self.membership.join(wait=False)

    def wait_assigned(self, tables_exist: bool, stop: threading.Event, timeout: float = JOIN_WAIT_S) -> None:
        """Fleet: wait for the group's first assignment when there are tables to assign (else none comes)."""
        if self.membership is None or not tables_exist:
            return
        deadline = time.monotonic() + timeout
        while not self.membership.assigned_once and time.monotonic() < deadline:
            if stop.wait(0.1):
                return
        if not self.membership.assigned_once:
            log.warning(
                "group %s gave no assignment within %.0f s; compacting nothing until it does", self.group, timeout
            )

    def poll(self) -> Changes:
        """Fleet: what the group changed since the last call (call it every loop turn); otherwise nothing."""
        return self.membership.poll() if self.membership is not None else Changes()

    def holds(self, table: str) -> bool:
        """True when this compactor may rewrite ``table`` now."""
        if self.group is None:
            return True
        return self.membership is not None and self.membership.holds(table)

    def close(self) -> None:
        """Leave the group: the others take this member's tables at once."""
        if self.membership is not None:
            self.membership.close()
            self.membership = None


__all__ = ["Claims", "default_group"]
