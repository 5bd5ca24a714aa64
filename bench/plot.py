"""The commit-latency CDF drawn from ``bench/results.json``: ``docs/commit_latency_cdf.png``.

    .venv/bin/python -m bench.plot [results.json] [out.png]

Left: one writer in a closed loop (``bench.latency``): ordo's ``commit()`` to
decision, the raw produce->consume round trip at the broker's best and the same
hops as a commit through a transactional relay without ordo (the floor), on
each broker of the run (Tansu solid, Apache Kafka dashed). Right:
8 writers on their own partitions (``bench.peers``): a commit including its
Parquet file, for ordo, delta-rs and pyiceberg. ``python -m bench`` draws it
after writing the results; a figure whose samples are missing is left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import ROOT

RESULTS = ROOT / "bench" / "results.json"
OUT = ROOT / "docs" / "commit_latency_cdf.png"


def _entry(document: dict[str, Any], module: str) -> dict[str, Any] | None:
    for entry in document.get("benchmarks", []):
        if entry.get("module") == module and entry.get("figures"):
            return entry  # type: ignore[no-any-return]
    return None


def _samples(document: dict[str, Any], module: str) -> dict[str, Any] | None:
    entry = _entry(document, module)
    samples = entry["figures"][0].get("samples") if entry else None
    return samples if isinstance(samples, dict) else None


def _when(document: dict[str, Any], module: str) -> str:
    """When a panel's run was measured, and the machine's load then."""
    entry = _entry(document, module) or {}
    return f"{entry.get('measured_at', '?')}, load {entry.get('machine', {}).get('load_average', '?')}"


def curves(document: dict[str, Any]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(single-writer curves, 8-writer curves): label -> latencies in ms."""
    single: dict[str, list[float]] = {}
    entry = _entry(document, "bench.latency")
    runs = [f.get("samples", {}) for f in (entry or {}).get("figures", [])]
    runs = [r for r in runs if isinstance(r, dict) and "latency_samples_ms" in r]
    for samples in runs:
        broker = samples.get("broker", "tansu")
        name = "Tansu" if broker == "tansu" else "Kafka"
        tag = f" [{name}]" if len(runs) > 1 or broker != "tansu" else ""
        single[f"ordo commit(){tag}"] = samples["latency_samples_ms"]["ordo"]
        single[f"raw round trip{tag}"] = samples["latency_samples_ms"]["raw"]
        if "floor" in samples["latency_samples_ms"]:
            single[f"txn relay floor{tag}"] = samples["latency_samples_ms"]["floor"]
    writers: dict[str, list[float]] = {}
    peers = _samples(document, "bench.peers")
    for system in ("ordo", "delta-rs", "pyiceberg"):
        values = (peers or {}).get(system, {}).get("latency_samples_ms")
        if values:
            writers[system] = values
    return single, writers


def draw(results: Path = RESULTS, out: Path = OUT) -> Path | None:
    """Draw the CDF of ``results`` into ``out``; None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    document = json.loads(results.read_text())
    single, writers = curves(document)
    panels = [
        (f"{title}\n({_when(document, module)})", c)
        for title, module, c in (
            ("one writer, closed loop", "bench.latency", single),
            ("8 writers, own partitions", "bench.peers", writers),
        )
        if c
    ]
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for axis, (title, group) in zip(axes[0], panels, strict=True):
        for label, values in group.items():
            ordered = sorted(values)
            n = len(ordered)
            style = "--" if "[Kafka]" in label else "-"
            axis.step(ordered, [(i + 1) / n for i in range(n)], style, where="post", label=f"{label} (n={n})")
        axis.set_xscale("log")
        axis.set_xlabel("commit latency (ms, log scale)")
        axis.set_ylabel("fraction of commits")
        axis.set_title(title, fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    figure.suptitle("commit latency CDF", fontsize=10)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


if __name__ == "__main__":
    arguments = sys.argv[1:]
    written = draw(Path(arguments[0]) if arguments else RESULTS, Path(arguments[1]) if len(arguments) > 1 else OUT)
    print(f"wrote {written}" if written else "no latency samples in the results")
