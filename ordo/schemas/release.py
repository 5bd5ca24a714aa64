"""``python -m ordo.schemas.release``: add the current writer schemas to the released history, or list it.

    python -m ordo.schemas.release add 0.2    # copy the current CommitIntent/CommitDecision into ordo/schemas/avro/history
    python -m ordo.schemas.release list       # every released schema and the fingerprint its records carry

See docs/upgrading.md for the release procedure.
"""

from __future__ import annotations

import argparse

from ordo.schemas.history import add_release, released_schemas, wire_fingerprint


def main(argv: list[str] | None = None) -> None:
    """Run the command."""
    parser = argparse.ArgumentParser(prog="python -m ordo.schemas.release", description="the released schema history")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="copy the current writer schemas into ordo/schemas/avro/history as RELEASE")
    add.add_argument("release")
    sub.add_parser("list", help="list the released schemas and their fingerprints")
    args = parser.parse_args(argv)
    if args.command == "add":
        written = add_release(args.release)
        print("\n".join(f"wrote {p}" for p in written) or "the current schemas are already in the history")
    else:
        for event, release, schema in released_schemas():
            print(f"{release:8} {event:15} {wire_fingerprint(schema, release).hex()}")


if __name__ == "__main__":
    main()
