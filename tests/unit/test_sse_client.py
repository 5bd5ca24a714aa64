"""The change-feed SSE client (``consumer.httpclient``): honours the server's ``retry:`` and backs off.

A small real HTTP server stands in for a consumer whose stream ends at once (a consumer restarting, a proxy
cutting the connection): it announces ``retry: 100`` and closes. The client must reconnect after about
100 ms, then wait twice as long each time the connection brought no commit, and stop when idle.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ordo.consumer.httpclient import MAX_RETRY_SECONDS, HttpBackend, reconnect_delay


@pytest.fixture
def closing_stream() -> Iterator[tuple[str, list[float]]]:
    arrivals: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrivals.append(time.monotonic())
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


def test_reconnects_after_the_servers_retry_and_backs_off(closing_stream: tuple[str, list[float]]) -> None:
    url, arrivals = closing_stream
    started = time.monotonic()
    assert list(HttpBackend(url).subscribe("t", 0, 0.1, False, idle_timeout=2.5)) == []  # idle: the feed ends
    assert time.monotonic() - started < 6
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(gaps) >= 4, gaps
    assert 0.07 <= gaps[0] <= 0.35, f"the first reconnect waits the server's retry (100 ms), not more: {gaps}"
    for n, gap in enumerate(gaps[:4]):  # at least 100 ms doubled per reconnect, less the 20 % jitter
        assert gap >= 0.1 * 2**n * 0.8, f"reconnect {n + 1} came too early: {gaps}"
    assert gaps[3] > 2 * gaps[0], f"each reconnect without a commit waits longer: {gaps}"


def test_the_delay_is_capped_and_jittered() -> None:
    delays = [reconnect_delay(1000, n) for n in range(1, 12)]
    assert 0.8 <= delays[0] <= 1.0 and 1.6 <= delays[1] <= 2.0
    assert all(d <= MAX_RETRY_SECONDS for d in delays) and delays[-1] >= MAX_RETRY_SECONDS * 0.8
