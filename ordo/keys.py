"""The arbiter's signing key and the keys readers trust: defined in ``kernel.keys`` (below arbiter, consumer and producer); this public path stays."""

from __future__ import annotations

from ordo.kernel.keys import (
    EMBEDDED_KEY_NAME,
    arbiter_signer,
    embedded_keys,
    reader_trust,
)

__all__ = [
    "EMBEDDED_KEY_NAME",
    "arbiter_signer",
    "embedded_keys",
    "reader_trust",
]
