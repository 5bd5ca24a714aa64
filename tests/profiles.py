"""Hypothesis profiles: ``ci`` for every run, ``deep`` on demand (``HYPOTHESIS_PROFILE=deep make test-fast``).

``ci`` (the default) keeps each test's own number of examples and turns off the
two checks that time a single example on the wall clock: the 200 ms
``deadline`` and the ``too_slow`` health check (drawing the first examples took
over a second). On this shared 2-core machine, with other suites running, both
measure the load, not the code: a test that got slow shows in
``--durations=30`` and in its ``timeout``. The other health checks stay on (a
strategy that filters out most of what it draws, or draws too much, is a
strategy to fix: tests/README.md).

``deep`` draws ten times as many examples everywhere: the default (100 -> 1,000)
and every test's own count, which tests write as ``examples(n)``.

Tests that set ``suppress_health_check`` themselves replace the profile's list:
they name ``HealthCheck.too_slow`` too when they mean to keep it off.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = {"ci": 1, "deep": 10}

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True, max_examples=100
)
settings.register_profile("deep", parent=settings.get_profile("ci"), max_examples=100 * SCALE["deep"])

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in SCALE:
    raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r}: expected one of {', '.join(SCALE)}")
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """A test's own number of examples under the current profile (``n`` in ``ci``, ten times ``n`` in ``deep``)."""
    return n * SCALE[PROFILE]
