"""The arbiter: a pure decision core (``core``, ``policy``) and its Kafka loop (``service``).

Importing this package imports only the pure core; the Kafka service lives in
``arbiter.service`` and is imported by whoever runs it.
"""

from ordo.arbiter.core import Reason, TableState, apply, decide, evaluate, evaluate_record, new_state, rebuild
from ordo.arbiter.policy import OpClass, Policy, Resolution, load_policy

__all__ = [
    "OpClass",
    "Policy",
    "Reason",
    "Resolution",
    "TableState",
    "apply",
    "decide",
    "evaluate",
    "evaluate_record",
    "load_policy",
    "new_state",
    "rebuild",
]
