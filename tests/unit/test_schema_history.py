"""The wire contract across releases: every released schema is kept, registered and resolvable (docs/upgrading.md)."""

from __future__ import annotations

import copy
import json

import fastavro
import pytest

from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Rebase, decode
from ordo.schemas.codec import DEFAULT_CODEC, MAGIC, Codec
from ordo.schemas.history import (
    AVRO_DIR,
    EVENTS,
    HISTORY_DIR,
    current_schema,
    released_schemas,
    resolution_problems,
    schema_fingerprint,
    wire_fingerprint,
)

from .golden_log import RELEASES, all_records

MODELS = {"CommitIntent": CommitIntent, "CommitDecision": CommitDecision}
HISTORY = released_schemas()


@pytest.mark.parametrize("event", EVENTS)
def test_the_current_writer_schema_is_in_the_history(event: str) -> None:
    header = DEFAULT_CODEC.header_of(MODELS[event])
    released = {wire_fingerprint(schema, release): (release, schema) for e, release, schema in HISTORY if e == event}
    assert header[2:] in released, (
        f"the current {event} schema (fingerprint {header[2:].hex()}) is not in {HISTORY_DIR}: a schema change "
        f"must be released before anything writes it. Follow docs/upgrading.md (add fields only with defaults, "
        f"append enum symbols, never reorder, rename or remove), then run `python -m ordo.schemas.release add RELEASE`."
    )
    release, schema = released[header[2:]]
    assert schema_fingerprint(schema) == schema_fingerprint(current_schema(event)), release


def test_history_files_are_self_contained_and_each_release_distinct() -> None:
    assert {(e, r) for e, r, _ in HISTORY} >= {(e, "0.1") for e in EVENTS}
    seen: dict[bytes, str] = {}
    for event, release, schema in HISTORY:
        fastavro.parse_schema(schema, named_schemas={})  # no reference left to resolve
        assert (HISTORY_DIR / f"{event}.{release}.avsc").exists()
        fp = wire_fingerprint(schema, release)
        assert fp not in seen, f"{event} {release} has the fingerprint of {seen[fp]}"
        seen[fp] = f"{event} {release}"


@pytest.mark.parametrize(("event", "release"), [(e, r) for e, r, _ in HISTORY])
def test_every_released_schema_resolves_against_the_current_reader_schema(event: str, release: str) -> None:
    schema = next(s for e, r, s in HISTORY if (e, r) == (event, release))
    assert resolution_problems(schema, current_schema(event)) == []
    writer = fastavro.parse_schema(schema, named_schemas={})
    reader = DEFAULT_CODEC.schema_of(MODELS[event])
    from fastavro._read_py import match_schemas

    assert match_schemas(writer, reader, {})
    assert wire_fingerprint(schema, release) in DEFAULT_CODEC.releases


def _with(schema: dict, change) -> dict:  # type: ignore[no-untyped-def]
    changed = copy.deepcopy(schema)
    change(changed)
    return changed


def _data_file(schema: dict) -> dict:
    return schema["fields"][5]["type"]["items"]  # added_files: array of DataFile (inlined at first use)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s["fields"].append({"name": "x", "type": "long"}), "x: reader field missing in the writer"),
        (lambda s: _data_file(s)["fields"].append({"name": "y", "type": "int"}), "added_files[].y"),
        (lambda s: s["fields"][2]["type"]["symbols"].remove("CLUSTER"), "unknown to the reader"),
        (lambda s: s["fields"][0].update(type="long"), "txn_id: writer type string cannot be read as long"),
    ],
    ids=["field-without-default", "nested-field-without-default", "enum-symbol-removed", "type-changed"],
)
def test_the_resolution_check_finds_what_would_stop_a_reader(change, problem: str) -> None:  # type: ignore[no-untyped-def]
    writer = current_schema("CommitIntent")
    reader = _with(writer, change)
    problems = resolution_problems(writer, reader)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("release", RELEASES)
def test_every_record_of_a_golden_log_carries_its_release_fingerprint_and_decodes(release: str) -> None:
    decoded = 0
    for _, kind, record in all_records(release):
        value = record.value
        assert value is not None
        if value[:2] != MAGIC:
            continue  # the deliberately malformed intent
        assert DEFAULT_CODEC.releases.get(value[2:10]) == release, (kind, record.offset)
        event = decode(value)
        assert isinstance(event, CommitIntent if kind == "intents" else CommitDecision)
        assert all(f.bucket == 0 for f in event.added_files)  # a field 0.1 did not have: the reader default
        decoded += 1
    assert decoded > 20


def test_a_codec_without_the_history_cannot_read_a_0_1_record() -> None:
    """The history is what makes old logs readable (the test above can fail)."""
    from ordo.schemas import UnknownSchemaError

    _, _, record = next(iter(all_records("0.1")))
    assert record.value is not None
    with pytest.raises(UnknownSchemaError):
        Codec(history=False).decode(record.value)
    assert isinstance(Codec().decode(record.value), CommitIntent)


def _symbols(schema: dict, name: str) -> list[str]:
    if isinstance(schema, dict):
        if schema.get("type") == "enum" and schema.get("name") == name:
            return list(schema["symbols"])
        for value in schema.values():
            found = _symbols(value, name)
            if found:
                return found
    if isinstance(schema, list):
        for value in schema:
            found = _symbols(value, name)
            if found:
                return found
    return []


@pytest.mark.parametrize(
    ("enum", "event"),
    [(Operation, "CommitIntent"), (Outcome, "CommitDecision"), (Rebase, "CommitDecision")],
    ids=["Operation", "Outcome", "Rebase"],
)
def test_each_python_enum_lists_the_avsc_symbols_in_their_order(enum, event: str) -> None:  # type: ignore[no-untyped-def]
    """The fast codec writes a member's position as its Avro symbol index: the orders must be one."""
    symbols = _symbols(current_schema(event), enum.__name__)
    assert symbols, f"no enum {enum.__name__} in {event}"
    assert [member.value for member in enum] == symbols
    for _, release, schema in HISTORY:
        old = _symbols(schema, enum.__name__)
        assert symbols[: len(old)] == old, f"{enum.__name__} symbols of {release} were reordered or removed"


def test_the_bucket_field_is_appended_last_with_a_default() -> None:
    raw = json.loads((AVRO_DIR / "DataFile.avsc").read_text())
    assert raw["fields"][-1] == {
        "name": "bucket",
        "type": "int",
        "default": 0,
        "doc": "bucket of the primary-key hash this file belongs to (0 for unbucketed tables)",
    }
    assert list(DataFile.model_fields)[-1] == "bucket"
    assert DataFile(path="a.parquet", record_count=1, size_bytes=1).bucket == 0


def _records(schema: object, found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Field names of every record type defined in ``schema``, by record name."""
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            found.setdefault(schema["name"], [f["name"] for f in schema["fields"]])
        for value in schema.values():
            _records(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _records(value, found)
    return found


@pytest.mark.parametrize(("event", "release"), [(e, r) for e, r, _ in HISTORY])
def test_fields_are_only_ever_appended(event: str, release: str) -> None:
    """Never reorder, rename or remove: each released record's fields are a prefix of the current ones."""
    old = _records(next(s for e, r, s in HISTORY if (e, r) == (event, release)), {})
    now = _records(current_schema(event), {})
    for name, fields in old.items():
        assert now[name][: len(fields)] == fields, f"{name} fields of {release} changed: {fields} -> {now[name]}"


def test_the_release_command_copies_exactly_the_changed_schemas(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``python -m ordo.schemas.release add``: writes what changed since the last release, nothing twice, never overwrites."""
    import shutil

    from ordo.schemas import history
    from ordo.schemas.release import main

    releases = sorted({r for _, r, _ in HISTORY}, key=lambda r: tuple(map(int, r.split("."))))
    latest = releases[-1]
    for path in HISTORY_DIR.glob("*.avsc"):
        if not path.name.endswith(f".{latest}.avsc"):
            shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(history, "HISTORY_DIR", tmp_path)
    main(["add", latest])
    for event in EVENTS:
        assert json.loads((tmp_path / f"{event}.{latest}.avsc").read_text()) == json.loads(
            (HISTORY_DIR / f"{event}.{latest}.avsc").read_text()
        )
    main(["add", "99.0"])  # nothing changed since the latest release
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{e}.{r}.avsc" for e in EVENTS for r in releases)
