"""The contract's operation traits and reason codes (``schemas.operations``)."""

from __future__ import annotations

import json

from ordo.schemas import OP_CLASS, TRAITS, OpClass, Operation, Reason, decode, encode
from ordo.schemas.history import AVRO_DIR
from ordo.schemas.models import CommitDecision, Outcome
from ordo.schemas.operations import REWRITING_OPERATIONS, TRUNCATING_OPERATIONS


def test_every_operation_has_one_row_of_traits_in_avro_order() -> None:
    symbols = json.loads((AVRO_DIR / "Operation.avsc").read_text())["symbols"]
    assert [op.value for op in Operation] == symbols
    assert set(TRAITS) == set(Operation)


def test_the_traits_say_what_each_operation_does() -> None:
    table = {
        op.value: (
            None if t.op_class is None else t.op_class.name,
            t.adds_files,
            t.removes_files,
            t.truncates,
            t.data_change,
            t.metadata_only,
        )
        for op, t in TRAITS.items()
    }
    assert table == {
        "CREATE_TABLE": (None, False, False, False, True, True),
        "INSERT_INTO": ("INSERT", True, False, False, True, False),
        "INSERT_OVERWRITE": ("OVERWRITE", True, True, True, True, False),
        "TRUNCATE": ("OVERWRITE", False, True, True, True, False),
        "UPDATE": ("UPDATE", True, False, False, True, False),
        "DELETE": ("UPDATE", True, False, False, True, False),
        "MINOR_COMPACT": ("MINOR_COMPACT", True, True, False, False, False),
        "MAJOR_COMPACT": ("MAJOR_COMPACT", True, True, False, False, False),
        "CLUSTER": ("CLUSTER", True, True, False, False, False),
        "RESTORE": ("OVERWRITE", True, True, False, True, False),
        "ALTER_TABLE": ("ALTER", False, False, False, True, True),
        "ADD_CONSTRAINT": ("ALTER", False, False, False, True, True),
        "DROP_CONSTRAINT": ("ALTER", False, False, False, True, True),
    }
    assert TRUNCATING_OPERATIONS == {"INSERT_OVERWRITE", "TRUNCATE"}
    assert REWRITING_OPERATIONS == {"MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"}
    assert {op for op in Operation if op.rewrites} == {Operation(v) for v in REWRITING_OPERATIONS}
    assert all(op.data_change is TRAITS[op].data_change for op in Operation)
    assert set(OP_CLASS.values()) == set(OpClass)  # every matrix class has an operation


def test_reason_is_a_string_enum_and_the_wire_holds_plain_strings() -> None:
    assert all(isinstance(r, str) and r.value == r.name for r in Reason)
    assert Reason.SCHEMA_CHANGED == "SCHEMA_CHANGED" and f"{Reason.SCHEMA_CHANGED}" == "SCHEMA_CHANGED"
    assert "SCHEMA_CHANGED" in Reason.ALL and len(Reason.ALL) == len(set(Reason.ALL)) == len(Reason)
    decision = CommitDecision(
        txn_id="t", table="t", intent_offset=0, outcome=Outcome.REJECTED, reason=Reason.SCHEMA_CHANGED
    )
    back = decode(encode(decision))
    assert isinstance(back, CommitDecision) and back.reason == Reason.SCHEMA_CHANGED
    assert type(back.reason) is str
