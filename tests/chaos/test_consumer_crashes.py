"""Consumer crashes: kill -9 ``ordo consumer`` at random moments while commits and change-feed readers run.

The consumer stores each table's next Kafka offset in the same SQLite
transaction as the rows it applies (that is its checkpoint), so a restart
resumes exactly at a batch boundary. Checked afterwards: the catalog equals a
catalog rebuilt from scratch by a fresh consumer, equals the writer's model at
every version, and three change-feed subscribers saw every version once, in
order: a local one that stops and resumes from its cursor at random, a local
one that skips compactions, and one on the HTTP service (SSE) that reconnects
across every kill with ``Last-Event-ID``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.consumer import Catalog, CatalogUnavailableError
from ordo.producer import CommitClient
from ordo.settings import Settings

from ..integration.conftest import ConsumerProcess
from ..integration.test_consumer import commit_history, dump
from ..unit.test_catalog_model import IntentSource, LiveModel
from . import figures

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(figures.pick(240, 1800))]

KILLS = figures.pick(5, 100)


class Subscriber(threading.Thread):
    """Follows a table's change feed from its cursor until it has seen ``final`` (set once the writer stopped).

    ``restart_every``: after a random number (up to that) of commits the
    subscriber drops its subscription and resumes from its cursor, as a
    restarted reader would. A subscription that ends idle, or whose HTTP
    service stayed unreachable for ``idle`` seconds, is resumed the same way.
    """

    def __init__(self, catalog: Catalog, rewrites: bool, restart_every: int | None, seed: int, idle: float) -> None:
        super().__init__(daemon=True)
        self.catalog = catalog
        self.rewrites = rewrites
        self.restart_every = restart_every
        self.idle = idle
        self.rng = random.Random(seed)
        self.seen: list[int] = []
        self.resumes = 0
        self.final: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        cursor = 0
        progress = time.monotonic()
        try:
            while self.final is None or cursor <= self.final:
                budget = self.rng.randint(1, self.restart_every) if self.restart_every else None
                try:
                    for commit in self.catalog.subscribe(
                        "t", cursor, poll_interval=0.05, include_rewrites=self.rewrites, idle_timeout=self.idle
                    ):
                        self.seen.append(commit.id_version)
                        cursor = commit.id_version + 1
                        progress = time.monotonic()
                        if budget is not None:
                            budget -= 1
                            if budget == 0:
                                break
                except CatalogUnavailableError:
                    pass  # the consumer stayed down longer than ``idle``: resume from the cursor
                self.resumes += 1
                assert time.monotonic() - progress < 120, f"no commit for 120 s at cursor {cursor}"
        except BaseException as exc:
            self.error = exc


def test_consumer_kill_9_at_random_moments_equals_a_rebuild_and_feeds_have_no_gap(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    settings: Settings,
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    arbiter()
    current = consumer()
    port = current.port
    source, model = IntentSource("t", seed=11), LiveModel()
    location = f"{settings.warehouse}/t"
    stop = threading.Event()
    errors: list[BaseException] = []
    client = CommitClient(settings=settings)

    def write() -> None:
        try:
            while not stop.is_set():
                commit_history(client, source, model, 3, location)
                time.sleep(0.05)  # a steady trickle: a few hundred versions per run
        except BaseException as exc:
            errors.append(exc)

    commit_history(client, source, model, 5, location)
    current.catalog().wait_for_version("t", model.head, timeout=30)
    subscribers = [
        Subscriber(Catalog(current.catalog_path), rewrites=True, restart_every=7, seed=1, idle=2.0),
        Subscriber(Catalog(current.catalog_path), rewrites=False, restart_every=None, seed=2, idle=2.0),
        Subscriber(Catalog(current.url), rewrites=True, restart_every=None, seed=3, idle=4.0),
    ]
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    for subscriber in subscribers:
        subscriber.start()
    rng = random.Random(5)
    try:
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.05, 0.8))
            assert current.kill() == -9
            # Every other restart is killed again before it caught up (or even opened the catalog).
            current = consumer(port=port, wait_ready=kill % 2 == 1)
        current.wait_ready(60)
    finally:
        stop.set()
        writer.join(120)
        client.close()
    assert not errors, errors
    head = model.head
    catalog = current.catalog()
    catalog.wait_for_version("t", head, timeout=60)
    for subscriber in subscribers:
        subscriber.final = head
    # the subscriber that skips compactions ends at the last logical commit (the head may be a compaction)
    subscribers[1].final = max(model.logical(0, head), default=0)
    for subscriber in subscribers:
        subscriber.join(120)
        assert not subscriber.is_alive(), "a subscriber is stuck"
        assert subscriber.error is None, subscriber.error
    assert subscribers[0].seen == list(range(head + 1)), "local subscriber: gap or duplicate"
    assert subscribers[1].seen == model.logical(0, head), "local subscriber without compactions: gap or duplicate"
    assert subscribers[2].seen == list(range(head + 1)), "HTTP (SSE) subscriber: gap or duplicate"
    # The catalog at every version equals the writer's model ...
    versions = range(head + 1) if head < 400 else random.Random(6).sample(range(head + 1), 400)
    for version in versions:
        assert {f.path: f.seq for f in catalog.snapshot("t", version).files} == model.live(version), version
    # ... and equals, row for row, a catalog rebuilt from scratch from the decisions log.
    rebuilt = consumer(http=False, catalog=tmp_path / "rebuilt.db")
    rebuilt.catalog().wait_for_version("t", head, timeout=60)
    deadline = time.monotonic() + 15
    while dump(current.catalog_path) != dump(rebuilt.catalog_path) and time.monotonic() < deadline:
        time.sleep(0.2)  # both read past the last transaction marker
    assert dump(current.catalog_path) == dump(rebuilt.catalog_path)
    figures.add("consumer_kills", KILLS)
    figures.note(
        f"consumer kill -9 x{KILLS}: {head + 1} versions, catalog == rebuilt from scratch; subscribers saw "
        f"{len(subscribers[0].seen)}/{len(subscribers[1].seen)}/{len(subscribers[2].seen)} commits with no gap or "
        f"duplicate ({subscribers[0].resumes} cursor resumes), {time.monotonic() - began:.1f} s"
    )
