"""override_settings(SUME=...) gives a test fresh sessions and a fresh fleet, so a Django suite
is isolated too (Django's own runner has no pytest plugin: the setting_changed signal does it).

Each test throttles a key with a 429 + Retry-After 30 on one server inside one
``override_settings`` block, then shows that the next block starts clean while the same
block still holds the key.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator

import pytest

pytest.importorskip("django")

from django.test import override_settings

from sume_urllib3 import SumeRetryError
from sume_urllib3.contrib.django import get_session
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import FakeSume, Reply, SleepRecorder

from .settings import API_KEY


@pytest.fixture
def api() -> Iterator[FakeSume]:
    with FakeSume() as fake:
        fake.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
        fake.script("GET", "/v1/me", 200)
        yield fake


def sume(api: FakeSume, **extra: Any) -> Dict[str, Any]:
    return {"API_KEY": API_KEY, "BASE_URL": api.url + "/v1", "MAX_ELAPSED": 5.0, **extra}


def throttle() -> None:
    with pytest.raises(SumeRetryError) as raised:
        get_session().get("/throttled")
    assert not raised.value.record.fleet_refused


def test_a_new_override_starts_without_the_last_ones_cooldown(api: FakeSume) -> None:
    with override_settings(SUME=sume(api)):
        first = get_session()
        throttle()
        with pytest.raises(SumeRetryError) as raised:
            get_session().get("/me")  # the same block: the key is cooling down
        assert raised.value.record.fleet_refused

    with override_settings(SUME=sume(api)):  # the very same value, in the next test
        response = get_session().get("/me")

        assert get_session() is not first
        assert (200, 0.0) == (response.status_code, response.sume.paced)


def test_leaving_the_override_leaves_nothing_behind(api: FakeSume) -> None:
    """The signal is sent on the way out too: the outer settings' sessions start clean."""
    with override_settings(SUME=sume(api)):
        throttle()
    with override_settings(SUME=sume(api, MAX_RETRIES=1)):
        assert 200 == get_session().get("/me").status_code


def test_a_configured_fleet_is_built_again_for_each_override(
    api: FakeSume, sume_no_sleep: SleepRecorder
) -> None:
    """SUME["FLEET"] = {"RATE": "10/min"}: a new block gets a new fleet that owes no turns."""
    setting = sume(api, FLEET={"RATE": "10/min"}, MAX_ELAPSED=60.0)
    with override_settings(SUME=setting):
        fleet = get_session().fleet
        for _ in range(3):
            get_session().get("/me")
        assert [6.0, 6.0] == pytest.approx(sume_no_sleep.waits, abs=0.1)

    sume_no_sleep.clear()
    with override_settings(SUME=setting):
        response = get_session().get("/me")

        assert isinstance(get_session().fleet, LocalFleet)
        assert get_session().fleet is not fleet
        assert (200, 0.0, []) == (response.status_code, response.sume.paced, sume_no_sleep.waits)


def test_other_settings_leave_the_fleet_alone(api: FakeSume) -> None:
    """Only SUME rebuilds sessions and fleets: an unrelated override keeps the cooldown."""
    with override_settings(SUME=sume(api)):
        session = get_session()
        throttle()
        with override_settings(USE_TZ=False):
            assert get_session() is session
            with pytest.raises(SumeRetryError) as raised:
                get_session().get("/me")
        assert raised.value.record.fleet_refused
