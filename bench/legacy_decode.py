"""Reading a log of an older release: decode cost per record, old schema (reference path) vs current (fast path).

``PYTHONPATH=. .venv/bin/python -m bench.legacy_decode``: decodes every record
of the 0.1 golden log as logged, and the same events re-encoded with the
current schema; prints microseconds per record (best of 5). See docs/upgrading.md.
"""

from __future__ import annotations

import time

from ordo.schemas import decode, encode
from tests.unit.golden_log import all_records


def per_record(values: list[bytes], rounds: int = 300) -> float:
    """Best-of-5 microseconds to decode one of ``values``."""
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(rounds):
            for value in values:
                decode(value)
        best = min(best, (time.perf_counter() - began) / (rounds * len(values)))
    return best * 1e6


def main() -> None:
    """Print the figures."""
    logged = [(kind, r.value) for _, kind, r in all_records("0.1") if r.value and r.value[:2] == b"\xc3\x01"]
    for name, kinds in (("all records", ("intents", "decisions")), ("decisions", ("decisions",))):
        old = [value for kind, value in logged if kind in kinds]
        new = [encode(decode(value)) for value in old]
        slow, fast = per_record(old), per_record(new)
        print(
            f"{name}: {len(old)} records; 0.1 schema {slow:.1f} us, current {fast:.1f} us per record (x{slow / fast:.1f})"
        )


if __name__ == "__main__":
    main()
