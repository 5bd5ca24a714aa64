"""The project's exception hierarchy.

It lives in ``schemas`` because every other package may import ``schemas`` and
``schemas`` imports nothing of ours. ``ordo.errors`` re-exports it.

A rejection is never an exception: the arbiter emits it as a decision. An
exception means bad input at an API edge, a bug, or an outage.
"""

from __future__ import annotations


class OrdoError(Exception):
    """Root of every error ordo raises on purpose."""


class CodecError(OrdoError):
    """Raised when bytes cannot be decoded as a known ordo event."""


class UnknownSchemaError(CodecError):
    """Raised when a message's schema fingerprint names no schema this build knows."""


class SigningError(OrdoError):
    """Raised when decision signing is misconfigured: no key where one is required, an unreadable or invalid key."""


class InvalidNameError(OrdoError, ValueError):
    """Raised when a table name or topic prefix does not match the allowed pattern."""
