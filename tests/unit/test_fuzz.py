"""Fuzz targets (Hypothesis): the decoder, ``evaluate_record`` and the path rule never fail open.

* ``decode(bytes)`` returns an event or raises ``CodecError``; nothing else, for
  any bytes: random, behind a valid header, or a valid record mutated.
* ``evaluate_record(state, bytes, ts, offset)`` never raises and always returns
  a decision of this table for this offset, chained to the state; a rejection
  has a stable reason code; the decision encodes, decodes back equal, and
  folds into the state without error. Inputs include valid-Avro intents built
  from absurd values (written by fastavro straight from dicts).
* ``invalid_path_reason``: a path it accepts stays inside the table location
  once joined and normalized, for plain and URI locations.

Examples per test: ``HYPOTHESIS_FUZZ_EXAMPLES`` (default 300; the chaos profile
``full`` sets nothing here, run with a larger value for a deeper search).
"""

from __future__ import annotations

import copy
import io
import os
import posixpath
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.arbiter.core import Reason, TableState, apply, evaluate_record, invalid_path_reason, new_state
from ordo.schemas import CodecError, CommitDecision, CommitIntent, DataFile, Operation, Outcome, decode, encode
from ordo.schemas.codec import DEFAULT_CODEC
from tests.profiles import examples

from .helpers import Table

EXAMPLES = int(os.environ.get("HYPOTHESIS_FUZZ_EXAMPLES", examples(300)))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
LONG = st.integers(-(2**63), 2**63 - 1)
# Kafka record timestamps the arbiter can meet: CreateTime is whatever the producer set, -1 means none.
# (Timestamps beyond year 9999 are tested separately below.)
TIMESTAMPS = st.integers(-(2**40), 253_402_300_799_000)


def _history() -> TableState:
    """A partitioned table with inserts, a compaction, a streaming batch and a rejection behind it."""
    table = Table()
    table.commit(Operation.INSERT_INTO, "a", n=2)
    table.commit(Operation.INSERT_INTO, "b")
    table.commit(Operation.MINOR_COMPACT, "a")
    table.commit(Operation.INSERT_INTO, "a", app_id="app", batch_id=3)
    table.submit(table.intent(Operation.INSERT_INTO, 0, "b"))  # concurrent with version 2: rejected
    return table.state


BASE = _history()
HEADER = encode(CommitIntent(txn_id="x", table="t", operation=Operation.TRUNCATE, read_version=0))[:10]
VALID = [
    encode(
        CommitIntent(
            txn_id="v1",
            table="t",
            operation=Operation.INSERT_INTO,
            read_version=4,
            partitions=({"dt": "a"},),
            added_files=(DataFile(path="dt=a/v1-0.parquet", partition={"dt": "a"}, record_count=1, size_bytes=1),),
        )
    ),
    encode(
        CommitIntent(
            txn_id="v2",
            table="t",
            operation=Operation.MAJOR_COMPACT,
            read_version=4,
            partitions=({"dt": "a"},),
            added_files=(DataFile(path="dt=a/v2-0.parquet", partition={"dt": "a"}, record_count=1, size_bytes=1),),
            removed_files=tuple(sorted(BASE.partitions[("a",)].live)),
        )
    ),
]


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` with random byte edits: flips, truncation, insertion, deletion."""

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
            if not out:
                break
            at = draw(st.integers(0, len(out) - 1))
            if kind == "flip":
                out[at] ^= 1 << draw(st.integers(0, 7))
            elif kind == "set":
                out[at] = draw(st.integers(0, 255))
            elif kind == "cut":
                del out[at:]
            elif kind == "insert":
                out[at:at] = draw(st.binary(min_size=1, max_size=8))
            else:
                del out[at : at + draw(st.integers(1, 8))]
        return bytes(out)

    return build()


ANY_BYTES = st.one_of(
    st.binary(max_size=400),
    st.binary(max_size=400).map(lambda body: HEADER + body),
    st.sampled_from(VALID).flatmap(mutated),
)

# --------------------------------------------------------------------------- absurd but Avro-valid intents

NASTY_SEGMENTS = ["..", ".", "", "a", "dt=a", "x.parquet", "/", "\\", "C:", "s3a:", "%2e%2e", "\x00", "\u2025", "~"]
PATHS = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(NASTY_SEGMENTS), min_size=1, max_size=6).map("/".join),
    st.sampled_from(["/etc/passwd", "../other/x", "s3a://b/other/x", "file:///x", "dt=a/../../x", "dt=a/ok.parquet"]),
    # Names that follow the layout (schemas.paths): a fresh write id, spent ones, a wrong partition directory.
    st.sampled_from(["dt=a/w-0.parquet", "dt=a/w-1.parquet", "dt=b/x0-7.parquet", "dt=a/x2-0.parquet", "w-0.parquet"]),
)
SHORT_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["t", "a", "dt", "app", ""]))
SPECS = st.dictionaries(st.sampled_from(["dt", "p", "", "x" * 300]), SHORT_TEXT, max_size=2)


def _file(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "path": draw(PATHS),
        "partition": draw(SPECS),
        "record_count": draw(LONG),
        "size_bytes": draw(LONG),
        "min_key": draw(st.none() | SHORT_TEXT),
        "max_key": draw(st.none() | SHORT_TEXT),
    }


@st.composite
def raw_intents(draw: st.DrawFn) -> bytes:
    """An intent written by fastavro from a dict of absurd values: Avro-valid, never validated on the way."""
    record = {
        "txn_id": draw(st.one_of(SHORT_TEXT, st.sampled_from(["v1", "x" * 300]))),
        "table": draw(st.sampled_from(["t", "other", "", "T!", "../t"])),
        "operation": draw(st.sampled_from([op.value for op in Operation])),
        "read_version": draw(st.one_of(LONG, st.integers(-2, 8))),
        "partitions": draw(st.none() | st.lists(SPECS, max_size=3)),
        "added_files": [_file(draw) for _ in range(draw(st.integers(0, 3)))],
        "removed_files": draw(st.lists(st.one_of(PATHS, st.sampled_from(sorted(BASE.files))), max_size=3)),
        "metadata": draw(
            st.none()
            | st.fixed_dictionaries(
                {
                    "location": SHORT_TEXT,
                    "schema": SHORT_TEXT,
                    "primary_key": st.lists(SHORT_TEXT, max_size=2),
                    "partition_columns": st.lists(st.sampled_from(["dt", "dt", ""]), max_size=3),
                    "properties": st.dictionaries(
                        st.sampled_from(["ordo.conflict_policy", "k"]), st.sampled_from(["nope", "serializable", ""])
                    ),
                }
            )
        ),
        "app_id": draw(st.none() | SHORT_TEXT),
        "batch_id": draw(st.none() | LONG),
        "writer": draw(st.none() | SHORT_TEXT),
    }
    buffer = io.BytesIO()
    buffer.write(HEADER)
    fastavro.schemaless_writer(buffer, DEFAULT_CODEC.schema_of(CommitIntent), record)
    return buffer.getvalue()


# --------------------------------------------------------------------------- targets


@FUZZ
@given(ANY_BYTES)
def test_decode_returns_an_event_or_raises_codec_error(data: bytes) -> None:
    try:
        event = decode(data)
    except CodecError:
        return
    assert isinstance(event, (CommitIntent, CommitDecision))
    assert decode(encode(event)) == event


@FUZZ
@given(raw_intents())
def test_decode_of_absurd_avro_returns_a_valid_intent_or_raises_codec_error(data: bytes) -> None:
    try:
        event = decode(data)
    except CodecError:
        return
    assert isinstance(event, CommitIntent)


def check_decision(state: TableState, value: bytes | None, timestamp: int, offset: int) -> CommitDecision:
    """The properties every decision has, whatever the input."""
    before = state.chain
    decision = evaluate_record(state, value, timestamp, offset)
    assert isinstance(decision, CommitDecision)
    assert decision.intent_offset == offset and decision.table == state.table
    assert decision.prev_hash == before
    if decision.outcome is Outcome.REJECTED:
        assert decision.reason in Reason.ALL and decision.message
        assert decision.id_version is None
    else:
        assert decision.duplicate_of is not None or decision.id_version == state.head_version + 1
    data = encode(decision)
    assert decode(data) == decision
    apply(state, decision, data)
    assert state.last_intent_offset == offset
    return decision


@FUZZ
@given(ANY_BYTES, TIMESTAMPS)
def test_evaluate_record_never_raises_on_any_bytes(data: bytes, timestamp: int) -> None:
    check_decision(copy.deepcopy(BASE), data, timestamp, BASE.last_intent_offset + 1)


@FUZZ
@given(st.lists(raw_intents(), min_size=1, max_size=4), TIMESTAMPS)
def test_evaluate_record_never_raises_on_absurd_intents(records: list[bytes], timestamp: int) -> None:
    state = copy.deepcopy(BASE)
    for record in records:
        check_decision(state, record, timestamp, state.last_intent_offset + 1)


@FUZZ
@given(raw_intents())
def test_evaluate_record_on_a_table_not_created_yet(data: bytes) -> None:
    check_decision(new_state("t"), data, 1_000, 0)


def test_evaluate_record_of_none_and_empty_values() -> None:
    for value in (None, b"", HEADER):
        decision = check_decision(copy.deepcopy(BASE), value, 1, 99)
        assert decision.reason == Reason.MALFORMED_INTENT


@pytest.mark.parametrize(
    ("create", "timestamp"), [(False, 2**62), (False, 253_402_300_800_000), (True, -(2**62))], ids=str
)
def test_evaluate_record_with_an_out_of_range_record_timestamp(create: bool, timestamp: int) -> None:
    if create:
        intent = CommitIntent(txn_id="c", table="t", operation=Operation.CREATE_TABLE, read_version=0)
        intent = intent.model_copy(update={"metadata": BASE.metadata})
        decision = check_decision(new_state("t"), encode(intent), timestamp, 0)
    else:
        state = copy.deepcopy(BASE)
        decision = check_decision(state, VALID[0], timestamp, state.last_intent_offset + 1)
    assert decision.reason == Reason.MALFORMED_INTENT and "timestamp" in (decision.message or "")


# --------------------------------------------------------------------------- the path rule

LOCATIONS = ["/warehouse/t", "s3a://bucket/warehouse/t", "file:///data/t", "hdfs://nn:8020/w/t"]


@FUZZ
@given(st.one_of(PATHS, st.text(max_size=60)))
def test_an_accepted_path_stays_inside_the_table_location(path: str) -> None:
    if invalid_path_reason(path) is not None:
        return
    for location in LOCATIONS:
        _, sep, rest = location.partition("://")
        root = rest if sep else location
        if sep:  # keep the authority: only the path part may be normalized
            root_path = rest.partition("/")[2]
            root = "/" + root_path
        joined = posixpath.normpath(posixpath.join(root, path))
        assert joined.startswith(root.rstrip("/") + "/"), (location, path, joined)
        assert "\\" not in path and "\x00" not in path and not path.startswith("/")
        assert ":" not in path.split("/")[0], "a scheme or drive in the first segment"


@pytest.mark.parametrize(
    "path",
    [
        "../x",
        "a/../../x",
        "a/..",
        "/abs",
        "\\\\server\\share",
        "a\\..\\x",
        "s3a://bucket/x",
        "C:/x",
        "a//b",
        "./a",
        "a/.",
        "",
        "a\x00b",
        "..",
    ],
)
def test_paths_that_escape_or_are_ambiguous_are_refused(path: str) -> None:
    assert invalid_path_reason(path) is not None
