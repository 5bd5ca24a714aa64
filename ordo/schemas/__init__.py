"""The contract: Avro schemas, pydantic models, the codec and topic names.

Imports no other package of ours; every other package may import it.
"""

from ordo.schemas.codec import Codec, chain_hash, decode, encode
from ordo.schemas.errors import CodecError, InvalidNameError, OrdoError, UnknownSchemaError
from ordo.schemas.models import (
    CommitDecision,
    CommitIntent,
    DataFile,
    Outcome,
    Rebase,
    TableMetadata,
)
from ordo.schemas.operations import OP_CLASS, TRAITS, OpClass, Operation, OperationTraits, Reason
from ordo.schemas.topics import (
    decisions_pattern,
    decisions_topic,
    intents_pattern,
    intents_topic,
    parse_topic,
    validate_table_name,
)

__all__ = [
    "OP_CLASS",
    "TRAITS",
    "Codec",
    "CodecError",
    "CommitDecision",
    "CommitIntent",
    "DataFile",
    "InvalidNameError",
    "OpClass",
    "Operation",
    "OperationTraits",
    "OrdoError",
    "Outcome",
    "Reason",
    "Rebase",
    "TableMetadata",
    "UnknownSchemaError",
    "chain_hash",
    "decisions_pattern",
    "decisions_topic",
    "decode",
    "encode",
    "intents_pattern",
    "intents_topic",
    "parse_topic",
    "validate_table_name",
]
