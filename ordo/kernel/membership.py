"""Sharing tables among processes through a Kafka consumer group.

A *membership* consumer subscribes to a pattern of per-table topics in a
consumer group (cooperative-sticky: members keep what they keep through a
rebalance) and never reads a record: every assigned partition is paused at
once. Its assignment is the set of tables the process owns; the process reads
the topics with its own ``assign()``-based consumers, from the offsets its own
store keeps. Group offsets are never committed.

A thread of the membership's own serves the group: rebalance callbacks run
there, and a member rejoins a rebalance within a fraction of a second however
long its caller is busy (a table's load, a transaction). ``poll()`` returns
what changed since the last call, so the caller acts on it between its own
batches. A table revoked or lost may be owned by another member before the
caller has stopped following it: what the two do meanwhile must be safe on
its own (the consumer's catalog transactions adopt a newer stored offset; the
arbiter's per-table transactional ids fence).

Each table a member holds has a *tenure*: a number that changes whenever the
group assigns it the table anew (``tenure()``), and None once revoked or lost.
A caller that keeps something per table (the arbiter's transactional producer)
records the tenure it took it under; a different one means the table was lost
or revoked in between, even if the group has assigned it back since and the
caller has not polled yet. A caller that cannot serve a table it holds gives it
up with ``rejoin()``: the classic protocol cannot hand back one partition, so
the member leaves the group (the others take its tables in one rebalance) and
joins again as a new member.

Why a thread: the classic group protocol's rebalance timeout is the client's
``max.poll.interval.ms``, and a member killed while a rebalance is under way
holds the whole group (every table of every member) until it expires. Served
by a thread, the interval can be short (``DEFAULT_MAX_POLL_INTERVAL_MS``); a
process whose caller stops calling ``poll()`` for ``stall_limit`` seconds
(hung, not busy) is no longer served and leaves the group one interval later.

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
# The classic protocol's rebalance timeout (librdkafka sends max.poll.interval.ms): how long a rebalance waits for a
# member that stopped answering. The serving thread answers in SERVE_WAIT_S; librdkafka needs it >= the session.
DEFAULT_MAX_POLL_INTERVAL_MS = 10_000
# A caller that has not called poll() for this long is taken for hung: its tables go to the others.
DEFAULT_STALL_LIMIT_S = 300.0
SERVE_WAIT_S = 0.2
RESUME_WAIT_S = 5.0  # poll() after a stall waits this long at most for the group to be served once more


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
        *,
        stall_limit: float = DEFAULT_STALL_LIMIT_S,
        on_release: Callable[[set[str]], None] | None = None,
    ) -> None:
        """``config`` is the librdkafka base (servers, security, ``session.timeout.ms`` to tune the handover).

        ``on_release(tables)`` runs on the serving thread when tables are revoked or lost, after they left
        ``owned``: a caller that must stop using a table before another member gets it (the table service:
        a rewrite in flight) does so there. The group waits for a revoke's callback before it hands the tables
        on, for up to the rebalance timeout (``max.poll.interval.ms``), so the callback should be brief.
        """
        self.group = group
        self.pattern = pattern
        self.stall_limit = stall_limit
        self._table_of = table_of
        self._on_release = on_release
        session = int(config.get("session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
        self._config = {
            "session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": DEFAULT_HEARTBEAT_INTERVAL_MS,
            # The rebalance timeout (the module's docstring); librdkafka refuses one below the session timeout.
            "max.poll.interval.ms": max(DEFAULT_MAX_POLL_INTERVAL_MS, session),
            **config,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,  # the caller's store keeps progress, never the group
            "enable.auto.offset.store": False,
            "topic.metadata.refresh.interval.ms": 1000,  # new topics join the pattern within about a second
            "allow.auto.create.topics": False,
        }
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._pending = Changes()
        self._owned: set[str] = set()
        self._tenure: dict[str, int] = {}  # held table -> the assignment it was given in (``rebalances``)
        self._assigned = threading.Event()
        self._closing = threading.Event()
        self._server: threading.Thread | None = None
        self._rejoin = threading.Event()  # the caller gives its tables up: leave the group and join again
        self._stalled = threading.Event()  # the caller stopped calling poll(): the group is not served
        self._served = threading.Event()  # set after each round of serving
        self._asked = time.monotonic()  # when the caller last called poll()
        self.rebalances = 0

    @property
    def owned(self) -> frozenset[str]:
        """The tables the group assigns this member now."""
        with self._lock:
            return frozenset(self._owned)

    def holds(self, table: str) -> bool:
        """True when the group assigns ``table`` to this member now (cheaper than ``owned`` for one table)."""
        return table in self._owned

    def tenure(self, table: str) -> int | None:
        """Which assignment gave this member ``table`` (a new number each time it is assigned anew), or None when
        it does not hold it now."""
        return self._tenure.get(table)

    @property
    def session_timeout(self) -> float:
        """The group's session timeout in seconds: how long a member that stopped answering still holds tables."""
        return int(self._config["session.timeout.ms"]) / 1000.0

    @property
    def assigned_once(self) -> bool:
        """True once the group gave this member its first assignment (maybe empty)."""
        return self._assigned.is_set()

    def join(self, *, wait: bool, timeout: float = 120.0, stop: threading.Event | None = None) -> None:
        """Subscribe and start serving the group; with ``wait``, return at its first assignment (Tansu: seconds)."""
        self._consumer = self._subscribe()
        self._asked = time.monotonic()
        self._server = threading.Thread(target=self._serve, name=f"membership-{self.group}", daemon=True)
        self._server.start()
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while not self._assigned.wait(0.1):
            if stop is not None and stop.is_set():
                return
            if time.monotonic() > deadline:
                self.close()
                raise MembershipError(f"no assignment from consumer group {self.group!r} within {timeout:g} s")

    def poll(self) -> Changes:
        """What the group changed since the last call (the serving thread applied it to ``owned`` already).

        After a stall (the caller did not call this for ``stall_limit`` seconds) the serving thread first serves
        the group once more, so what the group did meanwhile (most likely: this member's tables lost) is in the
        answer, never seen a call late.
        """
        self._asked = time.monotonic()
        if self._stalled.is_set() and self._server is not None:
            self._served.clear()
            self._served.wait(RESUME_WAIT_S)
        with self._lock:
            changes, self._pending = self._pending, Changes()
        return changes

    def rejoin(self) -> None:
        """Give up every table: leave the group (the others take them in one rebalance) and join it again as a new
        member, which the group gives a share anew.

        The tables are given up at once (``holds`` and ``tenure`` say so, ``poll`` reports them revoked), so the
        caller never takes one again before the member has left; the serving thread leaves and joins."""
        with self._lock:
            given_up = set(self._owned)
            self._owned.clear()
            self._forget(given_up)
            self._pending.revoked |= given_up
            self._pending.assigned -= given_up
        log.warning(
            "group %s: giving up table(s) %s; leaving the group and joining again", self.group, _names(given_up)
        )
        self._rejoin.set()

    def close(self) -> None:
        """Leave the group: the other members take this one's tables at once."""
        self._closing.set()
        if self._server is not None:
            self._server.join()
            self._server = None
        self._leave()

    def _leave(self) -> None:
        """Close the membership consumer: the member leaves the group."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # leaving is best effort; the session timeout does it otherwise
                log.debug("closing the membership consumer of %s failed", self.group, exc_info=True)
            self._consumer = None

    def _subscribe(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(self._config)
        consumer.subscribe([self.pattern], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        return consumer

    def _leave_and_join(self) -> bool:
        """``rejoin()``, on the serving thread: close the consumer (its revocation gives every table up), then
        subscribe a new one; False (to be tried again) when that fails."""
        if self._consumer is not None:
            self._leave()
            self._on_revoke(None, [], names=set(self._owned))  # whatever closing did not revoke
        try:
            self._consumer = self._subscribe()
        except Exception:
            log.exception("group %s: joining again failed; retrying", self.group)
            return False
        self._rejoin.clear()
        return True

    def _serve(self) -> None:
        """The serving thread: answer the group (rebalances, callbacks) while the caller is alive."""
        while not self._closing.is_set():
            if self._rejoin.is_set() and not self._leave_and_join():
                self._closing.wait(SERVE_WAIT_S)
                continue
            idle = time.monotonic() - self._asked
            if idle > self.stall_limit:
                if not self._stalled.is_set():
                    log.error(
                        "group %s: the process has not served its tables for %.0f s; leaving them to the others",
                        self.group,
                        idle,
                    )
                    self._stalled.set()
                self._closing.wait(SERVE_WAIT_S)  # librdkafka leaves the group one max.poll.interval.ms later
                continue
            try:
                self._consumer.poll(SERVE_WAIT_S)
                if self._stalled.is_set():
                    # Back from a stall: a left group's "lost" waits in the queue; one more poll serves it.
                    self._consumer.poll(SERVE_WAIT_S)
            except Exception:  # a callback's or the client's error must not end the serving
                log.exception("group %s: serving the group failed; retrying", self.group)
                self._closing.wait(SERVE_WAIT_S)
            self._stalled.clear()
            self._served.set()

    def _tables(self, partitions: list[Any]) -> set[str]:
        names = set()
        for tp in partitions:
            name = self._table_of(tp.topic)
            if name is not None:
                names.add(name)
        return names

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if partitions:
            consumer.pause(partitions)  # membership only: never fetch
        names = self._tables(partitions)
        with self._lock:
            self.rebalances += 1
            self._owned |= names
            self._tenure.update(dict.fromkeys(names, self.rebalances))
            self._pending.assigned |= names
            self._pending.revoked -= names
            self._pending.lost -= names
        self._assigned.set()
        if names:
            log.info("group %s assigned table(s) %s", self.group, ", ".join(sorted(names)))

    def _on_revoke(self, consumer: Any, partitions: list[Any], names: set[str] | None = None) -> None:
        names = self._tables(partitions) if names is None else names
        with self._lock:
            self._owned -= names
            self._forget(names)
            self._pending.revoked |= names
            self._pending.assigned -= names
        if names:
            log.info("group %s revoked table(s) %s", self.group, ", ".join(sorted(names)))
            self._release(names)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        names = self._tables(partitions)
        with self._lock:
            self._owned -= names
            self._forget(names)
            self._pending.lost |= names
            self._pending.assigned -= names
        if names:
            log.warning("group %s: lost table(s) %s (this member left the group)", self.group, ", ".join(sorted(names)))
            self._release(names)

    def _release(self, names: set[str]) -> None:
        if self._on_release is None:
            return
        try:
            self._on_release(set(names))
        except Exception:  # the caller's trouble must not stop the group's serving
            log.exception("group %s: releasing table(s) %s failed", self.group, ", ".join(sorted(names)))

    def _forget(self, names: set[str]) -> None:
        for name in names:
            self._tenure.pop(name, None)


def _names(tables: set[str]) -> str:
    return ", ".join(sorted(tables)) or "(none)"


__all__ = ["Changes", "GroupMembership", "MembershipError"]
