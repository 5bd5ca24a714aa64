"""The pure hot path, without Kafka: decode -> decide -> encode -> hash -> apply, per decision.

Workload as in figure 1 (INSERT_INTO intents with 4 files each, each into its
own partition, all accepted). Figures are CPU time (``time.process_time``),
the steadier measure on a shared machine, best of the interleaved repeats.

* ``pure path``: ``evaluate_record`` + ``encode`` + ``apply`` (what the
  arbiter's loop does per record, minus Kafka), vs the same fold with the
  reference codec (fastavro + pydantic ``model_validate``, as before the fast
  path): same core, so the ratio is the codec's share.
* ``decode intent``, ``encode decision``, ``decode decision``: the fast codec
  vs fastavro + pydantic, per record.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from bench.common import Result, interleave, machine, pick, ratio
from bench.workload import BASE_TS, TABLE, fold, insert_records

BENCHMARK = "pure hot path"


def _reference_codec() -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    """Decode (fastavro + model_validate) and encode (fastavro) as the codec did before its fast path."""
    import fastavro

    from ordo.schemas import CommitDecision, CommitIntent
    from ordo.schemas.codec import DEFAULT_CODEC, HEADER_LEN, _to_record

    by_fingerprint = DEFAULT_CODEC._by_fingerprint
    by_model = DEFAULT_CODEC._by_model

    def decode(data: bytes) -> Any:
        entry = by_fingerprint[data[2:HEADER_LEN]]
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_LEN)
        record = fastavro.schemaless_reader(buffer, entry.writer, entry.reader)
        return entry.model.model_validate(record)

    def encode(event: CommitIntent | CommitDecision) -> bytes:
        entry = by_model[type(event)]
        buffer = io.BytesIO()
        buffer.write(entry.header)
        fastavro.schemaless_writer(buffer, entry.writer, _to_record(event))
        return buffer.getvalue()

    return decode, encode


def _reference_fold(values: list[bytes]) -> None:
    from ordo.arbiter.core import apply, evaluate, new_state

    decode, encode = _reference_codec()
    state = new_state(TABLE)
    for offset, value in enumerate(values):
        decision = evaluate(state, decode(value), BASE_TS + offset, offset)
        apply(state, decision, encode(decision))


def _cpu(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def run() -> list[Result]:
    from ordo.schemas import decode, encode
    from ordo.schemas.codec import DEFAULT_CODEC

    n = pick(20_000, 100_000)
    repeats = pick(5, 7)
    values = [value for _, value in insert_records(n)]
    folded = fold(values)
    ref_decode, ref_encode = _reference_codec()
    decisions = folded.decisions
    encoded = folded.encoded
    fold(values[:2000], keep=False)  # warm-up
    _reference_fold(values[:2000])

    def per_record(fn: Callable[[], Any], count: int) -> Callable[[int], float]:
        return lambda _round: _cpu(fn) / count

    def each(fn: Callable[[Any], Any], items: list[Any]) -> Callable[[], None]:
        def loop() -> None:
            for item in items:
                fn(item)

        return loop

    read_intent = getattr(DEFAULT_CODEC, "read_intent", decode)  # (a codec without a fast path: decode)
    paths = interleave(
        {
            "fast": per_record(lambda: fold(values, keep=False), len(values)),
            "reference": per_record(lambda: _reference_fold(values), len(values)),
        },
        repeats,
    )
    sample = values[1 : min(len(values), 5001)]
    sample_decisions = decisions[1:5001]
    sample_encoded = encoded[1:5001]
    stages = {
        "decode intent": {
            "fast": per_record(each(read_intent, sample), len(sample)),
            "reference": per_record(each(ref_decode, sample), len(sample)),
        },
        "encode decision": {
            "fast": per_record(each(encode, sample_decisions), len(sample_decisions)),
            "reference": per_record(each(ref_encode, sample_decisions), len(sample_decisions)),
        },
        "decode decision": {
            "fast": per_record(each(decode, sample_encoded), len(sample_encoded)),
            "reference": per_record(each(ref_decode, sample_encoded), len(sample_encoded)),
        },
    }
    results = []
    best = min(paths["fast"])
    best_ref = min(paths["reference"])
    results.append(
        Result(
            BENCHMARK,
            "decisions per CPU-second (decode, decide, encode, hash, apply)",
            "decisions/s",
            round(1 / best),
            peer="same core, fastavro + pydantic codec",
            peer_value=round(1 / best_ref),
            ratio=ratio(best_ref, best),
            samples={
                "records": len(values),
                "repeats": repeats,
                "fast_us": [round(x * 1e6, 2) for x in paths["fast"]],
                "reference_us": [round(x * 1e6, 2) for x in paths["reference"]],
            },
            notes="CPU time, best of interleaved repeats; ratio = speed-up over the reference codec",
            machine=machine(),
        )
    )
    for name, sides in stages.items():
        runs = interleave(sides, repeats)
        fast, ref = min(runs["fast"]), min(runs["reference"])
        results.append(
            Result(
                BENCHMARK,
                f"{name}, µs per record (4 files)",
                "µs",
                round(fast * 1e6, 2),
                peer="fastavro + pydantic",
                peer_value=round(ref * 1e6, 2),
                ratio=ratio(fast, ref),
                samples={
                    "fast_us": [round(x * 1e6, 2) for x in runs["fast"]],
                    "reference_us": [round(x * 1e6, 2) for x in runs["reference"]],
                },
                notes="CPU time per record, best of interleaved repeats",
                machine=machine(),
            )
        )
    return results
