"""A consumer whose fetches lose chosen records: a test double standing in for Tansu's fetch race (docs/tansu.md).

It wraps a real ``confluent_kafka.Consumer`` on the real broker: the broker
hands the record out and the consumer's position moves past it, but the caller
never sees it, exactly what the race looks like from a reader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class LossyConsumer:
    """Delegates to ``real``; records for which ``drop(message)`` is true are swallowed (counted in ``dropped``)."""

    def __init__(self, real: Any, drop: Callable[[Any], bool], *, events: bool = False) -> None:
        self._real = real
        self._drop = drop
        self._events = events  # also offer events (end of partition, errors) to ``drop``
        self._lock = threading.Lock()
        self.dropped: list[tuple[str, int]] = []

    def _keep(self, message: Any) -> bool:
        if (message.error() is not None and not self._events) or not self._drop(message):
            return True
        with self._lock:
            if message.error() is None:
                self.dropped.append((message.topic(), message.offset()))
        return False

    def poll(self, timeout: float = -1) -> Any:
        message = self._real.poll(timeout)
        if message is None or self._keep(message):
            return message
        return None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        return [m for m in self._real.consume(num_messages=num_messages, timeout=timeout) if self._keep(m)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def drop_offsets_once(offsets: set[int], topic: str | None = None) -> Callable[[Any], bool]:
    """A ``drop`` predicate losing each of ``offsets`` (of ``topic``, or any topic) the first time it is fetched."""
    left = set(offsets)
    lock = threading.Lock()

    def drop(message: Any) -> bool:
        if topic is not None and message.topic() != topic:
            return False
        with lock:
            if message.offset() in left:
                left.discard(message.offset())
                return True
        return False

    return drop


class LateConsumer:
    """Delegates to ``real``, but hands nothing out for ``delay`` seconds after each assignment.

    A test double for a loaded machine (issue 32): the first records after
    ``assign()`` there took up to 1.1 s to arrive, while the broker's other
    clients were answered at once. Nothing is lost; it only comes late.
    """

    def __init__(self, real: Any, delay: float) -> None:
        self._real = real
        self.delay = delay
        self.assignments = 0
        self._until = 0.0

    def _assigned(self) -> None:
        self.assignments += 1
        self._until = time.monotonic() + self.delay

    def _late(self, timeout: float) -> bool:
        remaining = self._until - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(max(0.0, min(remaining, timeout if timeout >= 0 else remaining)))
        return True

    def assign(self, partitions: Any) -> None:
        self._real.assign(partitions)
        self._assigned()

    def incremental_assign(self, partitions: Any) -> None:
        self._real.incremental_assign(partitions)
        self._assigned()

    def poll(self, timeout: float = -1) -> Any:
        return None if self._late(timeout) else self._real.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        return [] if self._late(timeout) else self._real.consume(num_messages=num_messages, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def late_arbiter_intents(monkeypatch: Any, prefix: str, delay: float) -> list[LateConsumer]:
    """Make the intents consumer of ``prefix``'s arbiters (in this process) a ``LateConsumer``; the ones made."""
    import confluent_kafka

    real_class = confluent_kafka.Consumer
    made: list[LateConsumer] = []

    def factory(config: dict[str, Any]) -> Any:
        consumer = real_class(config)
        if config.get("client.id") != f"{prefix}.arbiter.intents":
            return consumer
        made.append(LateConsumer(consumer, delay))
        return made[-1]

    monkeypatch.setattr(confluent_kafka, "Consumer", factory)
    return made


def lossy_decision_reader(settings: Any, every: int) -> None:
    """In a writer process: its commit clients' live decision readers lose every ``every``-th offset once.

    Their re-readers, history reads and probes read everything: the loss is a
    live fetch's, as Tansu's race is (docs/tansu.md). Installed by replacing
    ``confluent_kafka.Consumer`` for the rest of the process.
    """
    import confluent_kafka

    real_class = confluent_kafka.Consumer
    group = f"{settings.topic_prefix}.commit-client"
    lost: set[tuple[str, int]] = set()
    lock = threading.Lock()

    def drop(message: Any) -> bool:
        key = (message.topic(), message.offset())
        with lock:
            if message.offset() % every != every - 1 or key in lost:
                return False
            lost.add(key)
            return True

    def factory(config: dict[str, Any]) -> Any:
        consumer = real_class(config)
        live = config.get("group.id") == group and str(config.get("client.id", "")).endswith(".decisions")
        return LossyConsumer(consumer, drop) if live else consumer

    confluent_kafka.Consumer = factory
