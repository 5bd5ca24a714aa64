"""Each family of operations: its rules (``arbiter.rules.CHECKS``) and its fold (``arbiter.rules.FOLD``).

Importing this package registers every handler; ``arbiter.core`` does.
"""

from ordo.arbiter.ops import create, metadata, restore, rewrites, writes

__all__ = ["create", "metadata", "restore", "rewrites", "writes"]
