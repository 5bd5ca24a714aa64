"""Settings: defaults < environment (``ORDO_*``) < explicit arguments.

Read once at the process edge and passed down as a frozen object. Kafka client
settings pass through: ``ORDO_KAFKA__SASL_MECHANISM=PLAIN`` becomes
``sasl.mechanism=PLAIN`` (double underscore after ``KAFKA``, then ``_`` -> ``.``),
and ``ORDO_KAFKA_CONFIG`` may name a properties file (``key=value`` lines) read first.

``Settings`` is one typed model (a frozen pydantic dataclass): every value is
validated on construction, from the environment or from arguments, and a bad
one raises ``SettingsError`` naming the variable (or argument), the value and
the form it accepts (``FORMS``). The pass-through settings are checked when
they are read too: ``ORDO_KAFKA__*`` by librdkafka's own configuration check,
``ORDO_TOPIC__*`` against Apache Kafka's topic configs (``kernel.validation``).
``ENV_VARS`` maps each field to its variable; ``effective_settings`` is what
``ordo config`` prints, secrets hidden.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from ordo.kernel.validation import (
    DEFAULT_CHANGES_TOPIC,
    bootstrap_problem,
    catalog_problem,
    host_problem,
    librdkafka_problem,
    master_problem,
    parse_shard,
    topic_config_problem,
    topic_template_problem,
)
from ordo.schemas.errors import OrdoError
from ordo.schemas.topics import validate_prefix

DEFAULT_PREFIX = "ordo"
DEFAULT_CATALOG = "ordo-catalog.db"
DEFAULT_WAREHOUSE = "warehouse"
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8765
DEFAULT_RESUBMIT_AFTER = 5.0
# Fetch waits (ms) per broker kind, where a setting is left unset (docs/operations.md "Latency and idle cost"):
# Apache Kafka answers a long poll as soon as a record arrives, so long waits cost no latency and save
# empty fetches; Tansu answers an empty fetch only after the full wait, so the wait bounds each hop of a
# commit and the short waits are only used while work is in flight.
BrokerKind = Literal["auto", "kafka", "tansu"]


@dataclass(frozen=True)
class FetchWaits:
    """``fetch.wait.max.ms`` of ordo's readers: arbiter busy and idle (doorbell), commit client, consumer."""

    busy: int
    idle: int
    client: int
    consumer: int


BROKER_FETCH_WAITS = {
    "kafka": FetchWaits(busy=100, idle=500, client=100, consumer=100),
    "tansu": FetchWaits(busy=2, idle=100, client=5, consumer=50),
}
DEFAULT_FETCH_WAIT_BUSY_MS = None  # None: the broker's default (BROKER_FETCH_WAITS)
DEFAULT_FETCH_WAIT_IDLE_MS = None
DEFAULT_CLIENT_FETCH_WAIT_MS = None
DEFAULT_CONSUMER_FETCH_WAIT_MS = None
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_COMPACTOR_MASTER = "local[2]"
DEFAULT_COMPACTOR_INTERVAL = 5.0
DEFAULT_COMPACTOR_PARALLEL_TABLES = 2
# Every long-running process serves /metrics, /healthz and /readyz, each on its own default port.
DEFAULT_ARBITER_METRICS_PORT = 8767
DEFAULT_COMPACTOR_METRICS_PORT = 8766

Port = Annotated[int, Field(ge=0, le=65535)]
WaitMs = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0)]


class SettingsError(OrdoError, ValueError):
    """Raised when a setting has a value it cannot take; the message names the variable (or argument) and value."""


def resolve_waits(settings: Settings, kind: str) -> FetchWaits:
    """The fetch waits of ``settings`` on a broker of ``kind`` (``kafka`` or ``tansu``): each set one, else the
    broker's default; the idle wait never below the busy one."""
    default = BROKER_FETCH_WAITS["tansu" if kind == "tansu" else "kafka"]
    busy = settings.fetch_wait_busy_ms or default.busy
    return FetchWaits(
        busy=busy,
        idle=max(busy, settings.fetch_wait_idle_ms or default.idle),
        client=settings.client_fetch_wait_ms or default.client,
        consumer=settings.consumer_fetch_wait_ms or default.consumer,
    )


def default_state_dir() -> str:
    """Where an arbiter keeps its checkpoints unless ``ORDO_STATE_DIR`` says otherwise: ``$XDG_STATE_HOME/ordo``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "ordo")


@dataclass(frozen=True)
class Settings:
    """Everything a process needs to reach the stack."""

    bootstrap_servers: str | None = None
    topic_prefix: str = DEFAULT_PREFIX
    warehouse: str = DEFAULT_WAREHOUSE
    catalog: str = DEFAULT_CATALOG
    http_host: str = DEFAULT_HTTP_HOST
    http_port: Port = DEFAULT_HTTP_PORT
    state_dir: str = field(default_factory=default_state_dir)  # arbiter checkpoints (a cache of the decisions log)
    kafka: Mapping[str, str] = field(default_factory=dict)
    # Signed decisions (docs/operations.md "Keys"): the arbiter's private key file, the public key
    # files or directories readers trust (comma-separated), and whether unsigned decisions are refused.
    arbiter_key: str = ""
    trusted_keys: str = ""
    require_signatures: bool = True
    # The arbiter writes decisions inside one Kafka transaction per table and batch (True), or with an
    # idempotent producer and the twin fence of docs/architecture.md (False: a prototype, issue 29).
    decisions_transactions: bool = True
    resubmit_after: Seconds = DEFAULT_RESUBMIT_AFTER  # commit client: publish an intent again when undecided this long
    # Adaptive fetch waits (docs/operations.md "Latency and idle cost"): readers fetch with the short
    # wait while work is in flight and fall back to the long one (or pause) when idle. None: the default
    # of the broker (BROKER_FETCH_WAITS; kernel.admin.fetch_waits resolves it), ``broker_kind`` or detected.
    broker_kind: BrokerKind = "auto"
    fetch_wait_busy_ms: WaitMs | None = DEFAULT_FETCH_WAIT_BUSY_MS
    fetch_wait_idle_ms: WaitMs | None = DEFAULT_FETCH_WAIT_IDLE_MS
    client_fetch_wait_ms: WaitMs | None = DEFAULT_CLIENT_FETCH_WAIT_MS  # commit client decision readers in flight
    consumer_fetch_wait_ms: WaitMs | None = DEFAULT_CONSUMER_FETCH_WAIT_MS  # the consumer's decisions reader
    # `ordo arbiter`'s /metrics, /healthz, /readyz (0: any free port; None, `--no-metrics`: off)
    arbiter_metrics_port: Port | None = DEFAULT_ARBITER_METRICS_PORT
    arbiter_metrics_host: str = DEFAULT_METRICS_HOST
    # `ordo compactor`: its Spark master, seconds between rounds, /metrics /healthz /readyz port (None: off)
    compactor_master: str = DEFAULT_COMPACTOR_MASTER
    compactor_interval: Annotated[float, Field(ge=0.1)] = DEFAULT_COMPACTOR_INTERVAL
    compactor_metrics_port: Port | None = DEFAULT_COMPACTOR_METRICS_PORT
    # ... how many tables it rewrites at once, and the Kafka consumer group a compactor fleet shares tables
    # through ("" = no fleet unless --fleet, which uses <prefix>.compactors)
    compactor_parallel_tables: Annotated[int, Field(ge=1)] = DEFAULT_COMPACTOR_PARALLEL_TABLES
    compactor_group: str = ""
    # Consumer scale-out: I/N, follow only the tables with crc32(name) % N == I (one catalog, N consumers).
    consumer_shard: str = "0/1"
    # Arbiter fleet: the Kafka consumer group the arbiters share tables through ("" = <prefix>.arbiters).
    arbiter_group: str = ""
    # Consumer group: consumers share tables through it, one PostgreSQL catalog ("" = no group; see --group).
    consumer_group: str = ""
    # Logging of every command (`--log-level`, `--log-format`; ordo.cli.logs).
    # log_level None: the command's own default (info for the long-running ones, warning for the others)
    log_level: Literal["debug", "info", "warning", "error", "critical"] | None = None
    log_format: Literal["text", "json"] = "text"
    # A writer's (a Spark job's) Kafka client.id stem: its clients are <client_id>.producer, .decisions, ...
    # ("" = <prefix>.commit-client), so broker logs and quotas tell the jobs apart.
    client_id: str = ""
    # Durable logs (docs/operations.md "What ordo needs from the cluster"): the replication factor and
    # min.insync.replicas of the topics ordo creates (0 = min(3, brokers) and max(1, RF - 1)), topic configs
    # that override ordo's (ORDO_TOPIC__RETENTION_MS=... -> retention.ms), and whether existing logs that
    # can lose history (finite retention, compaction, too few replicas) are accepted (development only).
    topic_replication_factor: Annotated[int, Field(ge=0)] = 0
    topic_min_insync_replicas: Annotated[int, Field(ge=0)] = 0
    topic_config: Mapping[str, str] = field(default_factory=dict)
    allow_lossy_logs: bool = False
    # `ordo cdc`: each table's change topic, named from {prefix} and {table} (docs/change-topic.md).
    changes_topic: str = DEFAULT_CHANGES_TOPIC
    # `ordo cdc` (docs/change-topic.md): the change records' format ("json": Debezium's envelope alone;
    # "connect-json": Kafka Connect's schema/payload wrapper, for JsonConverter with schemas.enable=true), and
    # whether a tombstone (a null value under the row's key) follows each delete, as Debezium's tombstones.on.delete
    changes_format: Literal["json", "connect-json"] = "json"
    changes_tombstones: bool = True

    @field_validator("consumer_shard")
    @classmethod
    def _shard(cls, value: str) -> str:
        parse_shard(value)
        return value

    @field_validator("changes_topic")
    @classmethod
    def _changes_topic(cls, value: str) -> str:
        return _checked(value, topic_template_problem)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str | None) -> str | None:
        return value if value is None else _checked(value, bootstrap_problem)

    @field_validator("catalog")
    @classmethod
    def _catalog(cls, value: str) -> str:
        return _checked(value, catalog_problem)

    @field_validator("http_host", "arbiter_metrics_host")
    @classmethod
    def _host(cls, value: str) -> str:
        return _checked(value, host_problem)

    @field_validator("compactor_master")
    @classmethod
    def _master(cls, value: str) -> str:
        return _checked(value, master_problem)

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration: bootstrap servers, pass-through settings, then ``overrides``."""
        if not self.bootstrap_servers:
            raise ValueError("no Kafka bootstrap servers: set ORDO_BOOTSTRAP_SERVERS or pass bootstrap_servers=")
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        config.update(self.kafka)
        config.update(overrides)
        return config

    def client_name(self, role: str) -> str:
        """The ``client.id`` of a writer's Kafka client in ``role`` (``producer``, ``decisions``, ...)."""
        return f"{self.client_id or self.topic_prefix + '.commit-client'}.{role}"

    def with_overrides(self, **values: Any) -> Settings:
        """A copy with every non-None keyword applied (validated: ``SettingsError`` names the argument)."""
        given = {k: v for k, v in values.items() if v is not None}
        try:
            return replace(self, **given)
        except ValidationError as exc:
            raise settings_error(exc, {k: (k, v) for k, v in given.items()}) from None


def _checked(value: str, problem_of: Callable[[str], str | None]) -> str:
    problem = problem_of(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def settings_error(exc: ValidationError, sources: Mapping[str, tuple[str, Any]]) -> SettingsError:
    """A ``SettingsError`` naming, for each invalid field, where its value came from (variable or argument), the
    problem and the form the setting accepts."""
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        where, value = sources.get(name, (name, error.get("input")))
        problems.append(problem_text(where, value, str(error["msg"]).removeprefix("Value error, "), FORMS.get(name)))
    return SettingsError("invalid setting " + "; ".join(problems))


def problem_text(where: str, value: Any, problem: str, form: str | None) -> str:
    """``ORDO_X='value': problem (accepted: form)``: one bad setting, as every settings error words it."""
    return f"{where}={value!r}: {problem}" + (f" (accepted: {form})" if form else "")


def _read_properties(path: str) -> dict[str, str]:
    form = "a file of key=value lines (# or ! starts a comment)"
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError("invalid setting " + problem_text("ORDO_KAFKA_CONFIG", path, str(exc), form)) from None
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            problem = f"line {number} is {line!r}, not key=value"
            raise SettingsError("invalid setting " + problem_text("ORDO_KAFKA_CONFIG", path, problem, form))
        result[key.strip()] = value.strip()
    return result


def kafka_sources(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Each Kafka client setting as ``{property: (where it was set, value)}``: ``ORDO_KAFKA_CONFIG`` (a file), read
    first, then the ``ORDO_KAFKA__*`` variables."""
    result: dict[str, tuple[str, str]] = {}
    path = environ.get("ORDO_KAFKA_CONFIG")
    if path:
        for key, value in _read_properties(path).items():
            result[key] = (f"{key} in ORDO_KAFKA_CONFIG ({path})", value)
    for key, value in environ.items():
        if key.startswith("ORDO_KAFKA__"):
            result[key[len("ORDO_KAFKA__") :].lower().replace("_", ".")] = (key, value)
    return result


def kafka_passthrough(environ: Mapping[str, str]) -> dict[str, str]:
    """Kafka client settings from ``ORDO_KAFKA_CONFIG`` (a file) and ``ORDO_KAFKA__*`` variables."""
    return {key: value for key, (_where, value) in kafka_sources(environ).items()}


def topic_sources(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Each topic config override as ``{config: (variable, value)}``: ``ORDO_TOPIC__RETENTION_MS`` is ``retention.ms``
    (an empty variable sets nothing)."""
    return {
        key[len("ORDO_TOPIC__") :].lower().replace("_", "."): (key, value)
        for key, value in environ.items()
        if key.startswith("ORDO_TOPIC__") and value
    }


def check_passthrough(kafka: Mapping[str, tuple[str, str]], topics: Mapping[str, tuple[str, str]]) -> None:
    """``SettingsError`` naming every pass-through setting librdkafka (``kafka``) or Apache Kafka's topic configs
    (``topics``) refuse, each with its variable and the form it accepts."""
    problems = []
    for name, (where, value) in kafka.items():
        refused = librdkafka_problem(name, value)
        if refused is not None:
            problems.append(problem_text(where, value, *refused))
    for name, (where, value) in topics.items():
        refused = topic_config_problem(name, value)
        if refused is not None:
            problems.append(problem_text(where, value, *refused))
    if problems:
        raise SettingsError("invalid setting " + "; ".join(problems))


def parse_bool(text: str) -> bool:
    """``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case)."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_port(text: str) -> int | None:
    """A port number, or ``off`` (no server)."""
    if text.strip().lower() in ("off", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected a port number (0: any free port) or off") from None


# Each field read from the environment: field name, variable, how its text is parsed (then the model
# validates the value). ORDO_KAFKA__* and ORDO_KAFKA_CONFIG are read by ``kafka_passthrough``.
ENV_VARS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("bootstrap_servers", "ORDO_BOOTSTRAP_SERVERS", str),
    ("topic_prefix", "ORDO_TOPIC_PREFIX", str),
    ("warehouse", "ORDO_WAREHOUSE", str),
    ("catalog", "ORDO_CATALOG", str),
    ("http_host", "ORDO_HTTP_HOST", str),
    ("http_port", "ORDO_HTTP_PORT", int),
    ("state_dir", "ORDO_STATE_DIR", str),
    ("arbiter_key", "ORDO_ARBITER_KEY", str),
    ("trusted_keys", "ORDO_TRUSTED_KEYS", str),
    ("require_signatures", "ORDO_REQUIRE_SIGNATURES", parse_bool),
    ("decisions_transactions", "ORDO_DECISIONS_TRANSACTIONS", parse_bool),
    ("resubmit_after", "ORDO_RESUBMIT_AFTER", float),
    ("broker_kind", "ORDO_BROKER_KIND", str.lower),
    ("fetch_wait_busy_ms", "ORDO_FETCH_WAIT_BUSY_MS", int),
    ("fetch_wait_idle_ms", "ORDO_FETCH_WAIT_IDLE_MS", int),
    ("client_fetch_wait_ms", "ORDO_CLIENT_FETCH_WAIT_MS", int),
    ("consumer_fetch_wait_ms", "ORDO_CONSUMER_FETCH_WAIT_MS", int),
    ("arbiter_metrics_port", "ORDO_ARBITER_METRICS_PORT", lambda text: parse_port(text)),
    ("arbiter_metrics_host", "ORDO_ARBITER_METRICS_HOST", str),
    ("compactor_master", "ORDO_COMPACTOR_MASTER", str),
    ("compactor_interval", "ORDO_COMPACTOR_INTERVAL", float),
    ("compactor_metrics_port", "ORDO_COMPACTOR_METRICS_PORT", lambda text: parse_port(text)),
    ("compactor_parallel_tables", "ORDO_COMPACTOR_PARALLEL_TABLES", int),
    ("compactor_group", "ORDO_COMPACTOR_GROUP", str),
    ("consumer_shard", "ORDO_CONSUMER_SHARD", str),
    ("arbiter_group", "ORDO_ARBITER_GROUP", str),
    ("consumer_group", "ORDO_CONSUMER_GROUP", str),
    ("log_level", "ORDO_LOG_LEVEL", str.lower),
    ("log_format", "ORDO_LOG_FORMAT", str.lower),
    ("client_id", "ORDO_CLIENT_ID", str),
    ("topic_replication_factor", "ORDO_TOPIC_REPLICATION_FACTOR", int),
    ("topic_min_insync_replicas", "ORDO_TOPIC_MIN_INSYNC_REPLICAS", int),
    ("allow_lossy_logs", "ORDO_ALLOW_LOSSY_LOGS", parse_bool),
    ("changes_topic", "ORDO_CHANGES_TOPIC", str),
    ("changes_format", "ORDO_CHANGES_FORMAT", str.lower),
    ("changes_tombstones", "ORDO_CHANGES_TOMBSTONES", parse_bool),
)
# The form each checked setting accepts, named in its error (a field left out takes any text: a path, a name).
_PORT = "a port number 0-65535, 0 for any free port"
_WAIT = "a whole number of milliseconds, at least 1"
_HOST = "a host name or an IP address, e.g. 127.0.0.1 or 0.0.0.0"
_BOOL = "true or false; also 1/0, yes/no, on/off"
FORMS: dict[str, str] = {
    "bootstrap_servers": "host:port, comma-separated, e.g. kafka-1:9092,kafka-2:9092",
    "topic_prefix": "letters, digits, '_', '-' and dots, e.g. ordo or team.ordo",
    "catalog": "a SQLite file path, or a postgresql://, http:// or https:// URL",
    "http_host": _HOST,
    "http_port": _PORT,
    "require_signatures": _BOOL,
    "decisions_transactions": _BOOL,
    "resubmit_after": "a number of seconds above 0",
    "broker_kind": "auto, kafka or tansu",
    "fetch_wait_busy_ms": _WAIT,
    "fetch_wait_idle_ms": _WAIT + ", not below ORDO_FETCH_WAIT_BUSY_MS",
    "client_fetch_wait_ms": _WAIT,
    "consumer_fetch_wait_ms": _WAIT,
    "arbiter_metrics_port": _PORT + ", or off",
    "arbiter_metrics_host": _HOST,
    "compactor_master": "a Spark master: local, local[N], local[*], spark://..., yarn or k8s://...",
    "compactor_interval": "a number of seconds, at least 0.1",
    "compactor_parallel_tables": "a whole number of tables, at least 1",
    "compactor_metrics_port": _PORT + ", or off",
    "consumer_shard": "I/N with 0 <= I < N, e.g. 0/1, or 1/4 for the second of four",
    "log_level": "debug, info, warning, error or critical",
    "log_format": "text or json",
    "topic_replication_factor": "a whole number, 0 or more; 0: min(3, brokers)",
    "topic_min_insync_replicas": "a whole number, 0 or more; 0: the replication factor - 1, at least 1",
    "allow_lossy_logs": _BOOL,
    "changes_topic": "a topic name made from {prefix} and {table}, e.g. {prefix}.{table}.changes",
    "changes_format": "json or connect-json",
    "changes_tombstones": _BOOL,
}


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, then ``environ`` (default ``os.environ``), then ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, tuple[str, Any]] = {}
    for name, key, cast in ENV_VARS:
        if env.get(key):
            sources[name] = (key, env[key])
            try:
                values[name] = cast(env[key])
            except ValueError as exc:
                why = {int: "expected an integer", float: "expected a number"}.get(cast, str(exc))  # type: ignore[call-overload]
                raise SettingsError("invalid setting " + problem_text(key, env[key], why, FORMS.get(name))) from None
    kafka, topics = kafka_sources(env), topic_sources(env)
    check_passthrough(kafka, topics)
    values["kafka"] = {name: value for name, (_where, value) in kafka.items()}
    values["topic_config"] = {name: value for name, (_where, value) in topics.items()}
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        raise settings_error(exc, sources) from None
    settings = settings.with_overrides(**overrides)
    try:
        validate_prefix(settings.topic_prefix)
    except ValueError as exc:
        where = "ORDO_TOPIC_PREFIX" if "topic_prefix" not in overrides and "topic_prefix" in sources else "topic_prefix"
        raise SettingsError(
            "invalid setting " + problem_text(where, settings.topic_prefix, str(exc), FORMS["topic_prefix"])
        ) from None
    busy, idle = settings.fetch_wait_busy_ms, settings.fetch_wait_idle_ms
    given = [w for w in (busy, settings.client_fetch_wait_ms, settings.consumer_fetch_wait_ms) if w is not None]
    if (given and min(given) < 1) or (busy is not None and idle is not None and idle < busy):
        raise SettingsError(
            "fetch waits must satisfy 1 <= ORDO_FETCH_WAIT_BUSY_MS <= ORDO_FETCH_WAIT_IDLE_MS, "
            "ORDO_CLIENT_FETCH_WAIT_MS >= 1 and ORDO_CONSUMER_FETCH_WAIT_MS >= 1, got "
            f"{settings.fetch_wait_busy_ms}, {settings.fetch_wait_idle_ms}, {settings.client_fetch_wait_ms} "
            f"and {settings.consumer_fetch_wait_ms}"
        )
    return settings


SECRET_WORDS = ("password", "secret", "jaas", "token", "credentials")
HIDDEN = "***"


def hide_url_password(url: str) -> str:
    """``scheme://user:password@host/...`` with the password replaced by ``***`` (anything else unchanged)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.password:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{HIDDEN}@{netloc}"))


def effective_settings(settings: Settings) -> dict[str, str]:
    """Every setting as ``{variable: value}`` (``ordo config``), secrets hidden.

    Hidden: Kafka client settings whose name holds a secret word (``sasl.password``,
    ``ssl.key.password``, ``sasl.oauthbearer.client.secret``, ``sasl.jaas.config``, ...) and the
    password of a catalog URL (``postgresql://user:***@host/db``).
    """
    names = {f.name for f in fields(Settings)}
    out: dict[str, str] = {}
    for name, key, _cast in ENV_VARS:
        if name not in names:
            continue
        value = getattr(settings, name)
        if name == "catalog":
            value = hide_url_password(str(value))
        out[key] = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    for key, value in sorted(settings.kafka.items()):
        secret = any(word in key.lower() for word in SECRET_WORDS)
        out["ORDO_KAFKA__" + key.replace(".", "_").upper()] = HIDDEN if secret else str(value)
    for key, value in sorted(settings.topic_config.items()):
        out["ORDO_TOPIC__" + key.replace(".", "_").upper()] = str(value)
    return out
