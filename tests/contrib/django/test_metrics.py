"""One process-wide SumeMetrics behind every get_session()."""

from __future__ import annotations

import os
import threading
from typing import Any, List

import pytest

pytest.importorskip("django")

from sume_urllib3.contrib.django import get_session, sessions
from sume_urllib3.testing import FakeSume, no_sleep

from ...conftest import in_a_forked_child
from .settings import API_KEY


def test_every_threads_requests_add_up_in_one_place(fake: FakeSume, dj_settings: Any) -> None:
    """8 threads x 5 calls: the main thread's get_session().metrics counts all 40 (issue 16)."""
    fake.script("GET", "/v1/me", 503, 200)
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1"}
    errors: List[BaseException] = []

    def run() -> None:
        try:
            for _ in range(5):
                get_session().get("/me")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with no_sleep():
        threads = [threading.Thread(target=run) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert [] == errors
    metrics = get_session().metrics
    assert 40 == metrics.total
    snapshot = metrics.snapshot()
    assert 1 == snapshot["outcomes"]["retried_ok"]
    assert 39 == snapshot["outcomes"]["ok"]
    assert metrics is sessions.process_metrics()


def test_counts_survive_a_settings_change(fake: FakeSume, dj_settings: Any) -> None:
    """Counters are cumulative for the process: a rebuilt session keeps counting into them."""
    fake.script("GET", "/v1/me", 200)
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1"}
    get_session().get("/me")
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1", "MAX_RETRIES": 2}
    get_session().get("/me")

    assert 2 == get_session().metrics.total


def test_each_request_is_counted_once(fake: FakeSume, dj_settings: Any) -> None:
    """The shared counters are the session's metrics, not an extra copy next to them."""
    fake.script("GET", "/v1/me", 200)
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1"}
    session = get_session()

    session.get("/me")

    assert 1 == session.metrics.total
    assert 1 == sum(1 for o in session.observers if o is sessions.process_metrics())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_from_zero(fake: FakeSume, dj_settings: Any) -> None:
    """A worker forked from a preloaded parent does not report the parent's requests again."""
    fake.script("GET", "/v1/me", 200)
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1"}
    get_session().get("/me")

    child_total = in_a_forked_child(lambda: str(sessions.process_metrics().total))

    assert "0" == child_total
    assert 1 == sessions.process_metrics().total
