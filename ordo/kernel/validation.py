"""The accepted form of the settings that are more than a number or a word, and their checks.

``kernel.settings`` reads every ``ORDO_*`` variable and types it; what a type
cannot say is checked here, once, when the settings are read (at a process's
start and by ``ordo config``), so that a bad value stops the process with an
error naming the variable instead of failing later, deep inside a client:

* plain values with a shape: a shard ``I/N``, the change topic's name template,
  bootstrap servers, a listen address, a catalog location, a Spark master;
* ``ORDO_TOPIC__<NAME>``: Apache Kafka's topic configs, by name and type
  (``TOPIC_CONFIGS``; the broker checks them again when it creates a topic);
* ``ORDO_KAFKA__<NAME>`` and ``ORDO_KAFKA_CONFIG``: librdkafka's own
  configuration check, run property by property without creating a client
  (``librdkafka_problem``). What librdkafka checks only when a client is made
  (a certificate file it cannot read, say) is reported at the start-up broker
  check, still naming the variables (``ordo.services.up.check_broker``).

Each check returns the problem as a sentence, or None.
"""

from __future__ import annotations

import re
from collections.abc import Callable

DEFAULT_CHANGES_TOPIC = "{prefix}.{table}.changes"
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
LIBRDKAFKA_DOC = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``I/N`` (0 <= I < N) into ``(I, N)``; ``ValueError`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"shard must look like I/N (e.g. 0/1), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {text!r}: need 0 <= I < N")
    return index, count


def topic_template_problem(template: str) -> str | None:
    """Why ``template`` cannot name change topics (``{prefix}`` and ``{table}`` filled in), or None."""
    try:
        name = template.format(prefix="ordo", table="t")
    except (KeyError, IndexError) as exc:
        return f"unknown placeholder {{{exc.args[0]}}}: only {{prefix}} and {{table}} are filled in"
    except ValueError as exc:
        return f"not a format string ({exc})"
    if "{table}" not in template:
        return "it must hold {table}: every table has a change topic of its own"
    if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        return f"it makes {name!r}, not a Kafka topic name: letters, digits, '.', '_', '-', at most 249"
    return None


_SERVER = re.compile(r"(?:[A-Za-z_]+://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::\d{1,5})?")


def bootstrap_problem(servers: str) -> str | None:
    """Why ``servers`` is not a ``host:port`` list, or None."""
    bad = [s for s in servers.split(",") if not _SERVER.fullmatch(s.strip())]
    return f"not host:port: {', '.join(repr(s) for s in bad)}" if bad else None


def host_problem(host: str) -> str | None:
    """Why ``host`` is not an address to listen on, or None."""
    if re.fullmatch(r"\[?[A-Za-z0-9._:-]+\]?", host):
        return None
    return "not a host name or an IP address"


CATALOG_SCHEMES = ("http", "https", "postgresql", "postgres", "sqlite")


def catalog_problem(location: str) -> str | None:
    """Why ``location`` names no catalog (a SQLite path, or a URL of a scheme ordo reads), or None."""
    scheme, sep, _rest = location.partition("://")
    if sep and scheme.lower() not in CATALOG_SCHEMES:
        return f"unknown scheme {scheme!r}"
    return None


_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s|mesos)://\S+")


def master_problem(master: str) -> str | None:
    """Why ``master`` is not a Spark master URL, or None."""
    return None if _MASTER.fullmatch(master) else "not a Spark master URL"


# --------------------------------------------------------------------------- topic configs (ORDO_TOPIC__*)


def _long(low: int | None = None, high: int | None = None) -> tuple[str, Callable[[str], bool]]:
    span = f" >= {low}" if high is None and low is not None else f" in {low}..{high}" if low is not None else ""

    def ok(text: str) -> bool:
        if not re.fullmatch(r"-?\d+", text.strip()):
            return False
        value = int(text)
        return -(2**63) <= value < 2**63 and (low is None or value >= low) and (high is None or value <= high)

    return f"an integer{span}", ok


def _one_of(*values: str, many: bool = False) -> tuple[str, Callable[[str], bool]]:
    def ok(text: str) -> bool:
        items = [t.strip() for t in text.split(",")] if many else [text.strip()]
        return all(item in values for item in items)

    return ("a comma-separated list of " if many else "one of ") + ", ".join(values), ok


def _ratio() -> tuple[str, Callable[[str], bool]]:
    def ok(text: str) -> bool:
        try:
            return 0.0 <= float(text) <= 1.0
        except ValueError:
            return False

    return "a number in 0..1", ok


_BOOL = _one_of("true", "false")
_ANY = ("any text", lambda text: True)
# Apache Kafka 4's topic-level configs (kafka-configs.sh --entity-type topics), with the form each takes.
TOPIC_CONFIGS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "cleanup.policy": _one_of("delete", "compact", many=True),
    "compression.type": _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "compression.gzip.level": _long(-1, 9),
    "compression.lz4.level": _long(1, 17),
    "compression.zstd.level": _long(-131072, 22),
    "delete.retention.ms": _long(0),
    "errors.deadletterqueue.group.enable": _BOOL,
    "file.delete.delay.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "follower.replication.throttled.replicas": _ANY,
    "index.interval.bytes": _long(0),
    "leader.replication.throttled.replicas": _ANY,
    "local.retention.bytes": _long(-2),
    "local.retention.ms": _long(-2),
    "max.compaction.lag.ms": _long(1),
    "max.decompressed.message.bytes": _long(0),
    "max.message.bytes": _long(0),
    "message.timestamp.after.max.ms": _long(0),
    "message.timestamp.before.max.ms": _long(0),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _ratio(),
    "min.compaction.lag.ms": _long(0),
    "min.insync.replicas": _long(1),
    "preallocate": _BOOL,
    "remote.copy.lag.bytes": _long(-1),
    "remote.copy.lag.ms": _long(0),
    "remote.log.copy.disable": _BOOL,
    "remote.log.delete.on.disable": _BOOL,
    "remote.storage.enable": _BOOL,
    "retention.bytes": _long(-1),
    "retention.ms": _long(-1),
    "segment.bytes": _long(1048576),
    "segment.index.bytes": _long(4),
    "segment.jitter.ms": _long(0),
    "segment.ms": _long(1),
    "unclean.leader.election.enable": _BOOL,
}


def topic_config_problem(name: str, value: str) -> tuple[str, str] | None:
    """``(problem, accepted form)`` when ``name=value`` is not a Kafka topic config, else None."""
    known = TOPIC_CONFIGS.get(name)
    if known is None:
        return (
            f"{name!r} is not a topic config of Apache Kafka",
            "ORDO_TOPIC__ + a topic config of Apache Kafka in upper case with _ for ., e.g. ORDO_TOPIC__RETENTION_MS",
        )
    form, ok = known
    return None if ok(value) else (f"not a value of {name}", form)


# --------------------------------------------------------------------------- librdkafka (ORDO_KAFKA__*)

# A property librdkafka does not know: set after the one being checked, it stops the client's creation
# at the configuration step, so checking a property costs no client (no threads, no files, no network).
_SENTINEL = "ordo.validation.sentinel"


def librdkafka_problem(name: str, value: str) -> tuple[str, str] | None:
    """``(librdkafka's refusal, accepted form)`` when it refuses ``name=value``, else None."""
    message = _refusal(name, value)
    return None if message is None else (message, _librdkafka_form(name, message))


def _librdkafka_form(name: str, message: str) -> str:
    """What librdkafka accepts for ``name``: its range for a number (asked of librdkafka), else its documentation."""
    if message.startswith("No such configuration property"):
        return (
            "ORDO_KAFKA__ + a librdkafka property in upper case with _ for .; a property whose name holds _ "
            f"goes in the ORDO_KAFKA_CONFIG file; the properties: {LIBRDKAFKA_DOC}"
        )
    if message.startswith("Expected bool"):
        return "true or false"
    probe = _refusal(name, str(-(2**31)))
    span = re.search(r"allowed range (-?\d+)\.\.(-?\d+)", probe or "")
    if span:
        return f"an integer in {span.group(1)}..{span.group(2)}"
    return f"a value librdkafka documents for {name}: {LIBRDKAFKA_DOC}"


def _refusal(name: str, value: str) -> str | None:
    """librdkafka's refusal of ``name=value`` as it words it, or None."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({name: value, _SENTINEL: "1"})
    except KafkaException as exc:
        message = " ".join(str(exc.args[0].str()).split())
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks of the properties it handles
        message = str(exc)
    else:  # pragma: no cover - the sentinel always stops it
        return None
    return None if _SENTINEL in message else message


__all__ = [
    "CATALOG_SCHEMES",
    "DEFAULT_CHANGES_TOPIC",
    "TOPIC_CONFIGS",
    "bootstrap_problem",
    "catalog_problem",
    "host_problem",
    "librdkafka_problem",
    "master_problem",
    "parse_shard",
    "topic_config_problem",
    "topic_template_problem",
]
