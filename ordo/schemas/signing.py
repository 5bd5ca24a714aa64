"""Signed decisions: who may write history, checked by every reader (part of the wire contract).

The hash chain (``prev_hash``) proves order, not authorship: anyone who can
produce to a decisions topic can append a record with a correct ``prev_hash``.
So the arbiter signs its decisions with an Ed25519 key, and every reader
accepts only what a trusted key vouches for.

Wire format. The signature rides in a Kafka record header, never in the Avro
record: the record bytes and the chain stay as they are, and readers of an
older release ignore headers. Header ``ordo-sig`` = 8-byte key id (the first 8
bytes of SHA-256 of the raw 32-byte public key) + the 64-byte Ed25519 signature
of ``b"ordo-decision-v1\\0" + table + b"\\0" + SHA-256(record bytes)``. The table
name (from the topic) is in the message, so a signed record copied to another
table's topic does not verify.

Batch signing. Signing costs ~47 us and verifying ~126 us, about the arbiter's
whole cost per decision, so the arbiter signs only the last decision of each
table in each of its Kafka transactions. Each record's bytes contain the hash of
the one before, so a signature on record n vouches for the whole chain up to n.
A reader (``ChainVerifier``) holds records as *pending* until a signed record
arrives, walks back from it through ``prev_hash`` to the last verified record,
releases the records on that path in log order and refuses every other pending
record. The trade: a reader cannot act on a decision before its batch's signed
record arrives (it is in the same transaction, so in practice in the same
fetch).

Imports ``cryptography`` (lazily) and nothing of ours outside ``schemas``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from ordo.schemas.decisionlog import GENESIS_HASH
from ordo.schemas.errors import SigningError

SIGNATURE_HEADER = "ordo-sig"
# A record written without a Kafka transaction (the arbiter's ``DirectSink``) carries when its writer took the
# table: 8 bytes big-endian, ns. The arbiters' business (which twin steps down); readers only learn from it that
# no transaction marker follows the record (``kernel.logread``). Not signed (docs/log-format.md).
EPOCH_HEADER = "ordo-epoch"
DOMAIN = b"ordo-decision-v1\0"
KEY_ID_LENGTH = 8
SIGNATURE_LENGTH = 64
# Pending records a reader holds at most while waiting for a signature. Far above the
# arbiter's batch cap (5000 decisions per transaction), so only a forger's flood reaches it.
DEFAULT_PENDING_LIMIT = 100_000

T = TypeVar("T")


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def key_id(public_raw: bytes) -> bytes:
    """The 8-byte id of a raw Ed25519 public key (first bytes of its SHA-256)."""
    return _sha256(public_raw)[:KEY_ID_LENGTH]


def signed_message(table: str, record: bytes) -> bytes:
    """The bytes the arbiter signs for ``record`` of ``table``'s decisions log."""
    return DOMAIN + table.encode() + b"\0" + _sha256(record)


def _public_raw(public: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


class Signer:
    """Signs decision records with one Ed25519 private key."""

    def __init__(self, private_key: Any) -> None:
        self._key = private_key
        self.public_raw = _public_raw(private_key.public_key())
        self.key_id = key_id(self.public_raw)

    @classmethod
    def generate(cls) -> Signer:
        """A signer with a fresh key (tests and benchmarks)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Signer:
        """Load a PEM (PKCS#8) Ed25519 private key written by ``ordo keygen``."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise SigningError(f"cannot read the arbiter's private key {path}: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"{path} is not an Ed25519 private key")
        return cls(key)

    def header(self, table: str, record: bytes) -> bytes:
        """The ``ordo-sig`` header value for ``record`` of ``table``: key id + signature."""
        return self.key_id + self._key.sign(signed_message(table, record))

    def public_pem(self) -> bytes:
        """The public key, PEM (SubjectPublicKeyInfo)."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self._key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def private_pem(self) -> bytes:
        """The private key, PEM (PKCS#8, unencrypted)."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self._key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )


def write_keypair(path: str | os.PathLike[str], *, overwrite: bool = False) -> Signer:
    """``ordo keygen``: a new private key at ``path`` (mode 0600) and its public key at ``path.pub``."""
    target = Path(path)
    public = Path(f"{target}.pub")
    if not overwrite and (target.exists() or public.exists()):
        raise SigningError(f"{target} or {public} exists already; not overwriting a key")
    signer = Signer.generate()
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(signer.private_pem())
    os.chmod(target, 0o600)
    public.write_bytes(signer.public_pem())
    return signer


def load_public_key(path: str | os.PathLike[str]) -> bytes:
    """The raw 32 bytes of a PEM Ed25519 public key file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise SigningError(f"cannot read trusted public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path} is not an Ed25519 public key")
    return _public_raw(key)


def public_key_files(spec: str) -> list[Path]:
    """The files named by ``ORDO_TRUSTED_KEYS``: comma-separated files or directories (each ``*.pub`` inside)."""
    files: list[Path] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        entry = Path(part)
        if entry.is_dir():
            files.extend(sorted(entry.glob("*.pub")))
        else:
            files.append(entry)
    return files


@dataclass(frozen=True)
class Trust:
    """The trusted public keys of a reader, and whether unsigned records are accepted at all."""

    keys: dict[bytes, Any] = field(default_factory=dict)  # key id -> Ed25519PublicKey
    required: bool = True

    @classmethod
    def of(cls, public_raw: Iterable[bytes], *, required: bool = True) -> Trust:
        """Trust the raw public keys ``public_raw``."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return cls({key_id(raw): Ed25519PublicKey.from_public_bytes(raw) for raw in public_raw}, required)

    @classmethod
    def from_spec(cls, spec: str, *, required: bool = True, extra: Iterable[bytes] = ()) -> Trust:
        """Trust the keys named by ``spec`` (``ORDO_TRUSTED_KEYS``) plus ``extra`` raw keys.

        Fails closed: with signatures required and no key at all, a reader could
        accept nothing, so that is a configuration error naming the settings.
        """
        raws = [load_public_key(path) for path in public_key_files(spec)] + list(extra)
        if spec.strip() and not raws:
            raise SigningError(f"ORDO_TRUSTED_KEYS={spec!r} names no public key file (*.pub)")
        if required and not raws:
            raise SigningError(
                "signed decisions are required but no key is trusted: set ORDO_TRUSTED_KEYS to the arbiter's "
                "public key file(s) (written by `ordo keygen`), or ORDO_REQUIRE_SIGNATURES=false to read a log "
                "written by a release without signing"
            )
        return cls.of(raws, required=required)

    def verify(self, table: str, record: bytes, header: bytes | None) -> str | None:
        """None when ``header`` is a valid signature of ``record`` by a trusted key, else why not."""
        if header is None:
            return "unsigned"
        if len(header) != KEY_ID_LENGTH + SIGNATURE_LENGTH:
            return f"malformed {SIGNATURE_HEADER} header ({len(header)} bytes)"
        key = self.keys.get(bytes(header[:KEY_ID_LENGTH]))
        if key is None:
            return f"signed by an unknown key (id {bytes(header[:KEY_ID_LENGTH]).hex()})"
        from cryptography.exceptions import InvalidSignature

        try:
            key.verify(bytes(header[KEY_ID_LENGTH:]), signed_message(table, record))
        except InvalidSignature:
            return f"bad signature (key id {bytes(header[:KEY_ID_LENGTH]).hex()})"
        return None


def signature_of(headers: Any) -> bytes | None:
    """The ``ordo-sig`` header of a Kafka message's ``headers()`` (a list of pairs or None)."""
    if not headers:
        return None
    for name, value in headers:
        if name == SIGNATURE_HEADER:
            return bytes(value) if value is not None else None
    return None


def epoch_of(headers: Any) -> int | None:
    """The ``ordo-epoch`` header of a Kafka message's ``headers()``, or None (absent or malformed)."""
    for name, value in headers or ():
        if name == EPOCH_HEADER:
            return int.from_bytes(value, "big") if value is not None and len(value) == 8 else None
    return None


def _current_decision_header() -> bytes:
    from ordo.schemas.codec import DEFAULT_CODEC
    from ordo.schemas.models import CommitDecision

    return bytes(DEFAULT_CODEC.header_of(CommitDecision))


_DECISION_HEADER: bytes | None = None


def prev_hash_of(record: bytes) -> bytes | None:
    """The ``prev_hash`` of a decision record, or None (not a decision, or no link).

    A current-schema decision ends with ``prev_hash``, ``restore_version`` and
    ``operation_metrics`` (0.5); when the last two are null and empty (every
    decision but a RESTORE's or a MERGE's) its last 36 bytes are ``02 40``, the
    32 bytes of the link, ``00 00``, and the link is read from them. Any other
    tail ends otherwise: a non-zero ``restore_version`` does not end in ``00``,
    zero puts ``40`` where ``02`` is looked for, and a metrics map could only
    end so with a last name of 32 bytes, which no metric an arbiter accepts has
    (``schemas.operations``). Everything else is decoded. Only records reached
    through a hash are ever walked, so a forged record that merely looks like
    this cannot misdirect a walk.
    """
    global _DECISION_HEADER
    if _DECISION_HEADER is None:
        _DECISION_HEADER = _current_decision_header()
    if len(record) > 46 and record[:10] == _DECISION_HEADER and record[-2:] == b"\x00\x00":
        if record[-36:-34] == b"\x02\x40":
            return bytes(record[-34:-2])
    from ordo.schemas.codec import decode
    from ordo.schemas.models import CommitDecision

    try:
        event = decode(record)
    except Exception:
        return None
    return event.prev_hash if isinstance(event, CommitDecision) else None


def links_to(record: bytes | None, previous: bytes | None) -> bool:
    """False only when decision ``record`` names a ``prev_hash`` that is not the hash of ``previous``.

    The hash chain of a decisions log links each decision to the one before it
    in the log, across transactions; a break between two records read in turn
    means a decision lies between them (or an aborted batch visible on Tansu,
    or a re-synchronized chain: a re-read tells). Records without a link
    (not decisions, or written before ``prev_hash`` existed) never break it.
    """
    if record is None or previous is None:
        return True
    link = prev_hash_of(record)
    return link is None or link == _sha256(previous)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record a reader will never act on: its log offset and why."""

    offset: int
    reason: str


@dataclass(slots=True)
class _Held(Generic[T]):
    offset: int
    prev: bytes | None
    item: T
    barrier: bool = False  # carries a signature that did not verify: a claim of an author not trusted here


class ChainVerifier(Generic[T]):
    """One table's reader-side check: releases only records a trusted signature vouches for.

    ``push`` every record of the decisions log in log order; it returns the
    items now known authentic (in log order) and the records refused. ``anchor``
    is the hash of the last record already verified (``GENESIS_HASH`` for a
    reader starting at the beginning of the log, None for one starting
    mid-log with nothing verified yet: the first signed record then vouches for
    the pending path behind it, wherever it starts). A signed record whose walk
    does not reach a known anchor is refused (a replayed copy, or a history
    signed by a key not trusted here). A record with a bad signature or an
    unknown key is treated as unsigned, and a later signature does not vouch
    for it: it claims an author this reader does not trust (a revoked key, or a
    key not added yet), so the walk stops there. At most ``pending_limit``
    records are held; beyond it the oldest is refused.

    With ``anchored`` False the anchor is never kept: every signed record
    vouches for the pending path behind it, wherever it starts. That is for a
    reader that needs authentic records, not an unbroken view of the chain (the
    commit client, whose answer is one record: a record its fetch lost cannot
    then hold back the ones after it).

    With ``trust.required`` False (an upgrade-time switch for logs written by a
    release without signing), every record is released at once.
    """

    def __init__(
        self,
        table: str,
        trust: Trust,
        *,
        anchor: bytes | None = GENESIS_HASH,
        pending_limit: int = DEFAULT_PENDING_LIMIT,
        anchored: bool = True,
    ) -> None:
        self.table = table
        self.trust = trust
        self.anchored = anchored
        self.anchor = anchor if anchored else None
        self.pending_limit = max(1, pending_limit)
        self.released = 0
        self.refused = 0
        self._pending: dict[bytes, _Held[T]] = {}  # by chain hash, in log order
        self._duplicates: list[_Held[T]] = []  # pending records whose bytes equal an earlier pending one

    @property
    def pending(self) -> int:
        """Records held, waiting for a signature."""
        return len(self._pending) + len(self._duplicates)

    def reset(self, anchor: bytes | None) -> list[Refusal]:
        """Start over from ``anchor`` (a checkpoint, a re-seek); the records held are dropped and returned."""
        dropped = [Refusal(h.offset, "dropped on reset") for h in self._all()]
        self._pending.clear()
        self._duplicates.clear()
        self.anchor = anchor
        return dropped

    def _all(self) -> list[_Held[T]]:
        return sorted([*self._pending.values(), *self._duplicates], key=lambda h: h.offset)

    def push(
        self, offset: int, record: bytes | None, signature: bytes | None, item: T
    ) -> tuple[list[T], list[Refusal]]:
        """Take the next record of the log; return ``(released items, refusals)``."""
        if record is None:
            return [], [self._refuse(offset, "empty record")]
        digest = _sha256(record)
        if not self.trust.required:
            self.anchor = digest if self.anchored else None
            self.released += 1
            return [item], []
        problem = self.trust.verify(self.table, record, signature) if signature is not None else "unsigned"
        if problem is not None:
            return [], self._hold(digest, _Held(offset, prev_hash_of(record), item, signature is not None))
        # Signed by a trusted key: walk back through the pending records to the anchor.
        path = [_Held(offset, prev_hash_of(record), item)]
        link = path[0].prev
        while link is not None and link != self.anchor and link in self._pending:
            held = self._pending[link]
            if held.barrier:
                break
            path.append(held)
            link = held.prev
        if self.anchor is not None and link != self.anchor:
            return [], [
                self._refuse(
                    offset,
                    "signed, but does not chain to the last verified record (a replayed copy, or history signed "
                    "by a key not trusted here)",
                )
            ]
        on_path = {id(h) for h in path}
        refusals = [
            self._refuse(h.offset, f"not vouched for by the signed record at offset {offset}")
            for h in self._all()
            if id(h) not in on_path
        ]
        self._pending.clear()
        self._duplicates.clear()
        if self.anchored:
            self.anchor = digest
        path.reverse()
        self.released += len(path)
        return [h.item for h in path], refusals

    def _hold(self, digest: bytes, held: _Held[T]) -> list[Refusal]:
        existing = self._pending.get(digest)
        if existing is None:
            self._pending[digest] = held
        elif existing.barrier and not held.barrier:  # the same bytes without a false claim: walk through them
            self._pending[digest] = held
            self._duplicates.append(existing)
        else:
            self._duplicates.append(held)
        refusals: list[Refusal] = []
        while self.pending > self.pending_limit:
            first = next(iter(self._pending), None)
            if self._duplicates and (first is None or self._duplicates[0].offset < self._pending[first].offset):
                victim = self._duplicates.pop(0)
            else:
                assert first is not None
                victim = self._pending.pop(first)
            refusals.append(self._refuse(victim.offset, f"no signature within {self.pending_limit} records"))
        return refusals

    def _refuse(self, offset: int, reason: str) -> Refusal:
        self.refused += 1
        return Refusal(offset, reason)

    def unvouched(self) -> list[Refusal]:
        """The records still pending, as refusals (an audit at the end of the log)."""
        return [Refusal(h.offset, "no signed record vouches for it") for h in self._all()]


__all__ = [
    "DEFAULT_PENDING_LIMIT",
    "EPOCH_HEADER",
    "SIGNATURE_HEADER",
    "ChainVerifier",
    "Refusal",
    "Signer",
    "SigningError",
    "Trust",
    "epoch_of",
    "key_id",
    "links_to",
    "load_public_key",
    "prev_hash_of",
    "signature_of",
    "signed_message",
    "write_keypair",
]
