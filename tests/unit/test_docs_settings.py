"""docs/api.md's settings table lists exactly the variables ``load_settings`` reads, with the model's defaults."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

from ordo.kernel.settings import BROKER_FETCH_WAITS, ENV_VARS, Settings

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"
NO_DEFAULT_CELL = {"state_dir", "arbiter_group", "log_level", "client_id"}  # computed defaults, described in words
WAITS = {  # unset: the broker's default, both given in the cell
    "fetch_wait_busy_ms": "busy",
    "fetch_wait_idle_ms": "idle",
    "client_fetch_wait_ms": "client",
    "consumer_fetch_wait_ms": "consumer",
}


def table() -> dict[str, str]:
    """``{variable: default cell}`` of the Configuration table."""
    section = API.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(ORDO_[A-Z_<>]+)` \| .* \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_the_table_lists_every_variable_and_its_default() -> None:
    rows = table()
    read = {key for _name, key, _cast in ENV_VARS}
    assert set(rows) - {"ORDO_KAFKA__<NAME>", "ORDO_KAFKA_CONFIG"} == read
    defaults = {f.name: f.default for f in fields(Settings)}
    for name, key, _cast in ENV_VARS:
        default = defaults[name]
        if name in WAITS:
            kafka, tansu = (getattr(BROKER_FETCH_WAITS[k], WAITS[name]) for k in ("kafka", "tansu"))
            assert rows[key] == f"Kafka `{kafka}`, Tansu `{tansu}`", (key, rows[key])
            continue
        if name in NO_DEFAULT_CELL or default is MISSING:
            continue
        expected = "none" if default in (None, "") else str(default).lower() if isinstance(default, bool) else default
        cell = rows[key]
        assert cell.startswith(f"`{expected}`") or (expected == "none" and cell.startswith("none")), (key, cell)
