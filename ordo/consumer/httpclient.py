"""The ``Catalog`` backend that talks to the consumer's HTTP service (httpx).

Returns the same models and raises the same errors as the SQLite backend: a
404 body names the exception class (``TableNotFoundError`` or
``VersionNotFoundError``), which is raised again here.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

from ordo.consumer.errors import CatalogError, CatalogUnavailableError, TableBrokenError
from ordo.consumer.groups import groups_to_json
from ordo.consumer.models import Commit, DecisionRecord, Snapshot, TableInfo
from ordo.kernel.errors import TableNotFoundError, VersionNotFoundError

_ERRORS: dict[str, type[Exception]] = {
    "TableNotFoundError": TableNotFoundError,
    "VersionNotFoundError": VersionNotFoundError,
    "CatalogUnavailableError": CatalogUnavailableError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def _bound(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


class HttpBackend:
    """Catalog reads over HTTP (``http://host:port`` of ``ordo consumer``)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()

    def _client(self) -> Any:
        import httpx

        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(base_url=self.url, timeout=self.timeout)
        return client

    def close(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None

    def _get(self, path: str, **params: Any) -> Any:
        import httpx

        query = {k: v for k, v in params.items() if v is not None}
        try:
            response = self._client().get(path, params=query)
        except httpx.TransportError as exc:
            raise CatalogUnavailableError(f"catalog service {self.url} unreachable: {exc}") from exc
        if response.status_code == 200:
            return response.json()
        raise _error(response)

    # -- API -------------------------------------------------------------------------------

    def tables(self) -> list[TableInfo]:
        return [TableInfo.from_dict(t) for t in self._get("/tables")["tables"]]

    def table(self, name: str) -> TableInfo:
        return TableInfo.from_dict(self._get(f"/tables/{name}"))

    def snapshot(self, name: str, version: int | None, timestamp: Any, groups: Any = None) -> Snapshot:
        chosen = None if groups is None else groups_to_json(groups)
        return Snapshot.from_dict(
            self._get(f"/tables/{name}/snapshot", version=version, timestamp=_bound(timestamp), groups=chosen)
        )

    def history(
        self, name: str, limit: int | None, accepted_only: bool, before: int | None = None
    ) -> list[DecisionRecord]:
        found = self._get(
            f"/tables/{name}/history",
            limit=limit,
            accepted_only=str(accepted_only).lower(),
            cursor=None if before is None else str(before),
        )
        return [DecisionRecord.from_dict(d) for d in found["decisions"]]

    def commits(
        self, name: str, start: Any, end: Any, by: str, include_rewrites: bool, limit: int | None = None
    ) -> list[Commit]:
        data = self._get(
            f"/tables/{name}/commits",
            start=_bound(start),
            end=_bound(end),
            by=by,
            include_rewrites=str(include_rewrites).lower(),
            limit=limit,
        )
        return [Commit.from_dict(c) for c in data["commits"]]

    def health(self) -> dict[str, Any]:
        data = self._get("/healthz")
        return {"tables": data.get("tables", {}), "broken": data.get("broken", {})}

    def subscribe(
        self, name: str, from_version: int, poll_interval: float, include_rewrites: bool, idle_timeout: float | None
    ) -> Iterator[Commit]:
        return self._sse(name, from_version, include_rewrites, idle_timeout)

    def _sse(self, name: str, cursor: int, include_rewrites: bool, idle_timeout: float | None) -> Iterator[Commit]:
        """Follow the SSE stream (parsed by httpx-sse); when it ends or drops, reconnect from the cursor.

        Reconnects wait the server's ``retry:`` (milliseconds; ``DEFAULT_RETRY_MS`` until the server says),
        doubled after each connection that brought no commit, up to ``MAX_RETRY_SECONDS``, less up to 20 %
        jitter (many subscribers of a restarted consumer do not come back at once); a commit resets it.
        """
        import httpx
        from httpx_sse import EventSource, SSEError

        last_progress = time.monotonic()
        retry_ms, failures = DEFAULT_RETRY_MS, 0

        def idle() -> bool:
            return idle_timeout is not None and time.monotonic() - last_progress >= idle_timeout

        while True:
            params: dict[str, str | int] = {"from_version": cursor, "include_rewrites": str(include_rewrites).lower()}
            timeout = httpx.Timeout(self.timeout, read=idle_timeout)
            try:
                with httpx.Client(base_url=self.url, timeout=timeout) as client:
                    headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
                    with client.stream("GET", f"/tables/{name}/changes/stream", params=params, headers=headers) as resp:
                        if resp.status_code != 200:
                            resp.read()
                            raise _error(resp)
                        for event in EventSource(resp).iter_sse():
                            if event.retry is not None:
                                retry_ms = event.retry
                            if event.event == "commit":
                                commit = Commit.from_dict(json.loads(event.data))
                                cursor = commit.id_version + 1
                                last_progress, failures = time.monotonic(), 0
                                yield commit
                            elif event.event == "error":
                                reason = json.loads(event.data).get("message")
                                raise TableBrokenError(f"table {name!r}: {reason}", reason)
                            if idle():  # the server's keepalives carry ``retry:``: a turn of this loop
                                return
            except httpx.ReadTimeout:
                pass
            except (httpx.TransportError, SSEError) as exc:
                if idle():
                    raise CatalogUnavailableError(f"catalog service {self.url} unreachable: {exc}") from exc
            if idle():
                return
            failures += 1
            time.sleep(reconnect_delay(retry_ms, failures))


DEFAULT_RETRY_MS = 1000  # until the server's ``retry:`` says otherwise
MAX_RETRY_SECONDS = 30.0


def reconnect_delay(retry_ms: int, failures: int) -> float:
    """Seconds before reconnecting: the server's retry doubled per failure in a row, capped, less up to 20 %."""
    delay = min(MAX_RETRY_SECONDS, retry_ms / 1000 * 2 ** (failures - 1))
    return delay * random.uniform(0.8, 1.0)


def _error(response: Any) -> Exception:
    try:
        body = response.json()
        kind, message = body.get("error"), body.get("message") or body.get("detail")
    except ValueError:
        kind, message = None, response.text[:500]
    cls = _ERRORS.get(kind or "")
    if cls is not None:
        return cls(message)
    return CatalogError(f"catalog service answered {response.status_code}: {message}")


__all__ = ["DEFAULT_RETRY_MS", "MAX_RETRY_SECONDS", "HttpBackend", "reconnect_delay"]
