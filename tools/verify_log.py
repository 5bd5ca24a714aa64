"""Verify an ordo decisions log without ordo: fastavro, cryptography and the standard library only.

The checks of docs/log-format.md, one verdict per record: framing and schema, signatures (a batch vouched for
through the hash chain), the chain from genesis and the log's invariants. Not the re-derivation of each
decision from the intents log (that needs ordo's core). Usage: python tools/verify_log.py LOG.json, a log in
the format of tests/vectors/*.json; exit status 0 when every record is ok (or an exact copy of one).
"""

import base64, hashlib, io, json, sys  # noqa: E401, I001
from pathlib import Path

import fastavro
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

HISTORY = Path(__file__).resolve().parents[1] / "ordo" / "schemas" / "avro" / "history"
FINGERPRINTS = {  # single-object fingerprint (hex, as on the wire) -> writer schema file, oldest release first
    "e5cf2e10da9e4f84": "CommitIntent.0.1.avsc", "e3593f0e4495ddf4": "CommitDecision.0.1.avsc",
    "1f8dbb77ab8eeaee": "CommitIntent.0.2.avsc", "1bc2be2642fa44b9": "CommitDecision.0.2.avsc",
    "8235c4f8ca62743d": "CommitIntent.0.3.avsc", "2813117929b86fb5": "CommitDecision.0.3.avsc",
    "ce1394934ddb6200": "CommitIntent.0.4.avsc", "890f1bacfd0b8293": "CommitDecision.0.4.avsc",
    "2efbb1b4137256c1": "CommitIntent.0.5.avsc", "51b1ba13e983e364": "CommitDecision.0.5.avsc",
    "acc68ae92138eaa1": "CommitIntent.0.6.avsc", "64d0f74c1af54dfa": "CommitDecision.0.6.avsc",
}  # fmt: skip
SCHEMAS = {fp: fastavro.parse_schema(json.loads((HISTORY / f).read_text())) for fp, f in FINGERPRINTS.items()}
CARRY_METADATA = {"CREATE_TABLE", "ALTER_TABLE", "ADD_CONSTRAINT", "DROP_CONSTRAINT"}  # the last two since 0.6
DATA_CHANGES = {"INSERT_INTO", "INSERT_OVERWRITE", "TRUNCATE", "UPDATE", "DELETE", "RESTORE"} | CARRY_METADATA  # fmt: skip


def sha(data):
    return hashlib.sha256(data).digest()


def decode(value):
    """The record read with its own writer schema (a decision has an intent_offset), or None if it cannot be."""
    fp, body = value[2:10].hex(), io.BytesIO(value[10:])
    try:
        record = fastavro.schemaless_reader(body, SCHEMAS[fp], None) if value[:2] == b"\xc3\x01" else None
    except Exception:
        return None
    return record if record and body.tell() == len(value) - 10 else None


def link(value):
    """The prev_hash a walk follows (ordo takes it without decoding where its schema allows: the same value)."""
    return (decode(value) or {}).get("prev_hash")


def signature(table, value, header, keys):
    """The ``ordo-sig`` header checked alone: valid, none, malformed, unknown_key or bad_signature."""
    if header is None or len(header) != 72 or header[:8] not in keys:
        return "none" if header is None else "malformed" if len(header) != 72 else "unknown_key"
    try:
        keys[header[:8]].verify(header[8:], b"ordo-decision-v1\0" + table.encode() + b"\0" + sha(value))
    except Exception:
        return "bad_signature"
    return "valid"


def authenticate(table, records, keys, required):
    """The records a valid signature vouches for, in chain order, and ``{offset: refusal}`` for the others."""
    refused = {r[0]: "unsigned:empty" for r in records if r[1] is None}
    if not required:  # the upgrade switch: every non-empty record, signatures not looked at
        return [r for r in records if r[1] is not None], refused
    anchor, pending, duplicates, authentic = bytes(32), {}, [], []  # pending: hash -> (record, prev_hash, barrier)
    for record in (r for r in records if r[1] is not None):
        held, digest = (record, link(record[1]), record[2] is not None), sha(record[1])
        if signature(table, record[1], record[2], keys) != "valid":  # held; a bad claim is a barrier to walks
            old = pending.setdefault(digest, held)
            if old is not held:  # the same bytes again: the copy without a false claim stays walkable
                pending[digest], extra = (held, old) if old[2] and not held[2] else (old, held)
                duplicates.append(extra)
            continue
        path, at = [held], held[1]
        while at is not None and at != anchor and at in pending and not pending[at][2]:
            path, at = [*path, pending[at]], pending[at][1]
        if at != anchor:
            refused[record[0]] = "unsigned:not_chained"
            continue
        refused.update({h[0][0]: "unsigned:not_vouched" for h in [*pending.values(), *duplicates] if h not in path})
        pending, duplicates, anchor, authentic = {}, [], digest, authentic + [h[0] for h in reversed(path)]
    refused.update({h[0][0]: "unsigned:no_signature" for h in [*pending.values(), *duplicates]})
    return authentic, refused


def fold(table, records):
    """``{offset: [problem, ...]}`` of the authentic records from genesis, re-synchronized on each record."""
    chain, last, version, time, meta, found = bytes(32), -1, -1, None, None, {}
    for offset, value, _ in records:
        d, p = decode(value), found.setdefault(offset, [])
        if d is None or "intent_offset" not in d:
            p.append("not_decision" if d else "undecodable")
            continue
        op, v, t, files = d["operation"], d["id_version"], d["time_version"], d["added_files"]
        if d["table"] != table or d["intent_offset"] <= last:
            p.append("wrong_table" if d["table"] != table else "repeated_intent" if d["intent_offset"] == last else "reordered")  # fmt: skip
        p[:0], chain = ["chain"] if d["prev_hash"] != chain else [], sha(value)
        # nothing more is checked of such a record (a wrong table's intent offset counts in another intents topic)
        if {"wrong_table", "repeated_intent", "reordered"} & set(p):
            continue
        last = d["intent_offset"]
        if d["outcome"] != "ACCEPTED" or d["duplicate_of"] is not None or op is None or v is None:
            p += ["incomplete"] if d["outcome"] == "ACCEPTED" and d["duplicate_of"] is None else []
            continue
        p += [name for name, broken in [
            ("second_create", op == "CREATE_TABLE" and meta is not None), ("no_create", op != "CREATE_TABLE" and meta is None),
            ("version_gap", v > version + 1), ("version_reused", v <= version),
            ("time_version", (op in DATA_CHANGES) != (t is not None) or (t is not None and time is not None and t <= time)),
            ("no_metadata", op in CARRY_METADATA and d["metadata"] is None),
            ("not_live", len(set(d["removed_files"])) != len(d["removed_files"])), ("already_live", len({f["path"] for f in files}) != len(files)),
            ("partition", meta is not None and any(set(f["partition"]) != set(meta["partition_columns"]) for f in files)),
        ] if broken]  # fmt: skip
        time, version = t if t is not None else time, v
        meta = d["metadata"] or meta  # any accepted commit that carries metadata sets it (writes: since 0.5)
    return found


def verify(log):
    """``[(offset, verdict, signature)]``; verdict: ok, copy (of an authentic record), unsigned:..., or problems."""
    b64 = lambda text: None if text is None else base64.b64decode(text)  # noqa: E731
    sig = lambda headers: next((b64(v) for n, v in headers or () if n == "ordo-sig"), None)  # noqa: E731
    records = [(r["offset"], b64(r["value"]), sig(r["headers"])) for r in log["records"]]
    keys = {sha(k.public_bytes(Encoding.Raw, PublicFormat.Raw))[:8]: k for k in map(load_pem_public_key, map(str.encode, log["public_keys"]))}  # fmt: skip
    authentic, refused = authenticate(log["table"], records, keys, log["require_signatures"])
    problems, known = fold(log["table"], authentic), {sha(r[1]) for r in authentic}
    copies = {o for o, v, _ in records if o in refused and v is not None and sha(v) in known}
    verdict = lambda o: "copy" if o in copies else refused.get(o) or "+".join(problems.get(o, [])) or "ok"  # noqa: E731
    return [(o, verdict(o), signature(log["table"], v or b"", h, keys)) for o, v, h in records]


if __name__ == "__main__":
    out = verify(json.loads(Path(sys.argv[1]).read_text()))
    print("\n".join(json.dumps({"offset": o, "verdict": v, "signature": s}) for o, v, s in out))
    sys.exit(0 if all(verdict in ("ok", "copy") for _, verdict, _ in out) else 1)
