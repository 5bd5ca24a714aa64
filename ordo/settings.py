"""Settings: defined in ``kernel.settings`` (below arbiter, consumer and producer); this public path stays."""

from __future__ import annotations

from ordo.kernel.settings import (
    DEFAULT_CATALOG,
    DEFAULT_CLIENT_FETCH_WAIT_MS,
    DEFAULT_COMPACTOR_INTERVAL,
    DEFAULT_COMPACTOR_MASTER,
    DEFAULT_CONSUMER_FETCH_WAIT_MS,
    DEFAULT_FETCH_WAIT_BUSY_MS,
    DEFAULT_FETCH_WAIT_IDLE_MS,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_HOST,
    DEFAULT_PREFIX,
    DEFAULT_RESUBMIT_AFTER,
    DEFAULT_WAREHOUSE,
    Settings,
    default_state_dir,
    kafka_passthrough,
    load_settings,
    parse_bool,
)

__all__ = [
    "DEFAULT_CATALOG",
    "DEFAULT_CLIENT_FETCH_WAIT_MS",
    "DEFAULT_COMPACTOR_INTERVAL",
    "DEFAULT_COMPACTOR_MASTER",
    "DEFAULT_CONSUMER_FETCH_WAIT_MS",
    "DEFAULT_FETCH_WAIT_BUSY_MS",
    "DEFAULT_FETCH_WAIT_IDLE_MS",
    "DEFAULT_HTTP_HOST",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_METRICS_HOST",
    "DEFAULT_PREFIX",
    "DEFAULT_RESUBMIT_AFTER",
    "DEFAULT_WAREHOUSE",
    "Settings",
    "default_state_dir",
    "kafka_passthrough",
    "load_settings",
    "parse_bool",
]
