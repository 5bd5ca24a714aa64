"""Which tables an arbiter decides: a static shard, or its share of an arbiter fleet's consumer group.

Static: ``--shard I/N`` owns the tables with ``crc32(table) % N == I``
(``shard_of``), found by listing the topics matching ``<prefix>.*.intents``.

Fleet (``group`` / ``ORDO_ARBITER_GROUP`` / ``ordo arbiter --fleet``): a
membership consumer (``kernel.membership.GroupMembership``, the one the consumer
uses too) subscribes to the intents topics by pattern with the
cooperative-sticky assignor and never fetches; its assignment is the set of
tables this arbiter owns. The caller acts on what changed between its batches
(``poll``): a table assigned is taken (its producer fences the previous owner,
then the rebuild), one revoked or lost is dropped. The membership is served by
a thread of its own, so a table may be revoked or lost while its transaction is
open: the sink asks ``tenure`` before every attempt to end one, and drops a
table whose tenure changed at once. Intents are still read through ``assign()``
at the rebuilt resume offset: the decisions log, not the group's committed
offsets, is the progress marker. Why a previous owner can never publish a
decision for a table it lost is in docs/scaling.md ("Fencing").

A table this member holds but cannot serve (``cannot_serve``: fenced by a
producer the group did not assign it to, a transaction that cannot be ended, a
producer that cannot be initialised, each within its bound) is not taken again
under the same tenure, and the member reports not ready (``unserved``). The
group is given a session timeout to take the table away (a member that was
paused learns so late); if it still assigns it, the member gives up its tables
(``GroupMembership.rejoin``) so that the group hands them out anew.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import zlib
from collections.abc import Container, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Unserved:
    """A table this member holds under ``tenure`` but cannot serve, since ``since`` (monotonic), and why."""

    tenure: int
    since: float
    why: str


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
        self.unserved: dict[str, Unserved] = {}  # held tables this member cannot serve under their current tenure

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
        """Fleet: what the group changed since the last call (call between transactions); static: nothing.

        Forgets the unserved tables the group took away or assigned anew, and gives every table up when one it
        cannot serve is still assigned a session timeout later."""
        if self.membership is None:
            return Changes()
        changes = self.membership.poll()
        for table, unserved in list(self.unserved.items()):
            if self.tenure(table) != unserved.tenure:
                del self.unserved[table]
        if self.unserved and time.monotonic() - min(u.since for u in self.unserved.values()) > self.give_up_after:
            log.error(
                "group %s still assigns table(s) this arbiter cannot serve: %s; giving its tables up",
                self.group,
                "; ".join(f"{table} ({u.why})" for table, u in sorted(self.unserved.items())),
            )
            self.membership.rejoin()
            self.unserved.clear()
        return changes

    @property
    def give_up_after(self) -> float:
        """Seconds a held table that cannot be served waits for the group to take it away before this member gives
        its tables up: the session timeout, after which a member that was paused knows it left the group."""
        return self.membership.session_timeout if self.membership is not None else 0.0

    def tenure(self, table: str) -> int | None:
        """Which assignment gave this arbiter ``table`` (static: always 0 for its own tables), None if not owned."""
        if self.membership is not None:
            return self.membership.tenure(table)
        if self.group is not None:
            return None  # a fleet member before it joined
        return 0 if shard_of(table, self.shard[1]) == self.shard[0] else None

    def owns(self, table: str) -> bool:
        """True when this arbiter should decide ``table``: it holds it and can serve it."""
        tenure = self.tenure(table)
        if tenure is None:
            return False
        unserved = self.unserved.get(table)
        return unserved is None or unserved.tenure != tenure

    def cannot_serve(self, table: str, why: str) -> None:
        """``table`` cannot be served under its current tenure: not taken again until the group assigns it anew."""
        tenure = self.tenure(table)
        known = self.unserved.get(table)
        if tenure is not None and (known is None or known.tenure != tenure):
            self.unserved[table] = Unserved(tenure, time.monotonic(), why)

    def not_serving(self) -> dict[str, str]:
        """The tables this arbiter holds but cannot serve, and why (for ``/readyz``)."""
        return {table: u.why for table, u in sorted(self.unserved.items()) if self.tenure(table) == u.tenure}

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


__all__ = ["Ownership", "Unserved", "default_group", "parse_shard", "shard_of"]
