"""A fleet member that cannot serve a table the group assigns it says so and gives the table up (issue 30, item 1).

Here the table's producer is fenced by one the group never assigned it to: a
producer of the table's transactional id started by the test, as a stray
arbiter would. The member still holds the table in the group, so no other
member will take it; before, it dropped the table and never took it again,
reporting ready all along, and the table's intents waited for ever. Now it
reports not ready (``/readyz``: 503, the table named under ``not_serving``), and
when the group still assigns it the table a session timeout later it gives its
tables up (leaves the group and joins again), is assigned the table anew,
takes it (fencing the stray producer) and decides the waiting intent.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from ordo.arbiter.sink import table_transactional_id
from ordo.producer import CommitClient
from ordo.services.stack import ARBITER_METRICS, ManagedProcess, owned_tables
from ordo.settings import Settings
from tests.chaos.common import create_intent, insert_intent, wait_until

pytestmark = pytest.mark.timeout(240)


def readyz(url: str) -> tuple[int, dict[str, Any]]:
    """Status and body of the arbiter's ``/readyz``."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_member_fenced_on_a_table_it_holds_reports_not_ready_gives_it_up_and_serves_it_again(
    settings: Settings, arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    member = arbiter(args=["--fleet", "--commit-timeout", "5"], timeout=120)
    url = member.wait_for_line(ARBITER_METRICS, timeout=10).group(1)
    assert commit_client.commit(create_intent("fx"), timeout=90).accepted
    assert owned_tables(member) == {"fx"} and readyz(url) == (200, {"ready": True})

    stray = Producer(settings.kafka_config(**{"transactional.id": table_transactional_id(settings.topic_prefix, "fx")}))
    stray.init_transactions(30)  # fences the member's producer of fx; the group still assigns fx to the member
    pending = commit_client.submit(insert_intent("fx", "after-the-fence", "a"), timeout=120)

    wait_until(lambda: "fx" in readyz(url)[1].get("not_serving", {}), 60, "the member to report fx unserved")
    status, body = readyz(url)
    assert status == 503 and body["ready"] is False, body
    unready_at = time.monotonic()
    assert pending.result(timeout=120).accepted  # given up, assigned anew, taken again: decided
    wait_until(lambda: readyz(url)[0] == 200, 30, "the member to be ready again")
    assert time.monotonic() - unready_at < 60
    log = member.log_text()
    assert "table fx cannot be served" in log and "giving its tables up" in log
    wait_until(lambda: owned_tables(member) == {"fx"}, 30, "the member to hold fx again")
    stray.flush(1)
