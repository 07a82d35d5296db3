"""Reading the server's pace from RateLimit headers in every published form."""

from __future__ import annotations

import email.utils
import time
from typing import Any, Callable, Dict, Iterator, Tuple

import pytest
from requests.structures import CaseInsensitiveDict
from urllib3._collections import HTTPHeaderDict

from sume_urllib3 import SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.pacing._core import Lesson
from sume_urllib3.pacing._signals import parse_ratelimit
from sume_urllib3.testing import FakeSume, Reply

from .conftest import VirtualTime

WALL = 1_700_000_000.0


def wall() -> float:
    return WALL


def test_ratelimit_limit_remaining_reset() -> None:
    """The three RateLimit-* headers give limit, remaining and reset; no window."""
    headers = {"RateLimit-Limit": "10", "RateLimit-Remaining": "7", "RateLimit-Reset": "3"}
    assert parse_ratelimit(headers) == Lesson(0, 10, 7, 3_000_000, -1)


def test_limit_with_window_parameter() -> None:
    """A limit written as a quota policy list (``10, 10;w=1``) carries its window."""
    headers = {"RateLimit-Limit": "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining": "9"}
    assert parse_ratelimit(headers) == Lesson(0, 10, 9, -1, 1_000_000)


def test_x_ratelimit_reset_as_unix_time_becomes_a_delta() -> None:
    """GitHub's X-RateLimit-Reset is a Unix time: it is turned into seconds from now."""
    headers = {
        "X-RateLimit-Limit": "5000",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(int(WALL) + 42),
    }
    assert parse_ratelimit(headers, wall) == Lesson(0, 5000, 0, 42_000_000, -1)


def test_reset_in_unix_milliseconds_and_in_the_past() -> None:
    """A Reset in Unix milliseconds is understood; one in the past means now."""
    ms = {"X-Rate-Limit-Reset": str(int(WALL * 1000) + 5000)}
    past = {"X-RateLimit-Reset": str(int(WALL) - 100)}
    assert parse_ratelimit(ms, wall) == Lesson(0, -1, -1, 5_000_000, -1)
    assert parse_ratelimit(past, wall) == Lesson(0, -1, -1, 0, -1)


def http_date(stamp: float) -> str:
    """``stamp`` as an IMF-fixdate, as a server's Date header carries it."""
    return email.utils.formatdate(stamp, usegmt=True)


@pytest.mark.parametrize("skew", [-300, 300], ids=["client behind", "client ahead"])
def test_an_epoch_reset_is_measured_from_the_response_date(skew: float) -> None:
    """An epoch reset is the server's clock: the wait is the reset less the response's Date, with
    the local clock ``skew`` seconds off (302 s or 0 s before); without a readable Date, the local
    clock as before. Every form of reset that is a Unix time is read so."""
    server_now = WALL - skew  # the local clock (WALL) is ``skew`` off the server's
    date = http_date(server_now)
    seconds = {"Date": date, "X-RateLimit-Reset": str(int(server_now) + 2)}
    millis = {"date": date, "X-Rate-Limit-Reset": str(int(server_now * 1000) + 2000)}
    combined = {"Date": date, "RateLimit": f"limit=10, remaining=0, reset={int(server_now) + 2}"}
    undated = {"Date": "yesterday", "X-RateLimit-Reset": str(int(server_now) + 2)}
    for headers in (seconds, millis, combined, HTTPHeaderDict(seconds), CaseInsensitiveDict(seconds)):
        assert 2_000_000 == parse_ratelimit(headers, wall).reset  # type: ignore[union-attr]
    assert max(2 - skew, 0) * 1_000_000 == parse_ratelimit(undated, wall).reset  # type: ignore[union-attr]
    assert 30_000_000 == parse_ratelimit({"Date": date, "X-RateLimit-Reset": "30"}, wall).reset  # type: ignore[union-attr]


@pytest.mark.parametrize("skew", [-300, 300], ids=["client behind", "client ahead"])
def test_a_session_waits_for_an_epoch_reset_by_the_server_clock(
    fake: FakeSume, make_session: Callable[..., SumeSession], vtime: VirtualTime, skew: int
) -> None:
    """A quota spent until the server's Date plus 2 s holds the next request 2 s, with the local
    wall clock 300 s behind (it was refused unsent, "next turn in 301.4s") or ahead (it went at once)."""
    server_now = int(time.time())
    spent = {
        "Date": http_date(server_now),
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(server_now + 2),
    }
    fake.script("GET", "/v1/runs", Reply(200, json={}, headers=spent), Reply(200, json={}))
    fleet = LocalFleet(clock=vtime.clock, wall=lambda: time.time() + skew)
    session = make_session(fleet=fleet)

    session.get("runs")
    second = session.get("runs")

    assert (200, 2) == (second.status_code, len(fake.requests))
    assert second.sume.paced == pytest.approx(2.0, abs=0.01)  # type: ignore[attr-defined]


def test_draft_07_combined_header_and_policy() -> None:
    """``RateLimit: limit=.., remaining=.., reset=..`` with ``RateLimit-Policy: 10;w=60``."""
    headers = {"RateLimit": "limit=10, remaining=4, reset=30", "RateLimit-Policy": "10;w=60"}
    assert parse_ratelimit(headers) == Lesson(0, 10, 4, 30_000_000, 60_000_000)


def test_later_draft_structured_fields() -> None:
    """``RateLimit: "default";r=9;t=5`` with ``RateLimit-Policy: "default";q=10;w=60``."""
    headers = {"RateLimit": '"default";r=9;t=5', "RateLimit-Policy": '"default";q=10;w=60'}
    assert parse_ratelimit(headers) == Lesson(0, 10, 9, 5_000_000, 60_000_000)


def test_several_policies_the_slowest_decides() -> None:
    """Of several quota policies the one with the lowest rate is the pace; of several
    RateLimit items the one with the fewest remaining."""
    headers = {
        "RateLimit-Policy": '"burst";q=100;w=1, "daily";q=1000;w=86400',
        "RateLimit": '"burst";r=50;t=1, "daily";r=3;t=7200',
    }
    assert parse_ratelimit(headers) == Lesson(0, 1000, 3, 7_200_000_000, 86_400_000_000)


def test_remaining_never_exceeds_the_limit() -> None:
    """A Remaining above the Limit is read as the Limit."""
    headers = {"RateLimit-Limit": "10", "RateLimit-Remaining": "50"}
    assert parse_ratelimit(headers) == Lesson(0, 10, 10, -1, -1)


def test_no_ratelimit_headers_is_none() -> None:
    """Responses that say nothing about the quota give None."""
    assert parse_ratelimit({"Content-Type": "application/json", "Retry-After": "1"}) is None
    assert parse_ratelimit({}) is None
    assert parse_ratelimit(None) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Limit": "ten"},
        {"RateLimit-Limit": "-1", "RateLimit-Remaining": "1e309", "RateLimit-Reset": "NaN"},
        {"RateLimit-Limit": "", "RateLimit-Remaining": " ", "RateLimit-Reset": "inf"},
        {"RateLimit-Limit": "9" * 5000},
        {"RateLimit-Limit": "99999999999999999999"},
        {"RateLimit": "limit=, remaining==, reset"},
        {"RateLimit": ';;;r=;t=;,,,"x";r=abc'},
        {"RateLimit-Policy": ";w=0, 0;w=0, 10;w=-5, q=;w="},
        {"RateLimit-Limit": "\x00\x01", "X-RateLimit-Reset": "１２"},
        {b"RateLimit-Limit": b"10"},
        {"RateLimit-Limit": 10},
    ],
)
def test_garbage_never_raises_and_says_nothing(headers: Dict[Any, Any]) -> None:
    """Malformed values are ignored field by field; parsing never raises."""
    reading = parse_ratelimit(headers)
    assert reading is None or all(v == -1 or v >= 0 for v in reading)  # -1: unknown


def test_a_mapping_that_fails_is_none() -> None:
    """A header object whose iteration raises is treated as saying nothing."""

    class Broken(Dict[str, str]):
        def items(self) -> Iterator[Tuple[str, str]]:  # type: ignore[override]
            raise RuntimeError("boom")

    assert parse_ratelimit(Broken()) is None


def test_urllib3_and_requests_header_types() -> None:
    """urllib3's HTTPHeaderDict and requests' CaseInsensitiveDict are read alike, any case."""
    raw = HTTPHeaderDict({"ratelimit-limit": "20", "RATELIMIT-REMAINING": "3", "RateLimit-Reset": "1"})
    cid: CaseInsensitiveDict[str] = CaseInsensitiveDict(raw)
    assert parse_ratelimit(raw) == parse_ratelimit(cid) == Lesson(0, 20, 3, 1_000_000, -1)
