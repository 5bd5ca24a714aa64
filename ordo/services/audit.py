"""``ordo replay TABLE [--verify]``: audit a table's decisions log by re-deriving it from its intents log.

A decision is a pure function of the table state and the intent record (bytes,
offset, Kafka timestamp), so folding the intents log through the arbiter's core
(``arbiter.replay.replay``) must reproduce the decisions log record for record.
Anything else is reported with its decisions-log offset: a decision edited,
dropped, reordered, or injected by a producer that is not the arbiter, and
every break of the ``prev_hash`` chain.

``--verify`` is the audit mode. On top of the replay it checks the decisions
log on its own (useful where intents were lost) against the invariants every
reader of the log checks (``schemas.decisionlog``): every record is a decision
of this table, the chain is unbroken from the genesis hash, intent offsets only
grow, CREATE_TABLE comes first and once, ID versions are contiguous from 0, a
time version comes exactly with a data change and time versions strictly
increase, CREATE and ALTER carry metadata, added files name the partition
columns. It lists every problem found (not only the first) and prints the chain head,
the SHA-256 of the last decision record: it commits to the whole history, so
an auditor who writes it down can prove later that nothing before it changed.

With ``--verify`` every decision must also be vouched for by a signature of a
trusted key (``ORDO_TRUSTED_KEYS``, ``schemas.signing``): a forged, unsigned or
unknown-key record is an ``unsigned`` divergence at its offset.
``--allow-unsigned`` (``ORDO_REQUIRE_SIGNATURES=false``) accepts unsigned
records: an upgrade-time tool for a log written by a release without signing.

Exit status: 0 when everything matches, 1 on any divergence or chain break,
2 when the logs cannot be read (no such topics, broker unreachable) or no key
is trusted.

Topics are read with ``read_committed`` and ``assign()`` (no consumer group),
from the beginning to the end seen at start. Both topics are checked to exist
with a metadata request for all topics first (naming one makes Tansu create it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ordo.arbiter.replay import (
    DecisionRecord,
    Divergence,
    IntentRecord,
    ReplayReport,
    authenticate,
    replay,
    verify_log,
)
from ordo.kernel.errors import BrokerUnavailableError, OrdoError
from ordo.kernel.keys import reader_trust
from ordo.kernel.settings import Settings
from ordo.schemas import (
    CodecError,
    CommitDecision,
    Outcome,
    chain_hash,
    decisions_topic,
    decode,
    intents_topic,
    parse_topic,
)
from ordo.schemas.signing import SigningError, Trust, signature_of

EXIT_OK = 0
EXIT_DIVERGED = 1
EXIT_UNREADABLE = 2
READ_TIMEOUT = 60.0


class AuditReadError(OrdoError):
    """Raised when a table's intents or decisions topic cannot be read to its end."""


@dataclass
class AuditResult:
    """What ``audit`` found for one table."""

    table: str
    report: ReplayReport
    problems: list[Divergence] = field(default_factory=list)  # replay's divergences plus --verify's checks
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    head_version: int = -1
    chain_head: str | None = None
    verified_log: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing diverged and the chain is unbroken."""
        return not self.problems

    @property
    def first(self) -> Divergence | None:
        """The problem at the lowest decisions-log offset (the first divergence)."""
        located = [p for p in self.problems if p.decision_offset is not None]
        if located:
            return min(located, key=lambda p: p.decision_offset)  # type: ignore[arg-type,return-value]
        return self.problems[0] if self.problems else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        first = self.first
        return {
            "table": self.table,
            "ok": self.ok,
            "intents": self.report.intents,
            "decisions": self.report.decisions,
            "matched": self.report.matched,
            "pending": self.report.pending,
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "duplicates": self.duplicates,
            "head_version": self.head_version,
            "chain_head": self.chain_head,
            "verified_log": self.verified_log,
            "first_divergence": None if first is None else _divergence_dict(first),
            "problems": [_divergence_dict(p) for p in self.problems],
            "seconds": round(self.seconds, 3),
        }


def _divergence_dict(divergence: Divergence) -> dict[str, Any]:
    return {
        "kind": divergence.kind,
        "decision_offset": divergence.decision_offset,
        "intent_offset": divergence.intent_offset,
        "message": divergence.message,
    }


# --------------------------------------------------------------------------- reading


def read_partition(
    settings: Settings, topic: str, timeout: float = READ_TIMEOUT, *, signatures: dict[int, bytes] | None = None
) -> list[tuple[int, int, bytes | None]]:
    """Every record ``(offset, timestamp ms, value)`` of partition 0 of ``topic`` up to its end (read_committed).

    Offsets the fetch skipped are re-read (``kernel.logread``); a decisions
    topic's single-offset gaps after a record are its transaction markers.
    ``signatures``, when given, receives each record's ``ordo-sig`` header by offset.
    """
    from ordo.kernel.logread import LogReadError, read_to_end

    parsed = parse_topic(settings.topic_prefix, topic)
    config = settings.kafka_config(
        **{
            "group.id": f"{settings.topic_prefix}.audit",  # never joined: assign() only
            "client.id": f"{settings.topic_prefix}.audit",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
        }
    )
    records: list[tuple[int, int, bytes | None]] = []
    try:
        for message in read_to_end(
            config, topic, transactional=parsed is not None and parsed[1] == "decisions", timeout=timeout
        ):
            _, timestamp = message.timestamp()
            records.append((message.offset(), timestamp, message.value()))
            if signatures is not None:
                signature = signature_of(message.headers())
                if signature is not None:
                    signatures[message.offset()] = signature
    except LogReadError as exc:
        raise AuditReadError(str(exc)) from exc
    return records


def read_table_logs(
    settings: Settings, table: str, timeout: float = READ_TIMEOUT
) -> tuple[list[IntentRecord], list[DecisionRecord]]:
    """The intents and decisions logs of ``table`` as ``arbiter.replay`` records."""
    from confluent_kafka.admin import AdminClient

    from ordo.kernel.admin import existing_topics

    intents_name = intents_topic(settings.topic_prefix, table)
    decisions_name = decisions_topic(settings.topic_prefix, table)
    topics = existing_topics(
        AdminClient(settings.kafka_config(**{"client.id": f"{settings.topic_prefix}.audit.admin"})), timeout=timeout
    )
    missing = [name for name in (intents_name, decisions_name) if name not in topics]
    if missing:
        raise AuditReadError(
            f"table {table!r} has no {' and no '.join(missing)} topic (prefix {settings.topic_prefix!r}, "
            f"broker {settings.bootstrap_servers})"
        )
    intents = [IntentRecord(o, t, v) for o, t, v in read_partition(settings, intents_name, timeout)]
    signatures: dict[int, bytes] = {}
    records = read_partition(settings, decisions_name, timeout, signatures=signatures)
    decisions = [DecisionRecord(o, v, signatures.get(o)) for o, _, v in records]
    return intents, decisions


# --------------------------------------------------------------------------- checking


def audit(
    table: str,
    intents: list[IntentRecord],
    decisions: list[DecisionRecord],
    *,
    verify: bool = True,
    trust: Trust | None = None,
) -> AuditResult:
    """Replay ``intents`` and compare with ``decisions`` (and with ``verify``, check the log on its own). Pure.

    With ``trust``, only the decisions its keys vouch for are the log; every other record is an
    ``unsigned`` problem (a forged, unsigned or unknown-key decision).
    """
    began = time.monotonic()
    unsigned: list[Divergence] = []
    if trust is not None:
        decisions, unsigned = authenticate(table, decisions, trust)
    try:
        report = replay(table, intents, decisions)
    except Exception as exc:  # the core must never raise on a record; if it does, the audit fails, loudly
        report = ReplayReport(table, intents=len(intents), decisions=len(decisions))
        report.divergences.append(
            Divergence("undecodable", None, None, f"replay raised {type(exc).__name__}: {exc} (a bug in the core)")
        )
    result = AuditResult(table, report, problems=[*unsigned, *report.divergences])
    if verify:
        known = {(p.kind, p.decision_offset) for p in result.problems}
        for problem in verify_log(table, decisions):
            if (problem.kind, problem.decision_offset) not in known:
                result.problems.append(problem)
        result.verified_log = True
    for record in decisions:
        try:
            decision = decode(record.value) if record.value is not None else None
        except CodecError:
            continue
        if not isinstance(decision, CommitDecision):
            continue
        if decision.duplicate_of is not None:
            result.duplicates += 1
        elif decision.outcome is Outcome.ACCEPTED:
            result.accepted += 1
            result.head_version = max(result.head_version, decision.id_version or 0)
        else:
            result.rejected[decision.reason or "UNKNOWN"] += 1
    if decisions and decisions[-1].value is not None:
        result.chain_head = chain_hash(decisions[-1].value).hex()
    result.problems.sort(key=lambda p: (p.decision_offset is None, p.decision_offset or 0))
    result.seconds = time.monotonic() - began
    return result


# --------------------------------------------------------------------------- the command


def render(result: AuditResult, settings: Settings) -> str:
    """The human-readable report of ``ordo replay``."""
    report = result.report
    lines = [
        f"table {result.table} (prefix {settings.topic_prefix}): {report.intents} intent(s), "
        f"{report.decisions} decision(s) read (read_committed)",
        f"re-derived: {report.matched} matched, {report.pending} pending (not decided yet); "
        f"accepted {result.accepted} (head version {result.head_version}), rejected {sum(result.rejected.values())}"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(result.rejected.items()))})" if result.rejected else "")
        + f", repeated txn ids {result.duplicates}",
    ]
    if result.verified_log:
        forged = [p for p in result.problems if p.kind == "unsigned"]
        lines.append(
            "signatures: "
            + ("every decision vouched for by a trusted key" if not forged else f"{len(forged)} record(s) refused")
        )
    breaks = [p for p in result.problems if p.kind == "chain"]
    lines.append(
        f"hash chain: {'intact' if not breaks else f'{len(breaks)} break(s)'}"
        + (f", head {result.chain_head}" if result.chain_head else "")
    )
    if result.verified_log:
        lines.append(
            "log checks (--verify): chain from genesis, one table, intent order, CREATE first, ID and time versions, "
            "metadata, partitions"
        )
    shown = result.problems if result.verified_log else result.problems[:1]
    for problem in shown[:50]:
        at = f"decisions offset {problem.decision_offset}" if problem.decision_offset is not None else "end of log"
        intent = f" (intent offset {problem.intent_offset})" if problem.intent_offset is not None else ""
        lines.append(f"DIVERGENCE {problem.kind} at {at}{intent}: {problem.message}")
    if len(shown) > 50:
        lines.append(f"... and {len(shown) - 50} more")
    first = result.first
    if result.ok:
        lines.append("RESULT: OK, every decision is the one the arbiter's core derives from the intents log")
    else:
        where = first.decision_offset if first is not None else None
        lines.append(f"RESULT: FAILED, {len(result.problems)} problem(s); first divergence at decisions offset {where}")
    return "\n".join(lines)


def run_replay(
    settings: Settings,
    table: str,
    *,
    verify: bool = False,
    as_json: bool = False,
    timeout: float = READ_TIMEOUT,
    echo: Callable[[str], None] = print,
) -> int:
    """``ordo replay``: read, audit, print; returns the exit status (0 ok, 1 divergence, 2 unreadable)."""
    try:
        trust = reader_trust(settings) if verify else None  # fails closed before reading anything
        intents, decisions = read_table_logs(settings, table, timeout)
    except (AuditReadError, BrokerUnavailableError, SigningError) as exc:
        echo(json.dumps({"table": table, "ok": False, "error": str(exc)}) if as_json else f"error: {exc}")
        return EXIT_UNREADABLE
    result = audit(table, intents, decisions, verify=verify, trust=trust)
    echo(json.dumps(result.to_dict()) if as_json else render(result, settings))
    return EXIT_OK if result.ok else EXIT_DIVERGED


__all__ = [
    "EXIT_DIVERGED",
    "EXIT_OK",
    "EXIT_UNREADABLE",
    "AuditReadError",
    "AuditResult",
    "audit",
    "read_partition",
    "read_table_logs",
    "render",
    "run_replay",
    "verify_log",
]
