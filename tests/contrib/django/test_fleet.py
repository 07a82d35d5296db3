"""SUME["FLEET"]: a LocalFleet, HostFleet or RedisFleet, or no pacing; built once per process (E008)."""

from __future__ import annotations

import threading
from typing import Any, Dict, List

import pytest

pytest.importorskip("django")

from django.core import checks

from sume_urllib3 import ConfigurationError, SumeSession
from sume_urllib3.contrib.django import conf, get_session, sessions
from sume_urllib3.contrib.django.fleet import build_fleet, fleet_arguments
from sume_urllib3.pacing import HostFleet, LocalFleet
from sume_urllib3.pacing.host import default_path
from sume_urllib3.testing import FakeSume, no_sleep

from .settings import API_KEY


def messages() -> List[checks.CheckMessage]:
    """Our check messages."""
    found: List[checks.CheckMessage] = checks.run_checks(tags=["sume_urllib3"])
    return found


def sume(fleet: Any) -> Dict[str, Any]:
    """A valid SUME with this FLEET."""
    return {"API_KEY": API_KEY, "FLEET": fleet}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"RATE": "10/min"}, {"rate": "10/min"}),
        ({"RATE": " 20 / s ", "BURST": 5}, {"rate": "20 / s", "burst": 5}),
        ({"RATE": 2.5}, {"rate": 2.5}),
        ({}, {}),
        ({"RATE": None, "BURST": None}, {}),
        (
            {
                "REDIS_URL": "redis://127.0.0.1:6379/0", "RATE": "10/h", "BURST": 10,
                "PREFIX": "app", "TIMEOUT": 0.1,
            },
            {"url": "redis://127.0.0.1:6379/0", "rate": "10/h", "burst": 10, "prefix": "app", "timeout": 0.1},
        ),
        ({"HOST": True}, {"host": True}),
        ({"HOST": "/run/app/sume.fleet", "RATE": "10/s", "TIMEOUT": 0.2}, {"host": "/run/app/sume.fleet",
                                                                           "rate": "10/s", "timeout": 0.2}),
        ({"HOST": False, "RATE": "10/s"}, {"rate": "10/s"}),
    ],
)
def test_fleet_arguments(value: Dict[str, Any], expected: Dict[str, Any]) -> None:
    """The setting's keys become the fleet constructor's arguments."""
    assert expected == fleet_arguments(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("redis://127.0.0.1", "must be a dict"),
        ({"RATE": "10/fortnight"}, "RATE: rate must be"),
        ({"RATE": "0/s"}, "RATE: rate must be"),
        ({"RATE": -1}, "RATE: rate must be"),
        ({"RATE": True}, "RATE: rate must be"),
        ({"BURST": 0}, "BURST: burst must be between 1 and 1000000"),
        ({"BURST": 10**7}, "BURST: burst must be between 1 and 1000000"),
        ({"BURST": 2.5}, "BURST: burst must be an int"),
        ({"RATES": "10/s"}, "unknown key 'RATES'"),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL must start with redis://"),
        ({"REDIS_URL": 6379}, "REDIS_URL must be a str"),
        ({"REDIS_URL": "redis://127.0.0.1", "PREFIX": ""}, "PREFIX: prefix must be 1-64 characters"),
        ({"REDIS_URL": "redis://127.0.0.1", "PREFIX": "a{b}"}, "PREFIX: prefix must be 1-64 characters"),
        ({"REDIS_URL": "redis://127.0.0.1", "TIMEOUT": 0}, "TIMEOUT: timeout must be between 0.001 and 60"),
        ({"REDIS_URL": "redis://127.0.0.1", "TIMEOUT": 120}, "TIMEOUT: timeout must be between 0.001 and 60"),
        ({"PREFIX": "app"}, "PREFIX applies to a Redis fleet only"),
        ({"TIMEOUT": 0.1}, "TIMEOUT applies to a Redis fleet or a host fleet only"),
        ({"HOST": 1}, "HOST must be True"),
        ({"HOST": ""}, "HOST must be True"),
        ({"HOST": True, "REDIS_URL": "redis://127.0.0.1"}, "not both"),
        ({"HOST": True, "PREFIX": "app"}, "PREFIX applies to a Redis fleet only"),
        ({"HOST": True, "TIMEOUT": 0}, "TIMEOUT: timeout must be between 0.001 and 60"),
    ],
)
def test_e008_bad_values_are_named(dj_settings: Any, value: Any, expected: str) -> None:
    """manage.py check reports E008 naming the key at fault, and get_session refuses."""
    dj_settings.SUME = sume(value)

    (message,) = messages()

    assert "sume_urllib3.E008" == message.id
    assert message.msg.startswith('SUME["FLEET"]: ')
    assert expected in message.msg
    assert "REDIS_URL" in (message.hint or "")
    with pytest.raises(ConfigurationError, match=r"sume_urllib3\.E008"):
        get_session()


#: Spellings users write (issue 25 lists the first seven): each one LocalFleet takes must pass.
RATE_SPELLINGS = [
    "10/minute", "10/m", "10/sec", "500/hour", "100/d", "100/day", "10/MIN",
    "10/min", "20/s", " 20 / s ", "100/h", "100/hr", "2/seconds", "0.5/s", 2.5, 3,
]
#: And each it refuses must be E008, with the fleet's own reason.
BAD_RATES = [
    "10/fortnight", "10", "/s", "ten/s", "-1/s", "0/min", "10/", "", 0, -2.5, float("nan"), True, [10],
]


@pytest.mark.parametrize("rate", RATE_SPELLINGS, ids=repr)
def test_every_rate_the_fleets_accept_passes_the_check(dj_settings: Any, rate: Any) -> None:
    """One parser: what LocalFleet(rate=...) accepts, manage.py check accepts and get_session builds."""
    LocalFleet(rate=rate)  # the fleet takes it: the check must too
    dj_settings.SUME = sume({"RATE": rate})

    assert [] == messages()
    fleet = get_session().fleet
    assert isinstance(fleet, LocalFleet)
    assert fleet.rate == pytest.approx(LocalFleet(rate=rate).rate)


@pytest.mark.parametrize("rate", BAD_RATES, ids=repr)
def test_every_rate_the_fleets_refuse_is_e008_with_their_reason(dj_settings: Any, rate: Any) -> None:
    """A rate LocalFleet refuses is E008, and the message is the fleet's own (nothing to drift)."""
    with pytest.raises(ConfigurationError) as refused:
        LocalFleet(rate=rate)
    dj_settings.SUME = sume({"RATE": rate})

    (message,) = messages()

    assert "sume_urllib3.E008" == message.id
    assert f'SUME["FLEET"]: RATE: {refused.value}' == message.msg


def test_a_redis_password_is_never_echoed(dj_settings: Any) -> None:
    """A REDIS_URL with a bad scheme is reported by scheme only: its password stays out."""
    dj_settings.SUME = sume({"REDIS_URL": "http://:SECRETPW@127.0.0.1:6379/0"})

    (message,) = messages()

    assert "SECRETPW" not in message.msg + (message.hint or "")


def test_none_means_no_pacing_and_absent_means_the_default() -> None:
    """FLEET None is passed as fleet=None; without the key the session picks its default."""
    assert None is conf.resolve(sume(None), {}).session_kwargs["fleet"]
    assert "fleet" not in conf.resolve({"API_KEY": API_KEY}, {}).session_kwargs


def test_a_rate_without_redis_is_one_local_fleet_per_process() -> None:
    """{"RATE": ...} builds a LocalFleet once; the same setting gives the same object."""
    fleet_module = pytest.importorskip("sume_urllib3.pacing._fleet")

    first = build_fleet({"RATE": "10/min", "BURST": 2})
    again = build_fleet({"BURST": 2, "RATE": "10/min"})
    other = build_fleet({"RATE": "20/min"})

    assert isinstance(first, fleet_module.LocalFleet)
    assert first is again
    assert other is not first


def test_a_redis_url_builds_a_redis_fleet_without_connecting() -> None:
    """REDIS_URL builds a RedisFleet; nothing is sent until a request needs a turn (port 1 is closed)."""
    pytest.importorskip("redis")
    redis_module = pytest.importorskip("sume_urllib3.contrib.redis")

    fleet = build_fleet({"REDIS_URL": "redis://127.0.0.1:1/0", "RATE": "10/s", "PREFIX": "app"})

    assert isinstance(fleet, redis_module.RedisFleet)
    assert fleet is build_fleet({"REDIS_URL": "redis://127.0.0.1:1/0", "RATE": "10/s", "PREFIX": "app"})


def test_host_builds_one_host_fleet_per_process(tmp_path: Any) -> None:
    """HOST builds a HostFleet on the one given (or for True, the default), once per setting."""
    path = str(tmp_path / "app.fleet")
    fleet = build_fleet({"HOST": path, "RATE": "10/s"})

    assert isinstance(fleet, HostFleet)
    assert fleet.path == path
    assert fleet is build_fleet({"RATE": "10/s", "HOST": path})
    assert build_fleet({"HOST": True}).path != default_path()  # a test run's own: see test_isolation


def test_the_checks_pass_for_good_fleets(dj_settings: Any) -> None:
    """None, a local quota, a host fleet and (with redis-py) a Redis fleet pass manage.py check."""
    values: List[Any] = [None, {"RATE": "10/min", "BURST": 10}, {"HOST": True, "RATE": "10/min"}]
    try:
        import redis  # noqa: F401

        values.append({"REDIS_URL": "redis://127.0.0.1:1/0", "RATE": "10/min"})
    except ImportError:
        pass
    for value in values:
        dj_settings.SUME = sume(value)
        assert [] == messages(), value


def test_every_threads_session_gets_the_configured_fleet(dj_settings: Any) -> None:
    """get_session() passes the one fleet built from the setting, in every thread."""
    dj_settings.SUME = sume({"RATE": "10/min"})
    fleet = build_fleet({"RATE": "10/min"})
    seen: List[Any] = []

    thread = threading.Thread(target=lambda: seen.append(get_session().fleet))
    thread.start()
    thread.join()

    assert [fleet] == seen
    assert fleet is get_session().fleet


def test_none_turns_pacing_off_and_no_key_shares_the_host_fleet(dj_settings: Any) -> None:
    """FLEET None gives sessions no fleet; without FLEET they share the host fleet (the test run's
    file here), in every thread; a plain SumeSession outside Django keeps LocalFleet.default()."""
    dj_settings.SUME = sume(None)
    assert None is get_session().fleet

    dj_settings.SUME = {"API_KEY": API_KEY}
    fleet = get_session().fleet
    seen: List[Any] = []
    thread = threading.Thread(target=lambda: seen.append(get_session().fleet))
    thread.start()
    thread.join()

    assert isinstance(fleet, HostFleet)
    assert fleet is build_fleet({"HOST": True})
    assert [fleet] == seen
    assert fleet.path != default_path()  # the test run's own: see test_isolation
    assert LocalFleet.default() is SumeSession(API_KEY).fleet


@pytest.mark.parametrize("value", [{"HOST": False}, {"RATE": "10/s"}, {"HOST": False, "RATE": "10/s"}])
def test_host_false_or_a_rate_alone_opts_out_to_a_local_fleet(dj_settings: Any, value: Any) -> None:
    """The one-line opt-outs of the host fleet: this process paces alone."""
    dj_settings.SUME = sume(value)

    assert [] == messages()
    assert isinstance(get_session().fleet, LocalFleet)
    assert get_session().fleet is not LocalFleet.default()


def test_the_configured_rate_paces_requests_and_the_shared_metrics_count_it(
    fake: FakeSume, dj_settings: Any
) -> None:
    """At RATE 1/s, BURST 1 the second call waits its turn; the record and process metrics say so."""
    fake.script("GET", "/v1/me", 200)
    dj_settings.SUME = {**sume({"RATE": "1/s", "BURST": 1}), "BASE_URL": fake.url + "/v1"}

    with no_sleep() as waits:
        first = get_session().get("/me")
        second = get_session().get("/me")

    assert 0.0 == first.sume.paced  # type: ignore[attr-defined]
    paced = second.sume.paced  # type: ignore[attr-defined]
    assert 0.5 < paced <= 1.0
    assert [paced] == waits.waits
    pacing = sessions.process_metrics().snapshot()["pacing"]
    assert (1, round(paced, 6)) == (pacing["held"], pacing["wait_seconds"])
