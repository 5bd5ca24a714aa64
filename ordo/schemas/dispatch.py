"""Per-operation behaviour as registered handlers: one ``OperationTable`` per part that treats operations apart.

Each part of ordo that does something different per operation keeps its own
table and registers a named handler for each operation, in the shape of
``functools.singledispatch`` (iceberg-python's ``@_apply_table_update.register``)::

    CATALOG = OperationTable("catalog writer", "ordo.consumer.commits")

    @CATALOG.register(Operation.ALTER_TABLE)
    def _new_metadata_version(rows: CommitRows) -> Applied: ...

    CATALOG[decision.operation](rows)     # dispatch: no if/elif over operations

The tables (docs/architecture.md, "Operations as registered behaviour"):

* the arbiter's rules (``ordo.arbiter.rules.CHECKS``): what an intent of the
  operation must satisfy; every operation registers its own;
* the arbiter's fold (``ordo.arbiter.rules.FOLD``) and the log's
  (``ordo.schemas.decisionlog``): what an accepted decision does to the state;
* the catalog writer (``ordo.consumer.commits.CATALOG``): its rows;
* the change-row reader (``ordo.consumer.arrow.CHANGES``): its change rows.

The readers of decisions (every table but the arbiter's rules) may *inherit*:
an operation declared with ``extends`` (``schemas.operations.OperationSpec``)
is handled as the operation it extends where it registers nothing of its own,
as ``singledispatch`` falls back to a base class. ``missing_handlers`` lists
what no table can dispatch; ``tests/unit/test_registry.py`` fails on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from ordo.schemas.operations import REGISTRY, Operation

H = TypeVar("H")

TABLES: list[OperationTable[object]] = []  # every table made, in import order (the completeness test reads it)


class OperationTable(Generic[H]):
    """Handlers keyed by operation; ``table[op]`` is ``op``'s own, else (``inherits``) that of the one it extends."""

    def __init__(self, name: str, module: str, *, inherits: bool = True) -> None:
        self.name = name  # what the table does, for messages
        self.module = module  # the module that fills it (importing it registers every handler)
        self.inherits = inherits
        self._own: dict[Operation, H] = {}
        self._resolved: dict[Operation, H] = {}  # lookups so far, inherited ones included (the hot paths')
        TABLES.append(self)  # type: ignore[arg-type]

    def register(self, *operations: Operation) -> Callable[[H], H]:
        """Register the decorated handler for ``operations`` (each at most once per table)."""

        def add(handler: H) -> H:
            for operation in operations:
                if operation in self._own:
                    raise ValueError(f"{self.name}: {operation.value} already has a handler")
                self._own[operation] = handler
            self._resolved.clear()
            return handler

        return add

    def __getitem__(self, operation: Operation) -> H:
        handler = self._resolved.get(operation)
        if handler is not None:
            return handler
        found = self.find(operation)
        if found is None:
            raise LookupError(f"{self.name} has no handler for {operation.value}")
        self._resolved[operation] = found
        return found

    def find(self, operation: Operation) -> H | None:
        """``operation``'s handler (its own, or inherited along ``extends``), None when there is none."""
        for candidate in self.lineage(operation):
            handler = self._own.get(candidate)
            if handler is not None:
                return handler
        return None

    def lineage(self, operation: Operation) -> Iterator[Operation]:
        """``operation``, then (when this table inherits) each operation it extends, nearest first."""
        seen: set[Operation] = set()
        current: Operation | None = operation
        while current is not None and current not in seen:
            yield current
            seen.add(current)
            if not self.inherits:
                return
            spec = REGISTRY.get(current)
            current = None if spec is None else spec.extends

    def resolved(self) -> dict[Operation, H]:
        """Every operation's handler as a plain dict (for hot paths: a dict lookup, no method call); an operation
        with none is left out (dispatching it raises ``KeyError``; ``missing_handlers`` names it)."""
        found = {op: self.find(op) for op in Operation}
        return {op: handler for op, handler in found.items() if handler is not None}

    def own(self, operation: Operation) -> bool:
        """True when ``operation`` registered a handler of its own here (not inherited)."""
        return operation in self._own


def missing_handlers(operations: Iterator[Operation] | None = None) -> list[str]:
    """``table: OPERATION`` for every operation (of ``Operation`` by default) some table cannot dispatch."""
    wanted = list(Operation if operations is None else operations)
    return [f"{table.name} ({table.module}): {op.value}" for table in TABLES for op in wanted if table.find(op) is None]


__all__ = ["TABLES", "OperationTable", "missing_handlers"]
