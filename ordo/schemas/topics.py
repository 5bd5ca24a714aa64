"""Topic naming: ``<prefix>.<table>.intents`` and ``<prefix>.<table>.decisions``."""

from __future__ import annotations

import re

from ordo.schemas.errors import InvalidNameError

TABLE_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,127}")
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
INTENTS_SUFFIX = "intents"
DECISIONS_SUFFIX = "decisions"


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is a valid table name (``[a-z][a-z0-9_]*``, at most 128 chars)."""
    if not isinstance(name, str) or TABLE_NAME_PATTERN.fullmatch(name) is None:
        raise InvalidNameError(f"invalid table name {name!r}: must match [a-z][a-z0-9_]* (at most 128 chars)")
    return name


IDENTIFIER_RULE = (
    "a table is named by one Spark identifier, case-insensitive as in Spark's catalog "
    "('Events' and `EVENTS` are table events; backticks quote), then [a-z][a-z0-9_]* "
    "(at most 128 chars); no database part: ordo has no databases (db.table is refused), "
    "its topic prefix is the only namespace"
)
_IDENTIFIER_PART = re.compile(r"`((?:[^`]|``)*)`|([^.`]+)")


def table_identifier(name: str) -> str:
    """The table a Spark table identifier names (``DeltaTable.forName``, ``format("ordo").load(name)``).

    Spark's rules: an identifier is case-insensitive (its catalog keeps names
    lower-case, so ``Events`` is table ``events``; backticks quote a part, a
    doubled backtick is one, and a quoted part is case-insensitive too, as
    with Spark's default ``spark.sql.caseSensitive=false``), and dots separate
    the parts of a qualified name. ordo has no databases (a topic prefix is
    its namespace): ``db.table`` is refused. ``InvalidNameError`` names the rule.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"invalid table name {name!r}: {IDENTIFIER_RULE}")
    parts: list[str] = []
    pos = 0
    while True:
        match = _IDENTIFIER_PART.match(name, pos)
        if match is None:
            raise InvalidNameError(f"invalid table name {name!r}: {IDENTIFIER_RULE}")
        quoted, plain = match.groups()
        parts.append(plain if quoted is None else quoted.replace("``", "`"))
        pos = match.end()
        if pos == len(name):
            break
        if name[pos] != ".":
            raise InvalidNameError(f"invalid table name {name!r}: {IDENTIFIER_RULE}")
        pos += 1
    if len(parts) > 1:
        raise InvalidNameError(
            f"invalid table name {name!r}: {IDENTIFIER_RULE}; name the table alone ({parts[-1].lower()!r})"
        )
    table = parts[0].lower()
    if TABLE_NAME_PATTERN.fullmatch(table) is None:
        raise InvalidNameError(f"invalid table name {name!r}: {IDENTIFIER_RULE}")
    return table


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
