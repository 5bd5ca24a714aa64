"""Conflict policies: the matrix as data.

A policy is a CSV table ``earlier,later,outcome`` over the six operation classes,
in the format of ``tests/unit/conflict_matrix.csv`` (MaxCompute's published matrix). ``maxcompute`` (the
default) is the reference's 25 cells plus the CLUSTER rules of docs/conflicts.md;
``serializable`` rejects every concurrent pair. A table selects one with the
property ``ordo.conflict_policy``.
"""

from __future__ import annotations

import csv
import enum
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ordo.schemas import OP_CLASS, OpClass, Rebase, TableMetadata
from ordo.schemas.errors import OrdoError
from ordo.schemas.operations import CLASSES, REGISTRY

POLICY_DIR = Path(__file__).parent / "policies"
POLICY_PROPERTY = "ordo.conflict_policy"
DEFAULT_POLICY = "maxcompute"


class Resolution(str, enum.Enum):
    """A matrix cell: how a later concurrent transaction ends (docs/conflicts.md)."""

    LATER_FAILS = "later_fails"
    LATER_OVERWRITES = "later_overwrites"
    COMPACTION_COMPLETES = "compaction_completes"
    NEW_DATA_WRITTEN = "new_data_written"
    # Both commits stand as they are (no rebase): a keyless table's concurrent appends (``keyless_policy``).
    NO_CONFLICT = "no_conflict"


# The rebase an accepted decision names for each cell that lets the later commit through.
REBASE_OF = {
    Resolution.LATER_OVERWRITES: Rebase.LATER_OVERWRITES,
    Resolution.COMPACTION_COMPLETES: Rebase.COMPACTION_COMPLETES,
    Resolution.NEW_DATA_WRITTEN: Rebase.NEW_DATA_WRITTEN,
    Resolution.NO_CONFLICT: Rebase.NONE,
}

# Cells no policy chooses: those of a row or column the registry fixes (``schemas.operations.CLASSES``).
# An ALTER_TABLE changes the schema every file must follow: a commit written against
# the old schema cannot be rebased over it, and an ALTER cannot be rebased over data
# it did not see (docs/conflicts.md). So every cell of its row and column fails the later commit.
_FIXED = {spec.op_class: Resolution(spec.fixed) for spec in CLASSES if spec.fixed is not None}
FIXED_CELLS = {(e, la): _FIXED.get(e) or _FIXED[la] for e in OpClass for la in OpClass if e in _FIXED or la in _FIXED}
# The docs' symbol of each cell (docs/conflicts.md).
SYMBOL = {
    Resolution.LATER_FAILS: "✗",
    Resolution.LATER_OVERWRITES: "OW",
    Resolution.COMPACTION_COMPLETES: "CC",
    Resolution.NEW_DATA_WRITTEN: "NW",
    Resolution.NO_CONFLICT: "✓",
}
# The cells a keyless table (no primary key: ``TableMetadata.keyless``) resolves differently from its policy:
# concurrent appends add rows with fresh row ids, so neither can hide, replace or duplicate a row of the other:
# with no key there is nothing to order (as in Delta, where blind appends never conflict). docs/conflicts.md.
KEYLESS_CELLS = {(OpClass.INSERT, OpClass.INSERT): Resolution.NO_CONFLICT}


class PolicyError(OrdoError, ValueError):
    """Raised when a policy file is missing, incomplete or names unknown classes."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A complete matrix: ``cells[earlier][later]`` for every pair of classes."""

    name: str
    cells: tuple[tuple[Resolution, ...], ...]

    def resolve(self, earlier: OpClass, later: OpClass) -> Resolution:
        """The outcome for ``later`` when a concurrent ``earlier`` committed first."""
        return self.cells[earlier][later]

    @classmethod
    def from_csv(cls, name: str, path: Path) -> Policy:
        """Load and check a policy file: all 36 cells of the six data classes present, none twice.

        A row and column the registry fixes (ALTER: every cell ``later_fails``)
        are not a policy's choice (``FIXED_CELLS``). A file may list them, with that outcome only.
        """
        grid: list[list[Resolution | None]] = [[None] * len(OpClass) for _ in OpClass]
        with path.open(newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    earlier, later = OpClass[row["earlier"].strip()], OpClass[row["later"].strip()]
                    outcome = Resolution(row["outcome"].strip())
                except (KeyError, ValueError, AttributeError) as exc:
                    raise PolicyError(f"{path}:{line}: bad row {row}") from exc
                if grid[earlier][later] is not None:
                    raise PolicyError(f"{path}:{line}: cell {earlier.name},{later.name} given twice")
                fixed = FIXED_CELLS.get((earlier, later))
                if fixed is not None and outcome is not fixed:
                    raise PolicyError(
                        f"{path}:{line}: cell {earlier.name},{later.name} must be {fixed.value}: a schema change "
                        "conflicts with every concurrent commit"
                    )
                grid[earlier][later] = outcome
        for (earlier, later), fixed in FIXED_CELLS.items():
            grid[earlier][later] = fixed
        missing = [f"{e.name},{la.name}" for e in OpClass for la in OpClass if grid[e][la] is None]
        if missing:
            raise PolicyError(f"{path}: missing cells {', '.join(missing)}")
        return cls(name, tuple(tuple(r for r in row if r is not None) for row in grid))


@cache
def keyless_policy(policy: Policy) -> Policy:
    """``policy`` as a keyless table applies it: ``KEYLESS_CELLS`` replace its cells."""
    cells = tuple(
        tuple(KEYLESS_CELLS.get((earlier, later), policy.resolve(earlier, later)) for later in OpClass)
        for earlier in OpClass
    )
    return Policy(policy.name, cells)


def table_policy(metadata: TableMetadata) -> Policy:
    """The matrix a table's commits are decided by: its ``ordo.conflict_policy`` (keyless: ``keyless_policy`` of it).

    ``PolicyError`` for an unknown policy name.
    """
    policy = load_policy(metadata.properties.get(POLICY_PROPERTY, DEFAULT_POLICY))
    return keyless_policy(policy) if metadata.keyless else policy


def matrix_markdown(policy: Policy) -> str:
    """The policy's matrix as the docs' table (docs/conflicts.md; a test keeps the two equal).

    Rows are the earlier commit, columns the later one, in ``OpClass`` order;
    each row names the operations of its class from the registry.
    """
    members: dict[OpClass, list[str]] = {c: [] for c in OpClass}
    for spec in REGISTRY.values():
        if spec.op_class is not None:
            members[spec.op_class].append(spec.label)
    lines = [
        "| earlier \\ later | " + " | ".join(c.title for c in CLASSES) + " |",
        "|---" * (len(CLASSES) + 1) + "|",
    ]
    for row in CLASSES:
        cells = " | ".join(SYMBOL[policy.resolve(row.op_class, column.op_class)] for column in CLASSES)
        lines.append(f"| {row.title} ({', '.join(members[row.op_class])}) | {cells} |")
    return "\n".join(lines) + "\n"


def available_policies() -> list[str]:
    """Names of the policy files shipped with ordo."""
    return sorted(p.stem for p in POLICY_DIR.glob("*.csv"))


@cache
def load_policy(name: str = DEFAULT_POLICY) -> Policy:
    """The named policy; raises ``PolicyError`` for an unknown name."""
    if name not in available_policies():
        raise PolicyError(f"unknown conflict policy {name!r}; available: {', '.join(available_policies())}")
    return Policy.from_csv(name, POLICY_DIR / f"{name}.csv")


__all__ = [  # OpClass and OP_CLASS are the contract's (schemas.operations), re-exported here
    "DEFAULT_POLICY",
    "FIXED_CELLS",
    "KEYLESS_CELLS",
    "OP_CLASS",
    "POLICY_DIR",
    "POLICY_PROPERTY",
    "REBASE_OF",
    "SYMBOL",
    "OpClass",
    "Policy",
    "PolicyError",
    "Resolution",
    "available_policies",
    "keyless_policy",
    "load_policy",
    "matrix_markdown",
    "table_policy",
]
