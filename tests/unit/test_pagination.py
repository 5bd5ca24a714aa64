"""Cursor pagination of history and commits over HTTP: the pages, joined, are exactly the whole answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ordo.consumer import Catalog
from ordo.consumer.http import HttpServer, create_app

from .test_catalog import build
from .test_catalog_model import Script


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, str]]:
    path = tmp_path_factory.mktemp("pages") / "c.db"
    local = build(path, Script(seed=41).run(60))
    server = HttpServer(create_app(Catalog(path)), "127.0.0.1", 0).start()
    try:
        yield local, server.url
    finally:
        server.stop()


def pages(url: str, path: str, key: str, **params: Any) -> list[list[dict[str, Any]]]:
    found, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor is not None else {})}
        body = httpx.get(f"{url}{path}", params=query, timeout=10).json()
        found.append(body[key])
        cursor = body["next_cursor"]
        if cursor is None:
            return found
        assert len(found) < 100, "pagination does not end"


@pytest.mark.parametrize("accepted_only", [False, True])
@pytest.mark.parametrize("limit", [1, 7, 1000])
def test_history_pages_join_to_the_whole_history(served: tuple[Catalog, str], limit: int, accepted_only: bool) -> None:
    local, url = served
    whole = [d.to_dict() for d in local.history("t", accepted_only=accepted_only)]
    got = pages(url, "/tables/t/history", "decisions", limit=limit, accepted_only=str(accepted_only).lower())
    assert [d for page in got for d in page] == whole
    assert all(len(page) <= limit for page in got) and len(got) >= len(whole) // limit
    remote = Catalog(url)  # the Python API pages the same way
    try:
        first = remote.history("t", 5, accepted_only=accepted_only)
        second = remote.history("t", 5, accepted_only=accepted_only, before=first[-1].log_offset)
        assert [d.to_dict() for d in first + second] == whole[:10]
    finally:
        remote.close()


@pytest.mark.parametrize("include_rewrites", [False, True])
@pytest.mark.parametrize("limit", [1, 4, 1000])
def test_commit_pages_join_to_the_whole_range(served: tuple[Catalog, str], limit: int, include_rewrites: bool) -> None:
    local, url = served
    whole = [c.to_dict() for c in local.commits("t", 0, include_rewrites=include_rewrites)]
    flag = str(include_rewrites).lower()
    got = pages(url, "/tables/t/commits", "commits", limit=limit, include_rewrites=flag)
    assert [c for page in got for c in page] == whole
    assert all(len(page) <= limit for page in got)
    bounded = pages(url, "/tables/t/commits", "commits", limit=limit, start=3, end=20, include_rewrites=flag)
    assert [c for page in bounded for c in page] == [c for c in whole if 3 <= c["id_version"] <= 20]


def test_a_bad_cursor_is_a_400_naming_it(served: tuple[Catalog, str]) -> None:
    _, url = served
    answer = httpx.get(f"{url}/tables/t/history", params={"cursor": "abc"}, timeout=10)
    assert answer.status_code == 400 and "'abc'" in answer.json()["message"]
    answer = httpx.get(f"{url}/tables/t/commits", params={"cursor": "3", "by": "time"}, timeout=10)
    assert answer.status_code == 400 and "by=id" in answer.json()["message"]
