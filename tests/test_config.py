"""sume_urllib3._config: each check once, without sockets (the table over every constructor
and setting is tests/test_settings_checked.py)."""

from __future__ import annotations

import math
import random
from typing import Any, Dict

import pytest

from sume_urllib3._config import (
    MAX_SECONDS,
    as_seconds,
    check_base_url,
    check_clock,
    check_flag,
    check_int,
    check_rng,
    check_seconds,
    setting,
)
from sume_urllib3.exceptions import ConfigurationError


@pytest.mark.parametrize("value", [0, 0.5, 3, MAX_SECONDS])
def test_seconds_from_zero_to_the_most_a_sleep_accepts(value: float) -> None:
    """The default range is [0, MAX_SECONDS]; an int comes back a float."""
    assert float(value) == check_seconds(value, "wait")
    assert isinstance(check_seconds(value, "wait"), float)


@pytest.mark.parametrize(
    ("value", "kwargs", "says"),
    [
        (math.nan, {}, "wait must be finite and >= 0, at most 1000000000 seconds"),
        (10**400, {}, "wait must be finite and >= 0"),
        (0, {"positive": True}, "wait must be finite and > 0"),
        ("5", {}, "wait must be a number of seconds, got '5'"),
        (True, {}, "wait must be a number of seconds, got True"),
        (120, {"low": 0.001, "high": 60.0}, "wait must be between 0.001 and 60 seconds, got 120"),
        (0, {"positive": True, "high": 86_400.0}, "wait must be above 0 and at most 86400 seconds, got 0"),
        (-1, {"high": 1000.0, "unit": ""}, "wait must be between 0 and 1000, got -1"),
        ("x", {"unit": ""}, "wait must be a number, got 'x'"),
    ],
)
def test_seconds_refused_say_what_is_accepted(value: Any, kwargs: Dict[str, Any], says: str) -> None:
    """The message names the argument and the range it accepts."""
    with pytest.raises(ConfigurationError) as refused:
        check_seconds(value, "wait", **kwargs)
    assert str(refused.value).startswith(says)


def test_seconds_within_a_range() -> None:
    """Both ends of a given range are accepted."""
    assert (0.001, 60.0) == (
        check_seconds(0.001, "t", low=0.001, high=60),
        check_seconds(60, "t", low=0.001, high=60),
    )


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [(2, 0.0, 2.0), (-3.5, 0.0, 0.0), (None, 0.0, 0.0), (math.nan, math.inf, math.inf), (True, 1.0, 1.0)],
)
def test_as_seconds_is_lenient(value: Any, default: float, expected: float) -> None:
    """Below 0 is 0; not a number is the default."""
    assert expected == as_seconds(value, default)


def test_int_and_flag() -> None:
    """An int in range (not a bool); a flag is True or False, never a truthy string."""
    assert 3 == check_int(3, "n", 1, 5)
    for bad in (0, 6, True, 2.0):
        with pytest.raises(ConfigurationError, match=r"^n must be"):
            check_int(bad, "n", 1, 5)
    assert check_flag(False, "on") is False
    with pytest.raises(ConfigurationError, match="on must be True or False, got str"):
        check_flag("false", "on")


def test_rng_and_clock() -> None:
    """A jitter source is None, a Random or a callable; a clock must read as a finite number."""
    source = random.Random(1)
    assert source is check_rng(source)
    assert check_rng(None) is None
    with pytest.raises(ConfigurationError, match=r"rng must be None, a random\.Random or a callable"):
        check_rng(5)
    check_clock(lambda: 1.0, "clock")
    with pytest.raises(ConfigurationError, match="clock must return a finite number"):
        check_clock(lambda: math.nan, "clock")
    with pytest.raises(ConfigurationError, match="reading it raised ZeroDivisionError"):
        check_clock(lambda: 1 / 0, "clock")


@pytest.mark.parametrize("url", ["http://host:abc/", "http://host:0/", "http://exa mple.com/", "http://[::1"])
def test_a_url_that_cannot_be_sent_to_is_refused_without_echoing_it(url: str) -> None:
    """The message names the argument and the part, never the URL (it may carry credentials)."""
    with pytest.raises(ConfigurationError, match=r"^base_url must") as refused:
        check_base_url(url)
    assert url not in str(refused.value)


def test_a_setting_falls_back_to_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The value given wins; else the variable (a bad one refused by its name); else the default."""
    monkeypatch.setenv("SUME_TEST_WAIT", "7")

    def seconds(value: Any) -> float:
        return check_seconds(float(value), "wait")

    assert 2.0 == setting(2, "SUME_TEST_WAIT", seconds)
    assert 7.0 == setting(None, "SUME_TEST_WAIT", seconds)
    monkeypatch.setenv("SUME_TEST_WAIT", "-1")
    with pytest.raises(ConfigurationError, match=r"^the SUME_TEST_WAIT environment variable: wait must"):
        setting("", "SUME_TEST_WAIT", seconds)
    monkeypatch.delenv("SUME_TEST_WAIT")
    assert 5.0 == setting(None, "SUME_TEST_WAIT", seconds, 5)
