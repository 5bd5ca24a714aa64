"""The HTTP API's OpenAPI document is kept in the repository (docs/openapi.json) and equals what is served."""

from __future__ import annotations

import json
from pathlib import Path

from ordo.consumer import Catalog
from ordo.consumer.http import HttpServer, create_app, openapi_document

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_document_in_the_repository_is_current() -> None:
    kept = json.loads(DOCUMENT.read_text())
    assert kept == openapi_document(), "the API changed: run `python -m ordo.consumer.http > docs/openapi.json`"


def test_the_served_document_is_the_kept_one_and_names_its_errors(tmp_path: Path) -> None:
    import httpx

    server = HttpServer(create_app(Catalog(str(tmp_path / "c.db"))), "127.0.0.1", 0).start()
    try:
        served = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    finally:
        server.stop()
    assert served == json.loads(DOCUMENT.read_text())
    table = served["paths"]["/tables/{table}"]["get"]["responses"]
    assert table["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    ready = served["paths"]["/readyz"]["get"]["responses"]
    assert {"200", "503"} <= set(ready)
