"""Audit replay: re-derive every decision from the intents log and compare with the decisions log.

Pure (no Kafka): callers feed the records. Because a decision is a function of
the state and the intent record, replaying the intents log through the same
fold must reproduce the decisions log byte for byte. Anything else is a
divergence: a decision edited, dropped, reordered, or injected by a producer
that is not the arbiter. The hash chain (``prev_hash``) is checked on the log as
it stands, so a break is found even where the intents log is gone. Given the
trusted keys, ``authenticate`` first keeps only the records a signature vouches
for and reports every other one (``schemas.signing``).

Across releases: a decision logged with an older writer schema cannot equal
the bytes this version encodes (its header names another schema and the body
may lack newer fields). Such a record matches when it decodes (resolved
against the current schema) to the re-derived decision in every field its
schema has. The chain always runs over the logged bytes: the
re-derived decision is folded into the state with the record's own bytes, so
the next ``prev_hash`` is the one the logging arbiter wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ordo.arbiter.core import apply, evaluate_record, new_state
from ordo.schemas import CodecError, CommitDecision, chain_hash, decode
from ordo.schemas.codec import DEFAULT_CODEC
from ordo.schemas.decisionlog import BrokenLogError, LogHead, LogProblem, fold
from ordo.schemas.signing import ChainVerifier, Trust


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """One record of an intents topic as the arbiter saw it."""

    offset: int
    timestamp: int
    value: bytes | None


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One record of a decisions topic."""

    offset: int
    value: bytes | None
    signature: bytes | None = None  # the record's ``ordo-sig`` header (``schemas.signing``)


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place where the log differs from what the arbiter must have written."""

    kind: str  # "edited" | "dropped" | "injected" | "reordered" | "undecodable" | "chain" | "unsigned"
    decision_offset: int | None
    intent_offset: int | None
    message: str


@dataclass
class ReplayReport:
    """What an audit replay found."""

    table: str
    intents: int = 0
    decisions: int = 0
    matched: int = 0
    pending: int = 0  # intents at the tail of the log with no decision yet (the arbiter is behind)
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every decision matched and the chain is unbroken."""
        return not self.divergences


# How an audit names each broken invariant of the log (``schemas.decisionlog``).
DIVERGENCE_OF = {
    LogProblem.UNDECODABLE: "undecodable",
    LogProblem.NOT_DECISION: "injected",
    LogProblem.WRONG_TABLE: "injected",
    LogProblem.REPEATED_INTENT: "injected",
    LogProblem.REORDERED: "reordered",
    LogProblem.CHAIN: "chain",
    LogProblem.INCOMPLETE: "edited",
    LogProblem.NO_CREATE: "dropped",
    LogProblem.SECOND_CREATE: "injected",
    LogProblem.VERSION_GAP: "dropped",
    LogProblem.VERSION_REUSED: "injected",
    LogProblem.TIME_VERSION: "edited",
    LogProblem.NO_METADATA: "edited",
    LogProblem.PARTITION: "edited",
    LogProblem.NOT_LIVE: "edited",
    LogProblem.ALREADY_LIVE: "edited",
    LogProblem.LOST: "dropped",
}
_CHAIN_LEVEL = frozenset({LogProblem.UNDECODABLE, LogProblem.NOT_DECISION, LogProblem.CHAIN})


def divergence_of(error: BrokenLogError) -> Divergence:
    """The audit's report of a broken invariant."""
    return Divergence(DIVERGENCE_OF[error.kind], error.offset, error.intent_offset, error.message)


def verify_log(table: str, decisions: Iterable[DecisionRecord]) -> list[Divergence]:
    """Check a decisions log on its own against every invariant of ``schemas.decisionlog``; every problem, in log order."""
    folded = fold(LogHead(table), ((r.offset, r.value) for r in decisions), collect=True)
    return [divergence_of(problem) for problem in folded.problems]


def verify_chain(decisions: Iterable[DecisionRecord]) -> Iterator[Divergence]:
    """Check ``prev_hash`` links of a decisions log (and that each record is a decision); yield every break."""
    folded = fold(LogHead(""), ((r.offset, r.value) for r in decisions), collect=True)
    for problem in folded.problems:
        if problem.kind in _CHAIN_LEVEL:
            yield divergence_of(problem)


def authenticate(
    table: str, decisions: Iterable[DecisionRecord], trust: Trust
) -> tuple[list[DecisionRecord], list[Divergence]]:
    """Split a decisions log into the records a trusted signature vouches for and the refused ones.

    Returns the authentic records in log order and an ``unsigned`` divergence
    for every refused record, except exact repeats of an authentic record (on
    Tansu an aborted transaction stays visible, and the arbiter re-decides its
    intents to the same bytes: readers refuse the copies, nothing acts on them).
    """
    log = list(decisions)
    verifier: ChainVerifier[DecisionRecord] = ChainVerifier(table, trust)
    authentic: list[DecisionRecord] = []
    refusals = []
    for record in log:
        released, refused = verifier.push(record.offset, record.value, record.signature, record)
        authentic.extend(released)
        refusals.extend(refused)
    refusals.extend(verifier.unvouched())
    known = {chain_hash(r.value) for r in authentic if r.value is not None}
    by_offset = {r.offset: r for r in log}
    problems = []
    for refusal in sorted(refusals, key=lambda r: r.offset):
        value = by_offset[refusal.offset].value
        if value is not None and chain_hash(value) in known:
            continue
        problems.append(
            Divergence("unsigned", refusal.offset, _intent_offset(value), f"not authentic: {refusal.reason}")
        )
    return authentic, problems


def _intent_offset(value: bytes | None) -> int | None:
    try:
        decision = decode(value) if value is not None else None
    except CodecError:
        return None
    return decision.intent_offset if isinstance(decision, CommitDecision) else None


def replay(table: str, intents: Iterable[IntentRecord], decisions: Iterable[DecisionRecord]) -> ReplayReport:
    """Re-derive ``table``'s decisions from its intents and compare them with the log, record by record."""
    report = ReplayReport(table)
    log = list(decisions)
    report.decisions = len(log)
    report.divergences.extend(verify_chain(log))
    by_intent: dict[int, int] = {}
    seen: dict[int, int] = {}
    for position, record in enumerate(log):
        try:
            decision = decode(record.value) if record.value is not None else None
        except CodecError:
            decision = None
        if isinstance(decision, CommitDecision):
            by_intent.setdefault(decision.intent_offset, position)
            seen[decision.intent_offset] = seen.get(decision.intent_offset, 0) + 1
    state = new_state(table)
    position = 0
    for intent in intents:
        report.intents += 1
        expected = evaluate_record(state, intent.value, intent.timestamp, intent.offset)
        expected_bytes = _encode(expected)
        if position >= len(log):
            apply(state, expected, expected_bytes)
            report.pending += 1
            continue
        actual = log[position]
        if actual.value == expected_bytes or _same_in_older_schema(actual.value, expected):
            apply(state, expected, actual.value)  # the chain continues over the logged bytes
            report.matched += 1
            position += 1
            continue
        report.divergences.append(_classify(intent.offset, actual, expected_bytes, by_intent, seen, position))
        return report
    for leftover in log[position:]:
        report.divergences.append(
            Divergence("injected", leftover.offset, None, "a decision with no intent left to answer")
        )
        break
    return report


def _same_in_older_schema(logged: bytes | None, expected: CommitDecision) -> bool:
    """True when ``logged`` was written with an older schema and says exactly what ``expected`` says.

    Compared: every field the logged record's schema has. A field added since
    is not in the logged bytes, so there is nothing of it to compare (a
    decision field the older arbiter could not write, e.g. one computed from
    this arbiter's configuration, must not fail an old log).
    """
    if logged is None or DEFAULT_CODEC.is_current(logged):
        return False  # the current schema: only identical bytes match
    try:
        found = decode(logged)
        fields = DEFAULT_CODEC.writer_fields(logged)
    except CodecError:
        return False
    if not isinstance(found, CommitDecision):
        return False
    return all(getattr(found, name) == getattr(expected, name) for name in fields if name in _DECISION_FIELDS)


_DECISION_FIELDS = frozenset(CommitDecision.model_fields)


def _encode(decision: CommitDecision) -> bytes:
    from ordo.schemas import encode

    return encode(decision)


def _classify(
    intent_offset: int,
    actual: DecisionRecord,
    expected: bytes,
    by_intent: dict[int, int],
    seen: dict[int, int],
    position: int,
) -> Divergence:
    try:
        found = decode(actual.value) if actual.value is not None else None
    except CodecError:
        found = None
    if not isinstance(found, CommitDecision):
        return Divergence(
            "undecodable", actual.offset, intent_offset, "the decisions log holds a record that is not a decision"
        )
    if found.intent_offset == intent_offset:
        want = decode(expected)
        fields = [name for name in type(found).model_fields if getattr(found, name) != getattr(want, name)]
        return Divergence(
            "edited",
            actual.offset,
            intent_offset,
            f"decision for intent offset {intent_offset} differs from the re-derived one in: {', '.join(fields)}",
        )
    if seen.get(found.intent_offset, 0) > 1:
        return Divergence(
            "injected",
            actual.offset,
            intent_offset,
            f"a second decision for intent offset {found.intent_offset} appears where {intent_offset} was due",
        )
    later = by_intent.get(intent_offset)
    if later is not None and later > position:
        return Divergence(
            "reordered" if found.intent_offset > intent_offset else "injected",
            actual.offset,
            intent_offset,
            f"expected the decision for intent offset {intent_offset}, found one for {found.intent_offset}",
        )
    if found.intent_offset > intent_offset:
        return Divergence("dropped", actual.offset, intent_offset, f"no decision for intent offset {intent_offset}")
    return Divergence(
        "injected",
        actual.offset,
        intent_offset,
        f"decision for intent offset {found.intent_offset} appears where {intent_offset} was due",
    )
