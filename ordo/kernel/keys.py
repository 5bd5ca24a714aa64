"""The arbiter's signing key and the readers' trusted keys, from settings (``schemas.signing`` does the crypto).

``ORDO_ARBITER_KEY`` names the arbiter's private key file, ``ORDO_TRUSTED_KEYS``
the public key files (or directories of ``*.pub`` files) every reader trusts,
``ORDO_REQUIRE_SIGNATURES`` (default true) whether unsigned decisions are
refused. The embedded stack (``ordo up``, the demo, the test fixtures) makes
and trusts a key of its own with ``embedded_keys``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ordo.kernel.settings import Settings
from ordo.schemas.signing import Signer, SigningError, Trust, write_keypair

EMBEDDED_KEY_NAME = "arbiter.key"


def arbiter_signer(settings: Settings) -> Signer | None:
    """The arbiter's signer; None only when signatures are not required and no key is set."""
    if settings.arbiter_key:
        return Signer.from_file(settings.arbiter_key)
    if settings.require_signatures:
        raise SigningError(
            "the arbiter signs every decision but has no key: set ORDO_ARBITER_KEY to a private key file "
            "(`ordo keygen PATH` writes one, and PATH.pub for ORDO_TRUSTED_KEYS), or ORDO_REQUIRE_SIGNATURES=false "
            "to run unsigned (upgrade only)"
        )
    return None


def reader_trust(settings: Settings, extra: Iterable[bytes] = ()) -> Trust:
    """The trust of a reader (consumer, commit client, audit, the arbiter's rebuild) from ``settings``."""
    return Trust.from_spec(settings.trusted_keys, required=settings.require_signatures, extra=extra)


def embedded_keys(settings: Settings, directory: str | os.PathLike[str]) -> Settings:
    """``settings`` with a key of the embedded stack: ``directory/arbiter.key`` (made on first use) and its trust.

    Keys the user configured are kept: this only fills what is unset.
    """
    if settings.arbiter_key and settings.trusted_keys:
        return settings
    path = Path(directory) / EMBEDDED_KEY_NAME
    if not path.exists():
        try:
            write_keypair(path)
        except SigningError:
            if not path.exists():
                raise  # a lone .pub: refuse to guess
    return settings.with_overrides(
        arbiter_key=settings.arbiter_key or str(path),
        trusted_keys=settings.trusted_keys or f"{path}.pub",
    )


__all__ = ["EMBEDDED_KEY_NAME", "arbiter_signer", "embedded_keys", "reader_trust"]
