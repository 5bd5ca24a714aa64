"""Every released writer schema of the events, kept so that every log ever written stays readable.

``ordo/schemas/avro/history/<Event>.<release>.avsc`` holds the writer schema of
``CommitIntent`` and ``CommitDecision`` as released in ``release``,
self-contained (named types inlined where first used, as in the parsing
canonical form). The codec registers all of them for reading: a record
written with any of them resolves against the current reader schema, fields
the writer lacked taking the reader's defaults. See docs/upgrading.md.

Release procedure (when a schema changed since the last release)::

    python -m ordo.schemas.release add 0.2     # copies the current schemas into history/

``tests/unit/test_schema_history.py`` fails while the current writer schema is
not in the history.
"""

from __future__ import annotations

import copy
import json
import re
import struct
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

AVRO_DIR = Path(__file__).parent / "avro"
HISTORY_DIR = AVRO_DIR / "history"
EVENTS = ("CommitIntent", "CommitDecision")
NAMED = ("Operation", "DataFile", "TableMetadata")  # the shared named types, in dependency order
NAMESPACE = "io.ordo.v1"
_FILE = re.compile(r"^(?P<event>[A-Za-z]+)\.(?P<release>\d+(?:\.\d+)*)\.avsc$")


def schema_fingerprint(schema: Any) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema as the single-object header holds it (big-endian, docs/log-format.md)."""
    parsed = fastavro.parse_schema(schema, named_schemas={}) if isinstance(schema, dict) else schema
    return struct.pack("<Q", int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16))


# Releases whose codec fingerprinted the canonical form with the shared named
# types (Operation, DataFile, TableMetadata) left as references instead of
# inlined: a change inside DataFile did not change the event's fingerprint.
# Since 0.2 the fingerprint covers the self-contained schema, as the Avro
# specification's canonical form does.
REFERENCE_FINGERPRINT_RELEASES = frozenset({"0.1"})


def wire_fingerprint(schema: dict[str, Any], release: str) -> bytes:
    """The fingerprint ``release``'s codec wrote in the header of records of ``schema`` (self-contained)."""
    if release not in REFERENCE_FINGERPRINT_RELEASES:
        return schema_fingerprint(schema)
    definitions: dict[str, Any] = {}

    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(item) for item in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        result = dict(node)
        if kind == "record":
            result["fields"] = [{**f, "type": strip(f["type"])} for f in node["fields"]]
        elif kind == "array":
            result["items"] = strip(node["items"])
        elif kind == "map":
            result["values"] = strip(node["values"])
        elif not isinstance(kind, str) or kind not in _PRIMITIVES + _COMPLEX:
            result["type"] = strip(kind)
        if kind in ("record", "enum") and node["name"].split(".")[-1] in NAMED and node is not schema:
            full = f"{node.get('namespace', NAMESPACE)}.{node['name'].split('.')[-1]}"
            definitions[full] = result
            return full
        return result

    stripped = strip(schema)
    named: dict[str, Any] = {}
    for name in NAMED:
        full = f"{NAMESPACE}.{name}"
        if full in definitions:
            fastavro.parse_schema(definitions[full], named_schemas=named)
    parsed = fastavro.parse_schema(stripped, named_schemas=named)
    return schema_fingerprint(parsed)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def current_schema(event: str) -> dict[str, Any]:
    """The current schema of ``event`` from ``ordo/schemas/avro``, self-contained (named types inlined)."""
    return inline_references(json.loads((AVRO_DIR / f"{event}.avsc").read_text()))


def inline_references(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each reference to a shared named type replaced by its current definition at first use."""
    definitions = {f"{NAMESPACE}.{name}": json.loads((AVRO_DIR / f"{name}.avsc").read_text()) for name in NAMED}
    seen: set[str] = set()

    def inline(node: Any) -> Any:
        if isinstance(node, str):
            full = node if "." in node else f"{NAMESPACE}.{node}"
            if full in definitions and full not in seen:
                return inline(copy.deepcopy(definitions[full]))
            return node
        if isinstance(node, list):
            return [inline(item) for item in node]
        if isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "enum", "fixed"):
                name = node["name"]
                seen.add(name if "." in name else f"{node.get('namespace', NAMESPACE)}.{name}")
            result = dict(node)
            if kind == "record":
                result["fields"] = [{**f, "type": inline(f["type"])} for f in node["fields"]]
            elif kind == "array":
                result["items"] = inline(node["items"])
            elif kind == "map":
                result["values"] = inline(node["values"])
            elif isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES + _COMPLEX):
                result["type"] = inline(kind)
            return result
        return node

    return inline(copy.deepcopy(schema))  # type: ignore[no-any-return]


_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_COMPLEX = ("record", "enum", "fixed", "array", "map")


def released_schemas() -> list[tuple[str, str, dict[str, Any]]]:
    """``(event, release, schema)`` for every schema file in the history, oldest release first."""
    found = []
    for path in HISTORY_DIR.glob("*.avsc"):
        match = _FILE.match(path.name)
        if match is None or match["event"] not in EVENTS:
            raise ValueError(f"{path}: not named <CommitIntent|CommitDecision>.<release>.avsc")
        found.append((match["event"], match["release"], json.loads(path.read_text())))
    return sorted(found, key=lambda item: (_release_key(item[1]), item[0]))


def add_release(release: str) -> list[Path]:
    """Copy the current schemas into the history as ``release``; skip an event whose schema is already there."""
    _release_key(release)  # a dotted number
    known = {(event, schema_fingerprint(schema)) for event, _, schema in released_schemas()}
    written = []
    for event in EVENTS:
        schema = current_schema(event)
        if (event, schema_fingerprint(schema)) in known:
            continue
        path = HISTORY_DIR / f"{event}.{release}.avsc"
        if path.exists():
            raise FileExistsError(f"{path} exists with another schema: a released schema is never rewritten")
        path.write_text(json.dumps(schema, indent=2) + "\n")
        written.append(path)
    return written


# --------------------------------------------------------------------------- resolution check


def resolution_problems(writer: Any, reader: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (Avro schema resolution); [] if it can.

    Both are self-contained schemas (JSON). Checked: record fields by name (a
    reader field the writer lacks needs a default), enum symbols (every writer
    symbol known to the reader, or a reader default), arrays, maps, unions
    (every writer branch matches a reader branch) and primitive promotions.
    """
    named_w: dict[str, Any] = {}
    named_r: dict[str, Any] = {}
    _collect(writer, named_w)
    _collect(reader, named_r)
    problems: list[str] = []
    _resolve(writer, reader, named_w, named_r, "", problems, set())
    return problems


_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def _collect(node: Any, named: dict[str, Any]) -> None:
    """Register every named type defined anywhere in ``node`` by its full name."""
    if isinstance(node, list):
        for item in node:
            _collect(item, named)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "enum", "fixed"):
            name = node["name"]
            named[name if "." in name else f"{node.get('namespace', NAMESPACE)}.{name}"] = node
        if kind == "record":
            for field in node["fields"]:
                _collect(field["type"], named)
        elif kind == "array":
            _collect(node["items"], named)
        elif kind == "map":
            _collect(node["values"], named)
        elif not isinstance(kind, str) or kind not in _PRIMITIVES + _COMPLEX:
            _collect(kind, named)


def _deref(node: Any, named: dict[str, Any]) -> Any:
    """``node`` with references to named types replaced by their definitions."""
    while isinstance(node, dict) and not (isinstance(node.get("type"), str) and node["type"] in _PRIMITIVES + _COMPLEX):
        node = node["type"]
    if isinstance(node, str) and node not in _PRIMITIVES:
        return named[node if "." in node else f"{NAMESPACE}.{node}"]
    return node


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, dict):
        return str(node["type"])
    return str(node)


def _matches(writer: Any, reader: Any) -> bool:
    w, r = _kind(writer), _kind(reader)
    if w == r:
        return w not in ("record", "enum", "fixed") or writer["name"].split(".")[-1] == reader["name"].split(".")[-1]
    return r in _PROMOTIONS.get(w, set())


def _resolve(
    writer: Any,
    reader: Any,
    named_w: dict[str, Any],
    named_r: dict[str, Any],
    where: str,
    out: list[str],
    done: set[str],
) -> None:
    writer = _deref(writer, named_w)
    reader = _deref(reader, named_r)
    w, r = _kind(writer), _kind(reader)
    at = where or "<root>"
    if w == "union" or r == "union":
        w_branches = [_deref(b, named_w) for b in (writer if w == "union" else [writer])]
        r_branches = [_deref(b, named_r) for b in (reader if r == "union" else [reader])]
        for branch in w_branches:
            target = next((rb for rb in r_branches if _matches(branch, rb)), None)
            if target is None:
                out.append(f"{at}: writer branch {_kind(branch)} has no match in the reader's union")
            else:
                _resolve(branch, target, named_w, named_r, where, out, done)
        return
    if not _matches(writer, reader):
        out.append(f"{at}: writer type {w} cannot be read as {r}")
        return
    if w == "record":
        key = f"{writer['name']}"
        if key in done:
            return
        done.add(key)
        writer_fields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            if field["name"] in writer_fields:
                _resolve(
                    writer_fields[field["name"]]["type"],
                    field["type"],
                    named_w,
                    named_r,
                    f"{where}.{field['name']}".lstrip("."),
                    out,
                    done,
                )
            elif "default" not in field:
                out.append(
                    f"{where}.{field['name']}".lstrip(".") + ": reader field missing in the writer has no default"
                )
    elif w == "enum":
        unknown = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if unknown and "default" not in reader:
            out.append(f"{at}: writer enum symbols {unknown} unknown to the reader, which has no default")
    elif w == "array":
        _resolve(writer["items"], reader["items"], named_w, named_r, f"{where}[]", out, done)
    elif w == "map":
        _resolve(writer["values"], reader["values"], named_w, named_r, f"{where}{{}}", out, done)
    elif w == "fixed" and writer["size"] != reader["size"]:
        out.append(f"{at}: fixed size {writer['size']} read as {reader['size']}")
