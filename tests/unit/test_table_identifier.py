"""Table names by Spark's rules (``schemas.topics.table_identifier``): what ``DeltaTable.forName`` and
``format("ordo").load(name)`` take. Identifiers are case-insensitive (Spark's catalog keeps them lower-case),
backticks quote, and a qualified name (``db.table``) is refused with the rule in the message: ordo has no
databases."""

from __future__ import annotations

import pytest

from ordo.schemas.errors import InvalidNameError
from ordo.schemas.topics import IDENTIFIER_RULE, table_identifier, validate_table_name


@pytest.mark.parametrize(
    ("name", "table"),
    [
        ("events", "events"),
        ("Events", "events"),
        ("EVENTS", "events"),
        ("`Events`", "events"),  # quoted: still case-insensitive, as Spark's default (caseSensitive=false)
        ("`events_2024`", "events_2024"),
        ("Ev_1", "ev_1"),
        ("A" * 128, "a" * 128),
    ],
)
def test_a_spark_identifier_names_the_lower_case_table(name: str, table: str) -> None:
    assert table_identifier(name) == table
    assert validate_table_name(table) == table


@pytest.mark.parametrize("name", ["db.events", "DB.Events", "`db`.`events`", "spark_catalog.default.events"])
def test_a_qualified_name_is_refused_naming_the_rule_and_the_table(name: str) -> None:
    with pytest.raises(InvalidNameError) as refused:
        table_identifier(name)
    message = str(refused.value)
    assert IDENTIFIER_RULE in message and "db.table is refused" in message
    assert "name the table alone ('events')" in message


@pytest.mark.parametrize(
    "name",
    [
        "",
        "my-table",
        "1events",
        "`x.y`",
        "a..b",
        "events.",
        ".events",
        "`events",
        "ev`ents",
        "e v",
        "A" * 129,
        "`a``b`",
    ],
)
def test_anything_else_is_refused_naming_the_rule(name: str) -> None:
    with pytest.raises(InvalidNameError, match="case-insensitive as in Spark's catalog") as refused:
        table_identifier(name)
    assert repr(name) in str(refused.value)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(InvalidNameError):
        table_identifier(None)  # type: ignore[arg-type]
