"""Schemathesis against the consumer's HTTP API: generated requests for every operation of the OpenAPI document.

The service is real (uvicorn on loopback) over a real SQLite catalog holding a table ``t``. Every answer must
be no server error, a status the document declares, with the declared content type and body schema. The change
stream of an existing table never ends, so that operation is exercised on unknown tables only (its 404); the
other operations on a table get the real table ``t`` in half the cases (their 200 bodies checked) and a
generated name otherwise.

Not checked: that every schema-valid request is accepted. A few parameters are strings whose valid form the
document cannot state (``start``/``end`` are versions or timestamps depending on ``by``; ``groups`` is JSON);
the service answers those with a declared 400 and an ``ErrorBody`` naming the problem.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from ordo.consumer import Catalog
from ordo.consumer.http import HttpServer, create_app
from ordo.consumer.materializer import ConsumerStatus
from tests.profiles import examples

from .test_catalog import build
from .test_catalog_model import Script

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"  # the contract kept in the repository
schema = schemathesis.openapi.from_path(str(DOCUMENT))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("api") / "c.db"
    build(path, Script(seed=31).run(12))
    status = ConsumerStatus()
    status.ready = True  # a caught-up consumer (the 503 of one catching up is tested in test_catalog_http)
    server = HttpServer(create_app(Catalog(path), status), "127.0.0.1", 0).start()
    try:
        yield server.url
    finally:
        server.stop()


@schema.parametrize()
@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_the_contract(case: schemathesis.Case, service: str) -> None:
    if case.path.endswith("/changes/stream"):
        case.path_parameters = {"table": "no-such-table"}  # a stream of a real table never ends
    elif case.path_parameters and len(str(case.path_parameters.get("table", ""))) % 2 == 0:
        case.path_parameters = {**case.path_parameters, "table": "t"}  # half the cases read the real table
    case.call_and_validate(base_url=service, timeout=10, excluded_checks=[positive_data_acceptance])
