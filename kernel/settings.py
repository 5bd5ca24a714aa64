"""Settings: defaults < environment (``ORDO_*``) < explicit arguments.

Read once at the process edge and passed down as a frozen object. Kafka client
settings pass through: ``ORDO_KAFKA__SASL_MECHANISM=PLAIN`` becomes
``sasl.mechanism=PLAIN`` (double underscore after ``KAFKA``, then ``_`` -> ``.``),
and ``ORDO_KAFKA_CONFIG`` may name a properties file (``key=value`` lines) read first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from schemas.topics import validate_prefix

DEFAULT_PREFIX = "ordo"
DEFAULT_CATALOG = "ordo-catalog.db"
DEFAULT_WAREHOUSE = "warehouse"
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8765
DEFAULT_RESUBMIT_AFTER = 5.0
DEFAULT_FETCH_WAIT_BUSY_MS = 20
DEFAULT_FETCH_WAIT_IDLE_MS = 100
DEFAULT_CLIENT_FETCH_WAIT_MS = 20
DEFAULT_CONSUMER_FETCH_WAIT_MS = 50
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_COMPACTOR_MASTER = "local[2]"
DEFAULT_COMPACTOR_INTERVAL = 5.0


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
    http_port: int = DEFAULT_HTTP_PORT
    state_dir: str = field(default_factory=default_state_dir)  # arbiter checkpoints (a cache of the decisions log)
    kafka: Mapping[str, str] = field(default_factory=dict)
    # Signed decisions (docs/operations.md "Keys"): the arbiter's private key file, the public key
    # files or directories readers trust (comma-separated), and whether unsigned decisions are refused.
    arbiter_key: str = ""
    trusted_keys: str = ""
    require_signatures: bool = True
    resubmit_after: float = DEFAULT_RESUBMIT_AFTER  # commit client: publish an intent again when undecided this long
    # Adaptive fetch waits (docs/operations.md "Latency and idle cost"): readers fetch with the short
    # wait while work is in flight and fall back to the long one (or pause) when idle.
    fetch_wait_busy_ms: int = DEFAULT_FETCH_WAIT_BUSY_MS
    fetch_wait_idle_ms: int = DEFAULT_FETCH_WAIT_IDLE_MS
    client_fetch_wait_ms: int = DEFAULT_CLIENT_FETCH_WAIT_MS  # commit client decision readers while in flight
    consumer_fetch_wait_ms: int = DEFAULT_CONSUMER_FETCH_WAIT_MS  # the consumer's decisions reader
    arbiter_metrics_port: int = 0  # Prometheus /metrics of the arbiter; 0 = off
    arbiter_metrics_host: str = DEFAULT_METRICS_HOST
    # `ordo compactor`: its Spark master, seconds between rounds, Prometheus port (None: no metrics server)
    compactor_master: str = DEFAULT_COMPACTOR_MASTER
    compactor_interval: float = DEFAULT_COMPACTOR_INTERVAL
    compactor_metrics_port: int | None = None
    # Consumer scale-out: I/N, follow only the tables with crc32(name) % N == I (one catalog, N consumers).
    consumer_shard: str = "0/1"
    # Arbiter fleet: the Kafka consumer group the arbiters share tables through ("" = <prefix>.arbiters).
    arbiter_group: str = ""
    # Consumer group: consumers share tables through it, one PostgreSQL catalog ("" = no group; see --group).
    consumer_group: str = ""
    # Durable logs (docs/operations.md "What ordo needs from the cluster"): the replication factor and
    # min.insync.replicas of the topics ordo creates (0 = min(3, brokers) and max(1, RF - 1)), topic configs
    # that override ordo's (ORDO_TOPIC__RETENTION_MS=... -> retention.ms), and whether existing logs that
    # can lose history (finite retention, compaction, too few replicas) are accepted (development only).
    topic_replication_factor: int = 0
    topic_min_insync_replicas: int = 0
    topic_config: Mapping[str, str] = field(default_factory=dict)
    allow_lossy_logs: bool = False

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration: bootstrap servers, pass-through settings, then ``overrides``."""
        if not self.bootstrap_servers:
            raise ValueError("no Kafka bootstrap servers: set ORDO_BOOTSTRAP_SERVERS or pass bootstrap_servers=")
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        config.update(self.kafka)
        config.update(overrides)
        return config

    def with_overrides(self, **values: Any) -> Settings:
        """A copy with every non-None keyword applied."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def _read_properties(path: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: expected key=value, got {line!r}")
        result[key.strip()] = value.strip()
    return result


def kafka_passthrough(environ: Mapping[str, str]) -> dict[str, str]:
    """Kafka client settings from ``ORDO_KAFKA_CONFIG`` (a file) and ``ORDO_KAFKA__*`` variables."""
    result: dict[str, str] = {}
    if environ.get("ORDO_KAFKA_CONFIG"):
        result.update(_read_properties(environ["ORDO_KAFKA_CONFIG"]))
    for key, value in environ.items():
        if key.startswith("ORDO_KAFKA__"):
            result[key[len("ORDO_KAFKA__") :].lower().replace("_", ".")] = value
    return result


def parse_bool(text: str) -> bool:
    """``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case)."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, then ``environ`` (default ``os.environ``), then ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, key, cast in (
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
        ("resubmit_after", "ORDO_RESUBMIT_AFTER", float),
        ("fetch_wait_busy_ms", "ORDO_FETCH_WAIT_BUSY_MS", int),
        ("fetch_wait_idle_ms", "ORDO_FETCH_WAIT_IDLE_MS", int),
        ("client_fetch_wait_ms", "ORDO_CLIENT_FETCH_WAIT_MS", int),
        ("consumer_fetch_wait_ms", "ORDO_CONSUMER_FETCH_WAIT_MS", int),
        ("arbiter_metrics_port", "ORDO_ARBITER_METRICS_PORT", int),
        ("arbiter_metrics_host", "ORDO_ARBITER_METRICS_HOST", str),
        ("compactor_master", "ORDO_COMPACTOR_MASTER", str),
        ("compactor_interval", "ORDO_COMPACTOR_INTERVAL", float),
        ("compactor_metrics_port", "ORDO_COMPACTOR_METRICS_PORT", int),
        ("consumer_shard", "ORDO_CONSUMER_SHARD", str),
        ("arbiter_group", "ORDO_ARBITER_GROUP", str),
        ("consumer_group", "ORDO_CONSUMER_GROUP", str),
        ("topic_replication_factor", "ORDO_TOPIC_REPLICATION_FACTOR", int),
        ("topic_min_insync_replicas", "ORDO_TOPIC_MIN_INSYNC_REPLICAS", int),
        ("allow_lossy_logs", "ORDO_ALLOW_LOSSY_LOGS", parse_bool),
    ):
        if env.get(key):
            values[name] = cast(env[key])
    values["kafka"] = kafka_passthrough(env)
    values["topic_config"] = {
        key[len("ORDO_TOPIC__") :].lower().replace("_", "."): value
        for key, value in env.items()
        if key.startswith("ORDO_TOPIC__") and value
    }
    settings = Settings(**values).with_overrides(**overrides)
    validate_prefix(settings.topic_prefix)
    if settings.topic_replication_factor < 0 or settings.topic_min_insync_replicas < 0:
        raise ValueError(
            "ORDO_TOPIC_REPLICATION_FACTOR and ORDO_TOPIC_MIN_INSYNC_REPLICAS must be >= 0 (0: ordo's default), got "
            f"{settings.topic_replication_factor} and {settings.topic_min_insync_replicas}"
        )
    if (
        min(settings.fetch_wait_busy_ms, settings.client_fetch_wait_ms, settings.consumer_fetch_wait_ms) < 1
        or settings.fetch_wait_idle_ms < settings.fetch_wait_busy_ms
    ):
        raise ValueError(
            "fetch waits must satisfy 1 <= ORDO_FETCH_WAIT_BUSY_MS <= ORDO_FETCH_WAIT_IDLE_MS, "
            "ORDO_CLIENT_FETCH_WAIT_MS >= 1 and ORDO_CONSUMER_FETCH_WAIT_MS >= 1, got "
            f"{settings.fetch_wait_busy_ms}, {settings.fetch_wait_idle_ms}, {settings.client_fetch_wait_ms} "
            f"and {settings.consumer_fetch_wait_ms}"
        )
    return settings
