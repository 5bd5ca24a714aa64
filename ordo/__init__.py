"""ordo: composition root — settings, CLI, embedded stack."""

__version__ = "0.4.0"
