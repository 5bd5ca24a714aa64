"""The change-feed SSE client (``consumer.httpclient``): honours the server's ``retry:`` and backs off.

A small real HTTP server stands in for a consumer whose stream ends at once (a consumer restarting, a proxy
cutting the connection): it announces ``retry: 100`` and closes. The client must reconnect after about
100 ms, then wait twice as long each time the connection brought no commit, and stop when idle.

The test reads the delays the client chose (``reconnect_delay`` wrapped, the real sleep still taken) and
checks the wall clock only from below (a reconnect comes no sooner than its delay): a gap between two
requests also holds a new connection and the server's turn, which a loaded machine stretches, so an upper
bound on it failed under load. The server answers at once and, as a loaded machine would, 300 ms late.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ordo.consumer import httpclient
from ordo.consumer.httpclient import DEFAULT_RETRY_MS, MAX_RETRY_SECONDS, HttpBackend, reconnect_delay


@pytest.fixture(params=[0.0, 0.3], ids=["prompt", "slow-server"])
def closing_stream(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[float]]]:
    arrivals: list[float] = []
    latency = float(request.param)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrivals.append(time.monotonic())
            time.sleep(latency)
            body = b"retry: 100\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", arrivals
    finally:
        server.shutdown()
        server.server_close()


def test_reconnects_after_the_servers_retry_and_backs_off(
    closing_stream: tuple[str, list[float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, arrivals = closing_stream
    chosen: list[tuple[int, int, float]] = []  # (retry_ms, failures in a row, seconds) of each reconnect

    def recorded(retry_ms: int, failures: int) -> float:
        delay = reconnect_delay(retry_ms, failures)
        chosen.append((retry_ms, failures, delay))
        return delay

    monkeypatch.setattr(httpclient, "reconnect_delay", recorded)
    started = time.monotonic()
    assert list(HttpBackend(url).subscribe("t", 0, 0.1, False, idle_timeout=2.5)) == []  # idle: the feed ends
    elapsed = time.monotonic() - started
    assert len(chosen) >= 3, chosen
    assert [c[:2] for c in chosen] == [(100, n) for n in range(1, len(chosen) + 1)], (
        f"each reconnect waits the server's retry (100 ms, not the default {DEFAULT_RETRY_MS}), "
        f"doubled per connection without a commit: {chosen}"
    )
    delays = [c[2] for c in chosen]
    for n, delay in enumerate(delays):  # 100 ms doubled per reconnect, less up to 20 % jitter
        assert 0.1 * 2**n * 0.8 <= delay <= 0.1 * 2**n, f"reconnect {n + 1}: {delays}"
    assert len(arrivals) == len(delays) + 1, "one request per reconnect"
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(gap >= delay for gap, delay in zip(gaps, delays, strict=True)), f"came too early: {gaps} {delays}"
    # it stops at the first connection that ends once idle: it slept only while not idle, and returns idle
    assert sum(delays[:-1]) < 2.5 <= elapsed, (delays, elapsed)


def test_the_delay_is_capped_and_jittered() -> None:
    delays = [reconnect_delay(1000, n) for n in range(1, 12)]
    assert 0.8 <= delays[0] <= 1.0 and 1.6 <= delays[1] <= 2.0
    assert all(d <= MAX_RETRY_SECONDS for d in delays) and delays[-1] >= MAX_RETRY_SECONDS * 0.8
