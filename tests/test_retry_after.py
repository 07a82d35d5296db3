"""parse_retry_after: delta seconds and HTTP-dates in, a bounded wait or None out, never an exception."""

from __future__ import annotations

import calendar
import email.utils
from typing import Any, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sume_urllib3._envelope import RETRY_AFTER_CEILING, parse_retry_after

#: 2015-10-21 07:28:00 UTC, the wall clock for every HTTP-date test.
NOW = float(calendar.timegm((2015, 10, 21, 7, 28, 0, 0, 0, 0)))


def clock() -> float:
    """The injected wall clock."""
    return NOW


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("12", 12.0),
        ("120", 120.0),
        ("007", 7.0),
        ("1.5", 1.5),
        ("0.25", 0.25),
        (".5", 0.5),
        ("5.", 5.0),
        (" 10 ", 10.0),
        ("\t3\r\n", 3.0),
        (b"12", 12.0),
        (b" 1.5 ", 1.5),
    ],
)
def test_delta_seconds(value: Any, expected: float) -> None:
    """Integer and decimal delta seconds, padded or as bytes, give that many seconds."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize("value", ["-5", "-0.5", "-0", "-99999999999999999999", b"-1"])
def test_negative_delta_means_zero(value: Any) -> None:
    """A negative delta means "now": 0 seconds."""
    assert 0.0 == parse_retry_after(value, clock)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 08:28:00 GMT", 3600.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 09:28:30 +0200", 30.0),
        ("Wednesday, 21-Oct-15 07:28:30 GMT", 30.0),
        ("Wed Oct 21 07:28:30 2015", 30.0),
        (b"Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("  Wed, 21 Oct 2015 07:28:30 GMT  ", 30.0),
    ],
)
def test_http_dates_against_the_injected_clock(value: Any, expected: float) -> None:
    """HTTP-dates (IMF-fixdate, RFC 850, asctime, offsets) are measured from ``now``; past means 0."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize(
    "value", ["9" * 20, "9" * 200, "1" + "0" * 12, "Fri, 31 Dec 9999 23:59:59 GMT", "99999999999.5"]
)
def test_absurd_values_clamp_to_the_ceiling(value: str) -> None:
    """Huge deltas and far-future dates clamp to RETRY_AFTER_CEILING instead of overflowing."""
    assert RETRY_AFTER_CEILING == parse_retry_after(value, clock)


def test_ceiling_is_exactly_representable() -> None:
    """A delta equal to the ceiling is returned unchanged; one just below is not clamped."""
    assert RETRY_AFTER_CEILING == parse_retry_after("1000000000", clock)
    assert 999999999.0 == parse_retry_after("999999999", clock)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "soon",
        "1m0s",
        "1e999",
        "1e3",
        "inf",
        "-inf",
        "nan",
        "NaN",
        "0x10",
        "1_000",
        "1,5",
        "1 2",
        "12s",
        "+-1",
        "--1",
        ".",
        "\x00",
        "Mon, 32 Foo",
        "0 0 0 0 0",
        "1 Jan 99999999999 00:00:00",
        "1" + " " * 5000,
        "1" * 4097,
        b"\xff\xfe",
        b"",
    ],
)
def test_garbage_is_none(value: Any) -> None:
    """Anything that is neither delta seconds nor an HTTP-date is ignored (None)."""
    assert parse_retry_after(value, clock) is None


@pytest.mark.parametrize("value", [True, False, ["12"], {"12": 1}, object()])
def test_non_text_is_none(value: Any) -> None:
    """Only str and bytes (header values) and numbers (seconds) are read; anything else is None."""
    assert parse_retry_after(value, clock) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (12, 12.0),
        (1.5, 1.5),
        (0, 0.0),
        (-3, 0.0),
        (float("inf"), RETRY_AFTER_CEILING),
        (10**400, RETRY_AFTER_CEILING),
        (-(10**400), 0.0),
        (float("nan"), None),
    ],
)
def test_numbers_are_seconds(value: Any, expected: Optional[float]) -> None:
    """A number is seconds already read: clamped to 0..RETRY_AFTER_CEILING, NaN is None."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize("value", ["١٢", "１２", "১"])
def test_non_ascii_digits_are_garbage(value: str) -> None:
    """delay-seconds is 1*DIGIT (ASCII): Arabic-Indic, fullwidth or Bengali digits are garbage (None)."""
    assert parse_retry_after(value, clock) is None


def test_delta_never_consults_the_clock() -> None:
    """The wall clock is read only for HTTP-dates."""
    calls: List[int] = []

    def counting_clock() -> float:
        calls.append(1)
        return NOW

    assert 5.0 == parse_retry_after("5", counting_clock)
    assert [] == calls
    assert 30.0 == parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", counting_clock)
    assert [1] == calls


def test_default_clock_is_the_real_time() -> None:
    """Without ``now`` a date in the past still means 0 and a far-future one clamps."""
    assert 0.0 == parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT")
    assert RETRY_AFTER_CEILING == parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT")


# --- properties ---------------------------------------------------------------------------

PROPERTY = settings(max_examples=300, deadline=None)


def _check(result: Optional[float]) -> None:
    assert result is None or 0.0 <= result <= RETRY_AFTER_CEILING


@PROPERTY
@given(st.text(max_size=300))
def test_property_never_raises_on_text(value: str) -> None:
    """Arbitrary text gives None or a wait between 0 and the ceiling."""
    _check(parse_retry_after(value, clock))


@PROPERTY
@given(st.binary(max_size=300))
def test_property_never_raises_on_bytes(value: bytes) -> None:
    """Arbitrary bytes give None or a wait between 0 and the ceiling."""
    _check(parse_retry_after(value, clock))


@PROPERTY
@given(
    st.lists(
        st.sampled_from(
            ["Mon,", "Wed", "21", "Oct", "2015", "07:28:00", "GMT", "+0200", "-", ":", "99", "0", " "]
        ),
        max_size=12,
    ).map(" ".join),
    st.floats(min_value=-1e12, max_value=1e12),
)
def test_property_never_raises_on_date_like_text(value: str, now: float) -> None:
    """Near-miss HTTP-dates never raise, whatever the clock says."""
    _check(parse_retry_after(value, lambda: now))


@PROPERTY
@given(st.integers(min_value=0, max_value=10**40), st.sampled_from(["", " ", "\t"]))
def test_property_integer_deltas_are_exact_up_to_the_ceiling(seconds: int, pad: str) -> None:
    """An integer delta gives exactly that many seconds, clamped to the ceiling."""
    assert min(float(seconds), RETRY_AFTER_CEILING) == parse_retry_after(f"{pad}{seconds}{pad}", clock)


@PROPERTY
@given(st.integers(min_value=0, max_value=253402300799))
def test_property_http_dates_measure_from_now(stamp: int) -> None:
    """An IMF-fixdate gives its distance from ``now`` (0 if past), clamped to the ceiling."""
    value = email.utils.formatdate(stamp, usegmt=True)
    assert min(max(stamp - NOW, 0.0), RETRY_AFTER_CEILING) == parse_retry_after(value, clock)


def test_a_delta_of_any_length_is_a_huge_wait() -> None:
    """300 digits is as absurd as 20: clamped to the ceiling, so the deadline stops it."""
    assert RETRY_AFTER_CEILING == parse_retry_after("1" * 300, clock)
