"""The log-format test vectors (``tests/vectors/*.json``, docs/log-format.md) and ordo's own verdict on each record.

A vector is one decisions log in JSON: ``table``, ``topic``, ``require_signatures``, ``public_keys`` (PEM),
``records`` (the decisions topic, one object per Kafka record as in the golden logs: ``offset``,
``timestamp``, ``timestamp_type``, ``key``, ``headers``, ``value``; bytes in base64), ``intents`` (the
intents topic the decisions answer, same format) and ``expected``: per record its ``verdict`` and
``signature`` (the ``ordo-sig`` header checked alone). ``ordo_verdicts`` computes both with the functions
behind ``ordo replay --verify`` (``arbiter.replay.authenticate``, ``schemas.decisionlog.fold``,
``schemas.signing.Trust``); ``tools/verify_log.py`` computes them without ordo.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ordo.arbiter.replay import DecisionRecord, IntentRecord, authenticate
from ordo.schemas.decisionlog import LogHead, fold
from ordo.schemas.signing import Trust, signature_of

from .golden_log import log_dir, trusted_key

VECTORS_DIR = Path(__file__).resolve().parents[1] / "vectors"
# What a refusal of ``schemas.signing.ChainVerifier`` says, and the verdict the spec names it by.
REFUSALS = (
    ("empty record", "empty"),
    ("signed, but does not chain", "not_chained"),
    ("not vouched for by the signed record", "not_vouched"),
    ("no signed record vouches for it", "no_signature"),
)
# What ``Trust.verify`` says of a header, and the name the spec gives it.
SIGNATURES = (
    ("unsigned", "none"),
    ("malformed", "malformed"),
    ("signed by an unknown key", "unknown_key"),
    ("bad signature", "bad_signature"),
)


def vector_paths() -> list[Path]:
    """Every vector file, by name."""
    return sorted(VECTORS_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    """One vector."""
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def decision_records(log: dict[str, Any]) -> list[DecisionRecord]:
    """The decisions of ``log`` with the ``ordo-sig`` header a Kafka reader takes (``signature_of``)."""
    return [
        DecisionRecord(
            r["offset"],
            _bytes(r["value"]),
            signature_of(None if r["headers"] is None else [(n, _bytes(v)) for n, v in r["headers"]]),
        )
        for r in log["records"]
    ]


def intent_records(log: dict[str, Any]) -> list[IntentRecord]:
    """The intents ``log``'s decisions answer."""
    return [IntentRecord(r["offset"], r["timestamp"], _bytes(r["value"])) for r in log.get("intents", ())]


def trust(log: dict[str, Any]) -> Trust:
    """The trust of ``ordo replay --verify`` for ``log``: its public keys; ``--allow-unsigned`` unless required."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

    raws = [
        load_pem_public_key(pem.encode()).public_bytes(Encoding.Raw, PublicFormat.Raw) for pem in log["public_keys"]
    ]
    return Trust.of(raws, required=log["require_signatures"])


def _named(text: str, names: tuple[tuple[str, str], ...]) -> str:
    found = [name for prefix, name in names if text.startswith(prefix)]
    assert len(found) == 1, f"no name for {text!r}"
    return found[0]


def ordo_verdicts(log: dict[str, Any]) -> list[tuple[int, str, str]]:
    """``(offset, verdict, signature)`` of every record, by ordo's own functions (the spec's vocabulary)."""
    table, records, checker = log["table"], decision_records(log), trust(log)
    authentic, unsigned = authenticate(table, records, checker)
    refused = {
        d.decision_offset: "unsigned:" + _named(d.message.removeprefix("not authentic: "), REFUSALS) for d in unsigned
    }
    problems: dict[int, list[str]] = {}
    for problem in fold(LogHead(table), ((r.offset, r.value) for r in authentic), collect=True).problems:
        assert problem.offset is not None
        problems.setdefault(problem.offset, []).append(problem.kind.value)
    released = {r.offset for r in authentic}
    verdicts = []
    for record in records:
        if record.offset in refused:
            verdict = refused[record.offset]
        elif record.offset not in released:
            verdict = (
                "copy"  # refused by the verifier, not counted by the audit: an exact repeat of an authentic record
            )
        else:
            verdict = "+".join(problems.get(record.offset, [])) or "ok"
        why = checker.verify(table, record.value or b"", record.signature)
        verdicts.append((record.offset, verdict, "valid" if why is None else _named(why, SIGNATURES)))
    return verdicts


def golden_log(release: str, table: str) -> dict[str, Any]:
    """``table``'s decisions (and intents) of ``release``'s golden log in the vectors' format."""
    lines = {
        kind: [
            json.loads(s) for s in (log_dir(release) / f"{table}.{kind}.jsonl").read_text().splitlines() if s.strip()
        ]
        for kind in ("decisions", "intents")
    }
    key = trusted_key(release)
    return {
        "table": table,
        "require_signatures": key is not None,
        "public_keys": [] if key is None else [key.read_text()],
        "records": lines["decisions"],
        "intents": lines["intents"],
    }
