"""``replaceWhere`` with any predicate on partition columns (``producer.predicate``), end to end.

1. A property test: generated predicates of the documented grammar are
   evaluated by ``producer.predicate`` on partition values and by Spark itself
   on the same typed values; the answers (true, false, null) must agree.
2. ``df.write.format("ordo").mode("overwrite").option("replaceWhere", ...)``
   on the real stack against a Python model of the table: exactly the
   partitions the condition selects are replaced, a row outside it fails the
   write and leaves the table unchanged, and what the grammar does not take is
   refused naming the problem.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.producer.predicate import PredicateError, parse_predicate
from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401
from tests.profiles import examples

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# ----------------------------------------------------------------------------------------- the property test

PARTITION_COLUMNS = [("dt", "string"), ("n", "int"), ("flag", "boolean"), ("d", "date")]
SPARK_SCHEMA = "idx INT, dt STRING, n INT, flag BOOLEAN, d DATE"
_STRINGS = ["a", "A", "ab", "b%", "it's", 'say "x"', "back\\slash", "a_c", "é", " pad ", "2024-05-01", "ß", "", "zz"]
_INTS = [0, 1, -3, 7, 2024, 5, 1, 0, 12, -1, 3, 100, 2, 9]
ROWS = [
    (i, s, n, i % 2 == 0, datetime.date(2024, 1 + i % 12, 1 + (7 * i) % 28))
    for i, (s, n) in enumerate(zip(_STRINGS, _INTS, strict=True))
]


def texts(row: tuple[Any, ...]) -> dict[str, str]:
    """A row's partition values as ordo writes them (Spark's ``cast(... as string)``)."""
    _, dt, n, flag, d = row
    return {"dt": dt, "n": str(n), "flag": "true" if flag else "false", "d": d.isoformat()}


ALPHABET = "aAb'\"\\%_é -2ß"


def quoted(value: str, quote: str, doubled: bool) -> str:
    """A SQL string literal of ``value``: backslash escapes, or a doubled quote for the quote itself."""
    out = value.replace("\\", "\\\\")
    out = out.replace(quote, quote + quote if doubled else "\\" + quote)
    return quote + out + quote


@st.composite
def string_literal(draw: Any, value: st.SearchStrategy[str] | None = None) -> str:
    text = draw(value if value is not None else st.one_of(st.sampled_from(_STRINGS), st.text(ALPHABET, max_size=4)))
    quote = draw(st.sampled_from("'\""))
    if len(text) > 1 and draw(st.booleans()):  # adjacent literals are one
        cut = draw(st.integers(1, len(text) - 1))
        return quoted(text[:cut], quote, draw(st.booleans())) + " " + quoted(text[cut:], quote, draw(st.booleans()))
    return quoted(text, quote, draw(st.booleans()))


@st.composite
def column(draw: Any, name: str) -> str:
    spelled = "".join(c.upper() if draw(st.booleans()) else c for c in name)
    return f"`{spelled}`" if draw(st.booleans()) else spelled


def int_literal() -> st.SearchStrategy[str]:
    return st.integers(-5, 2030).map(str)


@st.composite
def string_value(draw: Any) -> str:
    kind = draw(st.integers(0, 8))
    if kind <= 2:
        return draw(column("dt"))
    if kind == 3:
        return draw(string_literal())
    if kind == 4:
        return f"{draw(st.sampled_from(['upper', 'lower', 'trim', 'ltrim', 'rtrim']))}({draw(column('dt'))})"
    if kind == 5:
        length = draw(st.one_of(st.none(), st.integers(-2, 4)))
        tail = "" if length is None else f", {length}"
        return (
            f"{draw(st.sampled_from(['substring', 'substr']))}({draw(column('dt'))}, {draw(st.integers(-4, 4))}{tail})"
        )
    if kind == 6:
        return f"concat({draw(column('dt'))}, {draw(string_literal())})"
    if kind == 7:
        return f"coalesce({draw(column('dt'))}, {draw(string_literal())})"
    return "NULL"


@st.composite
def int_value(draw: Any) -> str:
    kind = draw(st.integers(0, 5))
    if kind <= 1:
        return draw(column("n"))
    if kind == 2:
        return draw(int_literal())
    if kind == 3:
        return f"length({draw(column('dt'))})"
    if kind == 4:
        return f"abs({draw(column('n'))})"
    return f"{draw(st.sampled_from(['year', 'month', 'day', 'dayofmonth']))}({draw(column('d'))})"


@st.composite
def date_value(draw: Any) -> str:
    day = draw(st.dates(datetime.date(2023, 12, 1), datetime.date(2025, 1, 31))).isoformat()
    kind = draw(st.integers(0, 3))
    if kind <= 1:
        return draw(column("d"))
    return f"DATE '{day}'" if kind == 2 else f"'{day}'"  # a date-shaped string literal compares as a date


@st.composite
def comparison(draw: Any) -> str:
    value = draw(st.sampled_from([string_value(), int_value(), date_value()]))
    left = draw(value)
    kind = draw(st.integers(0, 5))
    if kind <= 1:
        op = draw(st.sampled_from(["=", "==", "<>", "!=", "<", "<=", ">", ">=", "<=>"]))
        return f"{left} {op} {draw(value)}"
    if kind == 2:
        items = draw(st.lists(st.one_of(value, st.just("NULL")), min_size=1, max_size=4))
        return f"{left} {draw(st.sampled_from(['IN', 'NOT IN', 'in']))} ({', '.join(items)})"
    if kind == 3:
        return f"{left} {draw(st.sampled_from(['BETWEEN', 'NOT BETWEEN']))} {draw(value)} AND {draw(value)}"
    if kind == 4:
        pattern = draw(st.text("ab%_é'", max_size=4)) + draw(st.sampled_from(["", "\\%", "\\_", "\\\\"]))
        operator = draw(st.sampled_from(["LIKE", "NOT LIKE", "like"]))
        return f"{draw(string_value())} {operator} {draw(string_literal(st.just(pattern)))}"
    return f"{left} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"


def condition() -> st.SearchStrategy[str]:
    leaf = st.one_of(comparison(), comparison(), column("flag"), st.sampled_from(["true", "FALSE", "NULL"]))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from([" AND ", " OR ", " and ", " or "]), inner).map("".join),
            inner.map(lambda c: f"NOT ({c})"),
            inner.map(lambda c: f"({c})"),
        ),
        max_leaves=6,
    )


@settings(max_examples=examples(50), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    st.lists(condition(), min_size=6, max_size=6),
    st.lists(st.one_of(string_value(), int_value(), date_value()), min_size=6, max_size=6),
)
def test_predicates_evaluate_as_spark_evaluates_them(spark: Any, conditions: list[str], values: list[str]) -> None:
    """Each generated condition, and each value (functions, literals with escapes): ``producer.predicate`` on the
    partition values == Spark on the typed values (true, false or null; the value itself)."""
    parsed = [parse_predicate(c, PARTITION_COLUMNS) for c in conditions]
    parsed += [parse_predicate(v, PARTITION_COLUMNS, condition=False) for v in values]
    texts_ = conditions + values
    frame = spark.createDataFrame(ROWS, SPARK_SCHEMA)
    got = frame.selectExpr("idx", *[f"({c}) AS p{i}" for i, c in enumerate(texts_)]).collect()
    assert len(got) == len(ROWS)
    for row in got:
        partition = texts(ROWS[row["idx"]])
        for i, predicate in enumerate(parsed):
            assert predicate.evaluate(partition) == row[f"p{i}"], (texts_[i], ROWS[row["idx"]])


def test_what_the_grammar_does_not_take_is_refused_naming_it() -> None:
    columns = [("dt", "string"), ("n", "int")]
    for text, message in (
        ("", "empty"),
        ("dt = 1", r"compares string dt with int 1"),
        ("amount > 1", r"'amount' at position 0 is not a partition column"),
        ("nope = 'a'", r"no column 'nope'"),
        ("md5(dt) = 'a'", r"function 'md5' at position 0 is not supported"),
        ("dt = 'a", r"unterminated string literal starting at position 5"),
        ("dt = 'a' AND", r"expected a value at position 12, found the end"),
        ("dt = 1.5", r"not an integer"),
        ("dt LIKE 'a\\\\b'", r"escape"),
        ("dt", r"dt at position 0 is a string, not a condition"),
        ("n = 1 n = 2", r"unexpected 'n' at position 6"),
        ("dt ; drop", r"unexpected character ';'"),
    ):
        with pytest.raises(PredicateError, match=message):
            parse_predicate(text, columns, ["amount"])
    with pytest.raises(PredicateError, match=r"partition column 'x' has type double"):
        parse_predicate("x = 1", [("x", "double")])
    with pytest.raises(PredicateError, match="nests too deeply"):
        parse_predicate("(" * 5000 + "dt = 'a'" + ")" * 5000, columns)


# ----------------------------------------------------------------------------------------- the data source

SCHEMA = "id BIGINT, v STRING, dt STRING, n INT"


def test_replace_where_replaces_exactly_the_partitions_it_selects(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings_ = writer_stack.settings
    opts = settings_options(settings_)
    table = DeltaTable.create(
        spark, "rw_events", schema=SCHEMA, primary_key="id", partitioned_by=("dt", "n"), settings=settings_
    )
    model: dict[int, tuple[Any, ...]] = {}
    days = ["2024-05-01", "2024-05-02", "2024-05-03", "it's"]
    start = [(i, f"a{i}", days[i % 4], i % 3) for i in range(24)]
    table.insert_into(spark.createDataFrame(start, SCHEMA))
    model.update({r[0]: r for r in start})
    partitions = {(r[2], r[3]) for r in start}

    def overwrite(data: list[tuple[Any, ...]], where: str) -> None:
        (
            spark.createDataFrame(data, SCHEMA)
            .write.format("ordo")
            .options(**opts)
            .mode("overwrite")
            .option("replaceWhere", where)
            .save("rw_events")
        )

    def replaced(where: str, data: list[tuple[Any, ...]]) -> set[tuple[str, int]]:
        """Overwrite, fold into the model, and return the partitions the decision replaced."""
        predicate = parse_predicate(where, [("dt", "string"), ("n", "int")])
        chosen = {p for p in partitions if predicate.matches({"dt": p[0], "n": str(p[1])})}
        before = table.version
        overwrite(data, where)
        assert table.version == before + 1
        for key in [k for k, r in model.items() if (r[2], r[3]) in chosen]:
            del model[key]
        model.update({r[0]: r for r in data})
        partitions.difference_update(chosen)  # an emptied partition is gone from the snapshot
        partitions.update((r[2], r[3]) for r in data)
        decision = table.decisions(1)[0]
        assert decision.operation.value == "INSERT_OVERWRITE"
        got = {(p["dt"], int(p["n"])) for p in decision.partitions or ()}
        assert got == chosen | {(r[2], r[3]) for r in data}, where
        assert sorted(tuple(r) for r in table.read().collect()) == sorted(model.values())
        return got

    # a range and IN on two columns; the rows satisfy it
    got = replaced("dt >= '2024-05-02' AND n IN (1, 2)", [(100, "b", "2024-05-02", 1), (101, "b", "2024-05-03", 2)])
    assert {("2024-05-02", 1), ("2024-05-03", 2), ("it's", 1)} <= got and ("2024-05-01", 1) not in got
    # OR, NOT, BETWEEN, LIKE, backquotes, either quote with escapes, a function
    replaced(
        "`DT` LIKE '2024-05-0%' AND NOT (n BETWEEN 1 AND 2) OR dt = \"it\\'s\" AND upper(dt) <> 'X'",
        [(102, "c", "it's", 0), (103, "c", "2024-05-01", 0)],
    )
    # a condition selecting no existing partition: a new one is written, nothing replaced
    assert replaced("dt = '2024-06-01' OR n > 5", [(104, "d", "2024-06-01", 9)]) == {("2024-06-01", 9)}
    # no rows: the selected partitions are emptied (Delta deletes what the condition matches)
    replaced("n = 0 AND dt <> 'it''s'", [])
    # equality on every partition column: that one partition, existing or not (the `partition` option's path)
    assert replaced("dt = '2024-07-01' AND n = 4", [(105, "e", "2024-07-01", 4)]) == {("2024-07-01", 4)}

    # a row outside the condition fails the write; nothing is committed and no file stays
    before, files = table.version, {f.path for f in table.catalog.snapshot("rw_events").files}
    with pytest.raises(Exception, match=r"rows do not match replaceWhere"):
        overwrite([(106, "f", "2024-05-02", 1), (107, "f", "2024-05-09", 1)], "dt <= '2024-05-03'")
    assert table.version == before and {f.path for f in table.catalog.snapshot("rw_events").files} == files
    assert sorted(tuple(r) for r in table.read().collect()) == sorted(model.values())
    for where, message in (
        ("v = 'x'", r"column 'v' at position 0 is not a partition column"),
        ("dt = 5", r"compares string dt with int 5"),
        ("sha1(dt) = 'a'", r"function 'sha1'"),
        ("dt = 'a' OR", r"expected a value"),
    ):
        with pytest.raises(Exception, match=message):
            overwrite([(108, "g", "a", 1)], where)
    assert table.version == before
