"""The scope of UPDATE/DELETE/MERGE from Spark's analysis of the condition (``producer.scope``).

A scope decides which files a write reads: it must cover every row the
condition matches. The property test generates conditions (double-quoted and
escaped strings, backticked names, nested parentheses, OR, NOT, IN,
functions, casts, nulls), evaluates each in a plain-Python model of SQL's
three-valued logic, checks Spark agrees with the model on the rows it
matches, and checks the inferred scope holds the partition of every such row.
The end-to-end test is the bug this replaced: a double-quoted literal holding
``dt = 'a'`` made a DELETE skip the partition where its row was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.producer.data import Layout
from ordo.producer.scope import condition_scope
from ordo.producer.table import DeltaTable
from tests.e2e.stack import writer_stack  # noqa: F401
from tests.profiles import examples

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SCHEMA = "id BIGINT, v STRING, n INT, dt STRING, h INT"
LAYOUT = Layout("scoped", "/unused", SCHEMA, ("id",), ("dt", "h"), {})
DTS = ("a", "b", "it's", 'say "hi"', "x and dt = 'a'")
HS = (1, 2, 3)
VS = (None, "a", "b", "dt = 'a'", 'x and dt = "b" or y', "it's", "")
# every (dt, h) but one, so a condition can name a partition the snapshot does not hold
ROWS = [
    (i, VS[i % len(VS)], None if i % 5 == 0 else i % 7 - 3, dt, h)
    for i, (dt, h) in enumerate((dt, h) for dt in DTS for h in HS if (dt, h) != ("b", 3))
]
PARTITIONS = sorted({(r[3], str(r[4])) for r in ROWS})

# ---------------------------------------------------------------- conditions: SQL text + a Python model


@dataclass(frozen=True)
class Cond:
    """A condition as Spark SQL text and as a function of a row giving True, False or None (SQL NULL)."""

    sql: str
    eval: Callable[[dict[str, Any]], bool | None]


def _quote(value: str, style: str) -> str:
    """A Spark SQL string literal: single or double quotes, with backslash escapes."""
    quote = "'" if style == "single" else '"'
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def _name(column: str, backticked: bool) -> str:
    return f"`{column}`" if backticked else column


def _compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    return {"=": left == right, "<>": left != right, "<": left < right, ">=": left >= right}[op]


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


STRINGS = st.sampled_from([*DTS, *[v for v in VS if v is not None], "A", "zz"])
INTS = st.integers(-4, 4)


@st.composite
def string_atom(draw: st.DrawFn) -> Cond:
    column = draw(st.sampled_from(["dt", "v"]))
    name = _name(column, draw(st.booleans()))
    style = draw(st.sampled_from(["single", "double"]))
    form = draw(st.sampled_from(["cmp", "in", "not in", "upper", "concat", "length", "null"]))
    if form == "cmp":
        op, value = draw(st.sampled_from(["=", "<>", "<", ">="])), draw(STRINGS)
        return Cond(f"{name} {op} {_quote(value, style)}", lambda r: _compare(op, r[column], value))
    if form in ("in", "not in"):
        values = draw(st.lists(STRINGS, min_size=1, max_size=3))
        text = f"{name} {form.upper()} ({', '.join(_quote(v, style) for v in values)})"

        def member(r: dict[str, Any]) -> bool | None:
            inside = None if r[column] is None else r[column] in values
            return inside if form == "in" else _not(inside)

        return Cond(text, member)
    if form == "upper":
        value = draw(STRINGS)
        return Cond(
            f"upper({name}) = {_quote(value.upper(), style)}",
            lambda r: _compare("=", None if r[column] is None else r[column].upper(), value.upper()),
        )
    if form == "concat":
        value = draw(STRINGS)
        return Cond(
            f"concat({name}, {_quote('!', style)}) = {_quote(value + '!', style)}",
            lambda r: _compare("=", r[column], value),
        )
    if form == "length":
        size = draw(st.integers(0, 8))
        return Cond(f"length({name}) > {size}", lambda r: None if r[column] is None else len(r[column]) > size)
    negated = draw(st.booleans())
    return Cond(
        f"{name} IS {'NOT ' if negated else ''}NULL",
        lambda r: (r[column] is not None) if negated else r[column] is None,
    )


@st.composite
def int_atom(draw: st.DrawFn) -> Cond:
    column = draw(st.sampled_from(["h", "n"]))
    name = _name(column, draw(st.booleans()))
    form = draw(st.sampled_from(["cmp", "in", "cast"]))
    if form == "cmp":
        op, value = draw(st.sampled_from(["=", "<>", "<", ">="])), draw(INTS)
        return Cond(f"{name} {op} {value}", lambda r: _compare(op, r[column], value))
    if form == "in":
        values = draw(st.lists(INTS, min_size=1, max_size=3))
        return Cond(
            f"{name} IN ({', '.join(map(str, values))})",
            lambda r: None if r[column] is None else r[column] in values,
        )
    value = draw(INTS)
    return Cond(
        f"CAST({name} AS STRING) = '{value}'",
        lambda r: _compare("=", None if r[column] is None else str(r[column]), str(value)),
    )


def combine(children: st.SearchStrategy[Cond]) -> st.SearchStrategy[Cond]:
    both = st.tuples(children, children)
    return st.one_of(
        both.map(lambda p: Cond(f"({p[0].sql}) AND ({p[1].sql})", lambda r: _and(p[0].eval(r), p[1].eval(r)))),
        both.map(lambda p: Cond(f"{p[0].sql} and {p[1].sql}", lambda r: _and(p[0].eval(r), p[1].eval(r)))),
        both.map(lambda p: Cond(f"(({p[0].sql}) OR ({p[1].sql}))", lambda r: _or(p[0].eval(r), p[1].eval(r)))),
        children.map(lambda c: Cond(f"(NOT ({c.sql}))", lambda r: _not(c.eval(r)))),
    )


CONDITIONS = st.recursive(st.one_of(string_atom(), int_atom()), combine, max_leaves=6)
COLUMNS = ("id", "v", "n", "dt", "h")


def model_matches(cond: Cond) -> set[int]:
    return {r[0] for r in ROWS if cond.eval(dict(zip(COLUMNS, r, strict=True))) is True}


@pytest.fixture(scope="module")
def table_rows(spark: Any) -> Any:
    return spark.createDataFrame(ROWS, SCHEMA).cache()


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cond=CONDITIONS)
def test_scope_covers_every_row_the_condition_matches(spark: Any, table_rows: Any, cond: Cond) -> None:
    expected = model_matches(cond)
    assert {r["id"] for r in table_rows.filter(cond.sql).collect()} == expected, f"model disagrees: {cond.sql}"
    scope = condition_scope(spark, LAYOUT, cond.sql, [{"dt": d, "h": h} for d, h in PARTITIONS])
    if scope is None:
        return
    inside = {(p["dt"], p["h"]) for p in scope}
    missed = sorted({(r[3], str(r[4])) for r in ROWS if r[0] in expected} - inside)
    assert not missed, f"{cond.sql}: scope {sorted(inside)} misses partitions {missed} of matching rows"


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("""v = "x and dt = 'a' and y" """, None),  # the literal's text names no partition
        ("v = 'it\\'s' AND dt = \"b\"", [("b", "1"), ("b", "2")]),
        ("dt = 'a' AND h = 3", [("a", "3")]),
        ("`dt` IN ('a', 'b') AND h >= 2", [("a", "2"), ("a", "3"), ("b", "2")]),
        ("dt = 'b' AND h = 3", [("b", "3")]),  # named by equality, not in the snapshot: still ordered against
        ("dt = 'a' OR h = 1", [(d, "1") for d in sorted(DTS) if d != "a"] + [("a", "1"), ("a", "2"), ("a", "3")]),
        ("NOT (dt <> 'it\\'s') AND n > 0", [("it's", "1"), ("it's", "2"), ("it's", "3")]),
        ("upper(dt) = 'SAY \"HI\"'", [('say "hi"', "1"), ('say "hi"', "2"), ('say "hi"', "3")]),
        ("dt = 'a' AND dt = 'b'", None),  # contradictory: matches nothing, no narrower scope
        ("n > 1 OR dt = 'a'", None),  # an OR with a data column: every partition
        ("dt = 'a' AND rand() < 2", [("a", "1"), ("a", "2"), ("a", "3")]),  # nondeterministic conjunct ignored
        ("h = rand()", None),  # nondeterministic filter on a partition column: not used
        (None, None),
    ],
)
def test_scope_of_conditions(spark: Any, condition: str | None, expected: Any) -> None:
    scope = condition_scope(spark, LAYOUT, condition, [{"dt": d, "h": h} for d, h in PARTITIONS])
    got = None if scope is None else sorted((p["dt"], p["h"]) for p in scope)
    assert got == (None if expected is None else sorted(expected))


def test_merge_scope_counts_only_the_targets_partition_columns(spark: Any) -> None:
    source = spark.createDataFrame([(1, "a", 1)], "id BIGINT, dt STRING, h INT")
    partitions = [{"dt": d, "h": h} for d, h in PARTITIONS]

    def scope(condition: str) -> Any:
        found = condition_scope(spark, LAYOUT, condition, partitions, target_alias="t", source=source, source_alias="s")
        return None if found is None else sorted((p["dt"], p["h"]) for p in found)

    assert scope("t.id = s.id AND t.dt = 'b' AND s.dt = 'a'") == [("b", "1"), ("b", "2")]
    assert scope("t.id = s.id AND s.dt = 'a' AND s.h = 1") is None  # the source's columns pin nothing
    assert scope("t.id = s.id AND t.h = s.h") is None  # a join on a partition column: any partition
    assert scope("t.id = s.id AND (t.dt = \"it's\" OR t.dt = 'a') AND t.h = 2") == [("a", "2"), ("it's", "2")]


def test_a_double_quoted_literal_never_narrows_a_delete(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """The bug: ``v = "x and dt = 'a' and y"`` pinned ``dt = 'a'`` and the matching row in ``dt = 'b'`` survived."""
    table = DeltaTable.create(
        spark, "quoted", schema="id BIGINT, v STRING, dt STRING", primary_key="id", partitioned_by="dt",
        settings=writer_stack.settings,
    )  # fmt: skip
    text = "x and dt = 'a' and y"
    table.insert_into(spark.createDataFrame([(1, text, "a"), (2, text, "b"), (3, "other", "b")], table.schema))
    table.delete(f'v = "{text}"')
    assert sorted(r["id"] for r in table.toDF().collect()) == [3]
    assert table.decisions(1)[0].partitions is None  # the whole table: no conjunct filters on dt alone
    table.update({"v": "'seen'"}, "v = 'other' AND dt = \"b\"")
    assert [(r["id"], r["v"]) for r in table.toDF().collect()] == [(3, "seen")]
    assert [dict(p) for p in table.decisions(1)[0].partitions] == [{"dt": "b"}]
