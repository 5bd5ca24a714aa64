"""Which tables an arbiter decides: a static shard, or its share of an arbiter fleet's consumer group.

Static: ``--shard I/N`` owns the tables with ``crc32(table) % N == I``
(``shard_of``), found by listing the topics matching ``<prefix>.*.intents``.

Fleet (``group`` / ``ORDO_ARBITER_GROUP`` / ``ordo arbiter --fleet``): a
membership consumer (``kernel.membership.GroupMembership``, the one the consumer
uses too) subscribes to the intents topics by pattern with the
cooperative-sticky assignor and never fetches; its assignment is the set of
tables this arbiter owns. The caller acts on what changed between its batches
(``poll``): a table assigned is taken (its producer fences the previous owner,
then the rebuild), one revoked or lost is dropped. The membership is served only
between transactions, so a revoked table never has one open. A table fenced
away (``lose``) is not taken again until the group assigns it anew. Intents are
still read through ``assign()`` at the rebuilt resume offset: the decisions log,
not the group's committed offsets, is the progress marker. Why a previous owner
can never publish a decision for a table it lost is in docs/scaling.md
("Fencing").
"""

from __future__ import annotations

import logging
import re
import threading
import zlib
from collections.abc import Container, Iterable
from typing import Any

from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.membership import Changes, GroupMembership, MembershipError
from ordo.kernel.settings import Settings
from ordo.kernel.validation import parse_shard
from ordo.schemas import intents_pattern, parse_topic

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines


def shard_of(table: str, shards: int) -> int:
    """The shard that owns ``table``: ``crc32(table) % shards`` (stable across processes and versions)."""
    return zlib.crc32(table.encode()) % shards


def default_group(settings: Settings) -> str:
    """The arbiter fleet's consumer group: ``ORDO_ARBITER_GROUP``, else ``<prefix>.arbiters``."""
    return settings.arbiter_group or f"{settings.topic_prefix}.arbiters"


class Ownership:
    """The tables this arbiter owns, by static shard or by group membership."""

    def __init__(self, settings: Settings, shard: tuple[int, int], group: str | None) -> None:
        if not 0 <= shard[0] < shard[1]:
            raise ValueError(f"invalid shard {shard}: need 0 <= index < count")
        if group is not None and shard != (0, 1):
            raise ValueError("an arbiter of a group owns what the group assigns it: give a group or a shard, not both")
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.shard = shard
        self.group = group
        self.pattern = re.compile(intents_pattern(self.prefix))
        self.membership: GroupMembership | None = None
        self.lost: set[str] = set()  # assigned tables fenced away: not taken again until assigned anew

    def describe(self) -> str:
        """``group 'x'`` or ``shard i/n`` (for messages)."""
        if self.group is not None:
            return f"group {self.group!r}"
        return f"shard {self.shard[0]}/{self.shard[1]}"

    @property
    def rebalances(self) -> int:
        """Assignments the group made to this arbiter (0 for a static shard)."""
        return self.membership.rebalances if self.membership is not None else 0

    def table_of(self, topic: str) -> str | None:
        """The table whose intents topic ``topic`` is, or None."""
        parsed = parse_topic(self.prefix, topic)
        return parsed[0] if parsed is not None and parsed[1] == "intents" else None

    def join(self, topics: Iterable[str], stop: threading.Event) -> None:
        """Fleet: subscribe the membership consumer and wait for the group's first assignment (on Tansu: seconds).

        ``topics`` are the topics that exist: librdkafka joins only once the
        pattern matches one, so with none yet there is nothing to wait for.
        """
        if self.group is None:
            return
        self.membership = GroupMembership(
            self.membership_config(), self.group, intents_pattern(self.prefix), self.table_of
        )
        try:
            self.membership.join(wait=any(self.pattern.match(t) for t in topics), stop=stop)
        except MembershipError as exc:
            raise BrokerUnavailableError(f"no assignment from arbiter group {self.group!r}: {exc}") from exc

    def membership_config(self) -> dict[str, Any]:
        """The base configuration of the membership consumer (``GroupMembership`` adds the group's settings)."""
        return self.settings.kafka_config(**{"client.id": f"{self.prefix}.arbiter.membership", "logger": kafka_log})

    def poll(self) -> Changes:
        """Fleet: serve the group (call between transactions) and return what it changed; static: nothing."""
        if self.membership is None:
            return Changes()
        changes = self.membership.poll()
        self.lost -= changes.assigned
        return changes

    def owns(self, table: str) -> bool:
        """True when this arbiter should decide ``table``."""
        if self.membership is not None:
            return self.membership.holds(table) and table not in self.lost
        if self.group is not None:
            return False  # a fleet member before it joined
        return shard_of(table, self.shard[1]) == self.shard[0]

    def lose(self, table: str) -> None:
        """``table`` was fenced away by its new owner: not taken again until the group assigns it anew."""
        self.lost.add(table)

    def new_tables(self, topics: Iterable[str], known: Container[str], broken: Container[str]) -> list[tuple[str, str]]:
        """``(table, intents topic)`` of each owned table among ``topics`` not ``known`` (by topic) nor ``broken``."""
        found = []
        for topic in sorted(topics):
            if topic in known or not self.pattern.match(topic):
                continue
            name = self.table_of(topic)
            if name is None or name in broken or not self.owns(name):
                continue
            found.append((name, topic))
        return found

    def close(self) -> None:
        """Leave the group: the others take this arbiter's tables at once."""
        if self.membership is not None:
            self.membership.close()
            self.membership = None


__all__ = ["Ownership", "default_group", "parse_shard", "shard_of"]
