"""Topic naming: ``<prefix>.<table>.intents`` and ``<prefix>.<table>.decisions``."""

from __future__ import annotations

import re

from schemas.errors import InvalidNameError

TABLE_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,127}")
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
INTENTS_SUFFIX = "intents"
DECISIONS_SUFFIX = "decisions"


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is a valid table name (``[a-z][a-z0-9_]*``, at most 128 chars)."""
    if not isinstance(name, str) or TABLE_NAME_PATTERN.fullmatch(name) is None:
        raise InvalidNameError(f"invalid table name {name!r}: must match [a-z][a-z0-9_]* (at most 128 chars)")
    return name


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid topic prefix (dot-separated words)."""
    if not isinstance(prefix, str) or PREFIX_PATTERN.fullmatch(prefix) is None:
        raise InvalidNameError(f"invalid topic prefix {prefix!r}: use letters, digits, '_', '-' and dots")
    return prefix


def intents_topic(prefix: str, table: str) -> str:
    """The intents topic of ``table``."""
    return f"{validate_prefix(prefix)}.{validate_table_name(table)}.{INTENTS_SUFFIX}"


def decisions_topic(prefix: str, table: str) -> str:
    """The decisions topic of ``table``."""
    return f"{validate_prefix(prefix)}.{validate_table_name(table)}.{DECISIONS_SUFFIX}"


def intents_pattern(prefix: str) -> str:
    """A librdkafka regex subscription matching every intents topic under ``prefix``."""
    return "^" + re.escape(validate_prefix(prefix)) + r"\.[a-z][a-z0-9_]*\." + INTENTS_SUFFIX + "$"


def decisions_pattern(prefix: str) -> str:
    """A librdkafka regex subscription matching every decisions topic under ``prefix``."""
    return "^" + re.escape(validate_prefix(prefix)) + r"\.[a-z][a-z0-9_]*\." + DECISIONS_SUFFIX + "$"


def parse_topic(prefix: str, topic: str) -> tuple[str, str] | None:
    """Split ``topic`` into ``(table, kind)`` if it is one of ours under ``prefix``, else None."""
    head = prefix + "."
    if not topic.startswith(head):
        return None
    table, _, kind = topic[len(head) :].rpartition(".")
    if kind not in (INTENTS_SUFFIX, DECISIONS_SUFFIX) or TABLE_NAME_PATTERN.fullmatch(table) is None:
        return None
    return table, kind
