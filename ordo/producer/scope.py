"""The partitions a condition can touch, from Spark's own analysis of it (never from its text).

UPDATE, DELETE and MERGE read only the files of the partitions in their
scope, and the arbiter serializes them against other writes by that scope, so
a scope must cover every row the condition can match. It is derived the way
Spark prunes partitions of a file source:

1. Spark analyzes the condition against the table's columns (for a MERGE, the
   target's aliased columns joined with the source's); the analyzed
   expression is split into its AND-ed conjuncts.
2. A conjunct is a *partition filter* when it is deterministic, holds no
   subquery and refers to the target's partition columns only (by attribute
   identity, so a source column of the same name never counts). Every other
   conjunct is taken as true: a row may match it whatever its partition.
3. Each partition filter is written back as SQL by Spark (``Expression.sql``)
   and kept only when Spark's analysis of that text is the same expression
   (``semanticEquals``); otherwise it is dropped, which only widens the scope.
4. The candidate partitions are the pinned snapshot's, plus the values that
   equality and ``IN`` filters name directly (a partition the condition names
   that holds no row yet: a concurrent writer creating it is then ordered
   against this commit, as before). One Spark job evaluates the partition
   filters on the candidates, each partition column cast from its canonical
   text to the column's type: the partitions that pass are the scope.

A condition with no partition filter, or whose filters keep no candidate or
more than ``MAX_PINNED_PARTITIONS``, has the whole table as its scope (None).
A partition created after the pinned version is outside a narrower scope: it
holds no row the transaction read or wrote, so serializing its commit before
this one is exact. Partition values are never null
(``producer.data.validate_records``), so a filter that is null on a
partition matches no row of it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ordo.producer.data import Layout

log = logging.getLogger("ordo.producer")

MAX_PINNED_PARTITIONS = 256  # more partitions in scope than this: the scope is the whole table
_EQUALITIES = frozenset({"EqualTo", "EqualNullSafe"})
_LISTS = frozenset({"In", "InSet"})


def _kind(expression: Any) -> str:
    return str(expression.getClass().getSimpleName())


def _conjuncts(expression: Any) -> list[Any]:
    """The AND-ed terms of an analyzed expression (Spark's ``splitConjunctivePredicates``)."""
    if _kind(expression) == "And":
        return _conjuncts(expression.left()) + _conjuncts(expression.right())
    return [expression]


def _children(expression: Any) -> list[Any]:
    seq = expression.children()
    return [seq.apply(i) for i in range(seq.size())]


def _has_subquery(expression: Any) -> bool:
    kind = _kind(expression)
    if "Subquery" in kind or kind in ("Exists", "ListQuery", "OuterReference"):
        return True
    return any(_has_subquery(child) for child in _children(expression))


def _reference_ids(expression: Any) -> set[int]:
    found, it = set(), expression.references().iterator()
    while it.hasNext():
        found.add(int(it.next().exprId().id()))
    return found


def _output_ids(df: DataFrame) -> dict[str, int]:
    """Column name -> attribute id of ``df``'s analyzed output."""
    output = df._jdf.queryExecution().analyzed().output()
    return {str(a.name()): int(a.exprId().id()) for a in (output.apply(i) for i in range(output.size()))}


def _analyzed_condition(df: DataFrame, condition: str | Column) -> Any:
    from pyspark.sql import functions as F

    filtered = df.filter(F.expr(condition) if isinstance(condition, str) else condition)
    plan = filtered._jdf.queryExecution().analyzed()
    if _kind(plan) != "Filter":  # not expected from DataFrame.filter; nothing to prune by
        return None
    return plan.condition()


def _named_values(conjunct: Any, ids: Mapping[int, str]) -> dict[str, set[str]]:
    """Values an equality or IN filter names for a partition column directly (``col = 'v'``, ``col IN (...)``)."""
    kind = _kind(conjunct)
    if kind in _EQUALITIES:
        sides = [(conjunct.left(), conjunct.right()), (conjunct.right(), conjunct.left())]
    elif kind == "In":
        sides = [(conjunct.value(), item) for item in _children(conjunct)[1:]]
    else:
        return {}
    named: dict[str, set[str]] = {}
    for column, value in sides:
        if _kind(column) != "AttributeReference" or _kind(value) != "Literal" or value.value() is None:
            continue
        name = ids.get(int(column.exprId().id()))
        if name is not None and column.dataType().equals(value.dataType()):
            named.setdefault(name, set()).add(str(value.toString()))
    return named


def condition_scope(
    spark: SparkSession,
    layout: Layout,
    condition: str | Column | None,
    snapshot_partitions: Sequence[Mapping[str, str]],
    *,
    target_alias: str | None = None,
    source: DataFrame | None = None,
    source_alias: str | None = None,
) -> list[dict[str, str]] | None:
    """The partitions (canonical text, sorted) whose rows ``condition`` can match, or None for the whole table.

    ``snapshot_partitions`` are the pinned snapshot's partitions. For a MERGE
    give the target's alias and the source with its alias: the condition is
    analyzed against both, and only conjuncts on the target's partition
    columns narrow the scope.
    """
    from pyspark.sql import functions as F

    from ordo.producer.data import canonical_values

    columns = tuple(layout.partition_columns)
    if condition is None or not columns:
        return None
    schema = layout.schema()
    base = spark.createDataFrame([], schema)
    target = base.alias(target_alias) if target_alias else base
    ids = {i: c for c, i in _output_ids(base).items() if c in columns}
    analyzed = target if source is None else target.crossJoin(source.alias(source_alias) if source_alias else source)
    expression = _analyzed_condition(analyzed, condition)
    if expression is None:
        return None
    filters: list[str] = []
    named: dict[str, set[str]] = {}
    for conjunct in _conjuncts(expression):
        refs = _reference_ids(conjunct)
        if not refs or not refs <= set(ids) or not conjunct.deterministic() or _has_subquery(conjunct):
            continue
        text = str(conjunct.sql())
        try:
            again = _analyzed_condition(target, text)
        except Exception:  # Spark's SQL text of it does not parse back: drop it (a wider scope)
            again = None
        if again is None or not again.semanticEquals(conjunct):
            log.debug("partition filter %s does not read back as itself; not used for the scope", text)
            continue
        filters.append(text)
        for column, values in _named_values(conjunct, ids).items():
            named[column] = named[column] & values if column in named else values
    if not filters:
        return None
    candidates = {tuple(p[c] for c in columns) for p in snapshot_partitions}
    if len(named) == len(columns):
        canonical = {c: canonical_values(spark, layout, c, sorted(named[c])) for c in columns}
        texts = [sorted(v for v in canonical[c].values() if v is not None) for c in columns]
        if 0 < _product_size(texts) <= MAX_PINNED_PARTITIONS:
            candidates.update(itertools.product(*texts))
    if not candidates:
        return None
    labels = [F.col(f"`{c}`").alias(f"__ordo_part{i}") for i, c in enumerate(columns)]
    typed = [
        F.col(f"`{f.name}`").cast(f.dataType).alias(f.name)
        if f.name in columns
        else F.lit(None).cast(f.dataType).alias(f.name)
        for f in schema.fields
    ]
    rows = spark.createDataFrame(sorted(candidates), ", ".join(f"`{c}` STRING" for c in columns))
    rows = rows.select(*typed, *labels)
    rows = rows.alias(target_alias) if target_alias else rows
    for text in filters:
        rows = rows.filter(F.expr(text))
    found = sorted({tuple(r) for r in rows.select(*[f"__ordo_part{i}" for i in range(len(columns))]).collect()})
    if not found or len(found) > MAX_PINNED_PARTITIONS:
        return None
    return [dict(zip(columns, key, strict=True)) for key in found]


def _product_size(values: Sequence[Sequence[str]]) -> int:
    size = 1
    for v in values:
        size *= len(v)
    return size
