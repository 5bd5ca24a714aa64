"""``kernel.observe``: the three endpoints the arbiter and the table service serve, over a real HTTP socket."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from ordo.kernel.observe import Health, ObservabilityServer, register_build_info


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_healthz_readyz_and_a_stall() -> None:
    registry = CollectorRegistry()
    register_build_info(registry, "arbiter")
    Counter("ordo_test_things", "things", registry=registry).inc(3)
    now = [100.0]
    health = Health("arbiter", stall_after=60.0)
    health._clock = lambda: now[0]
    health.beat()
    server = ObservabilityServer(registry, health, "127.0.0.1", 0).start()
    try:
        status, kind, body = get(f"{server.url}/metrics")
        assert status == 200 and kind.startswith("text/plain")
        assert "ordo_test_things_total 3.0" in body and 'ordo_build_info{process="arbiter",version="' in body
        assert get(f"{server.url}/readyz")[0] == 503
        now[0] += 3600  # not ready yet: a long start (a rebuild) is not a stall
        assert get(f"{server.url}/healthz")[0] == 200
        health.ready = True
        health.beat()
        status, _, body = get(f"{server.url}/readyz")
        assert status == 200 and json.loads(body) == {"ready": True}
        health.not_serving = {"t": "its transactions cannot be ended"}  # held work it cannot do: not ready
        status, _, body = get(f"{server.url}/readyz")
        assert status == 503 and json.loads(body) == {"ready": False, "not_serving": health.not_serving}
        health.not_serving = {}
        assert get(f"{server.url}/readyz")[0] == 200
        health.degraded = {"t": "left undecided until restart"}
        status, _, body = get(f"{server.url}/healthz")
        assert (
            status == 200
            and json.loads(body)["status"] == "degraded"
            and json.loads(body)["stopped"] == {"t": "left undecided until restart"}
        )
        now[0] += 61  # ready, and the loop stopped turning
        status, _, body = get(f"{server.url}/healthz")
        assert status == 503 and json.loads(body)["status"] == "stalled"
        assert get(f"{server.url}/nothing")[0] == 404
    finally:
        server.close()


def test_a_port_in_use_is_named() -> None:
    health = Health("compactor")
    first = ObservabilityServer(CollectorRegistry(), health, "127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=rf"compactor on 127.0.0.1:{first.port}"):
            ObservabilityServer(CollectorRegistry(), health, "127.0.0.1", first.port)
    finally:
        first.close()
