"""sume_urllib3._util: seconds and plurals in reasons, safe text, hosts, origins, StrEnum."""

from __future__ import annotations

from typing import Optional, Tuple

import pytest

from sume_urllib3._envelope import MAX_FIELD, printable
from sume_urllib3._policy import Verdict, seconds
from sume_urllib3._record import Outcome
from sume_urllib3._util import (
    StrEnum,
    columns,
    is_loopback,
    is_visible_ascii,
    leaves_origin,
    origin,
    plain_http_refusal,
    plural,
)

# --- seconds and plural ----------------------------------------------------------------------


def test_columns_align_each_column_to_its_widest_cell() -> None:
    """Two spaces between columns, each as wide as its widest cell; no trailing spaces."""
    assert ["a    bb", "ccc  d"] == columns([("a", "bb"), ("ccc", "d")])
    assert ["x  y", "z"] == columns([("x", "y"), ("z", "")])


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0.0s"), (1.5, "1.5s"), (0.04, "0.0s"), (2.25, "2.2s"), (120, "120.0s"), (999_999.0, "999999.0s")],
)
def test_seconds_with_one_decimal(value: float, text: str) -> None:
    """Ordinary durations read with one decimal and an "s"."""
    assert seconds(value) == text


@pytest.mark.parametrize(("value", "text"), [(1e6, "1e+06s"), (1e9, "1e+09s")])
def test_seconds_absurdly_large(value: float, text: str) -> None:
    """A million seconds and more read in scientific notation, not as a wall of digits."""
    assert seconds(value) == text


@pytest.mark.parametrize(
    ("count", "text"), [(0, "0 retries"), (1, "1 retry"), (2, "2 retries"), (-1, "-1 retries")]
)
def test_plural(count: int, text: str) -> None:
    """The singular only for exactly one."""
    assert plural(count, "retry", "retries") == text


# --- printable -------------------------------------------------------------------------------


def test_printable_none_is_none() -> None:
    """None stays None."""
    assert printable(None) is None


@pytest.mark.parametrize(("value", "text"), [(42, "42"), (1.5, "1.5"), (b"ab", "b'ab'"), (True, "True")])
def test_printable_non_str_uses_str(value: object, text: str) -> None:
    """Anything else is shown through str()."""
    assert printable(value) == text


def test_printable_keeps_ordinary_text() -> None:
    """Printable text, Unicode included, is returned as it is."""
    assert printable("queue_full é 你好") == "queue_full é 你好"
    assert printable("") == ""


def test_printable_cuts_long_text_with_an_ellipsis() -> None:
    """Text over the limit is cut to the limit and marked with an ellipsis."""
    assert MAX_FIELD == 200
    assert printable("x" * 201) == "x" * 200 + "…"
    assert printable("x" * 200) == "x" * 200
    assert printable("abcdef", max_len=3) == "abc…"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("a\nb", "a?b"),
        ("line\r\nlevel=ERROR forged", "line??level=ERROR forged"),
        ("\x1b[31mred\x1b[0m", "?[31mred?[0m"),
        ("nul\x00", "nul?"),
        ("tab\there", "tab?here"),
        ("rtl\u202eevil", "rtl?evil"),
    ],
)
def test_printable_replaces_control_characters(value: str, text: str) -> None:
    """Control and format characters become "?", so no log line can be forged."""
    assert printable(value) == text


def test_printable_cuts_before_scrubbing() -> None:
    """A long hostile value is both cut and scrubbed."""
    result = printable("\n" * 500)
    assert result == "?" * 200 + "…"


# --- is_visible_ascii ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["abc", "A-Z_0.9~!", "".join(chr(c) for c in range(0x21, 0x7F)), ""])
def test_visible_ascii(text: str) -> None:
    """Only "!" to "~" (and the empty string, which has nothing else) count as visible ASCII."""
    assert is_visible_ascii(text) is True


@pytest.mark.parametrize("text", ["a b", "a\tb", "a\nb", "\x00", "\x7f", "é", "\u00a0", "ab\U0001f600"])
def test_not_visible_ascii(text: str) -> None:
    """Spaces, control characters, DEL and anything beyond ASCII are not visible ASCII."""
    assert is_visible_ascii(text) is False


# --- is_loopback and plain_http_refusal ------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST", "api.localhost", "a.b.localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"],
)
def test_loopback_hosts(host: str) -> None:
    """localhost, its subdomains, 127.0.0.0/8 and ::1 (bracketed or not) are loopback."""
    assert is_loopback(host) is True


@pytest.mark.parametrize(
    "host",
    [
        "api.sume.com",
        "localhost.example.com",
        "notlocalhost",
        "10.0.0.1",
        "0.0.0.0",
        "128.0.0.1",
        "::2",
        "[::2]",
        "",
        "not a host",
        "127.0.0.1.nip.io",
        "[[[",
    ],
)
def test_other_hosts_are_not_loopback(host: str) -> None:
    """Every other host, and garbage, is not loopback."""
    assert is_loopback(host) is False


@pytest.mark.parametrize(
    "url",
    [
        "https://api.sume.com/v1",
        "http://127.0.0.1:8080/v1",
        "http://localhost/",
        "http://[::1]:9000/x",
        "/relative",
    ],
)
def test_no_refusal_over_https_or_to_loopback(url: str) -> None:
    """https anywhere, plain http to loopback, and URLs without a scheme are allowed."""
    assert plain_http_refusal(url) is None


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://api.sume.com/v1/jobs?api_key=SECRET", "api.sume.com"),
        ("HTTP://API.Sume.com/v1", "api.sume.com"),
        ("http://127.0.0.1@evil.example/", "evil.example"),
        ("http://10.0.0.5:8080/", "10.0.0.5"),
    ],
)
def test_plain_http_off_loopback_is_refused(url: str, host: str) -> None:
    """Plain http off loopback is refused, naming only the host (never the path or query)."""
    refusal = plain_http_refusal(url)
    assert refusal == f"refusing to send the API key over plain http to {host}: use https"
    assert "SECRET" not in refusal


# --- origin and leaves_origin ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.sume.com/v1", ("https", "api.sume.com", 443)),
        ("http://api.sume.com/v1", ("http", "api.sume.com", 80)),
        ("https://api.sume.com:8443/v1", ("https", "api.sume.com", 8443)),
        ("http://api.sume.com:443/", ("http", "api.sume.com", 443)),
        ("HTTPS://API.Sume.COM/V1", ("https", "api.sume.com", 443)),
        ("https://[::1]:8443/x", ("https", "::1", 8443)),
        ("http://[::1]/", ("http", "::1", 80)),
        ("ftp://files.example/", ("ftp", "files.example", None)),
    ],
)
def test_origin(url: str, expected: Tuple[str, str, Optional[int]]) -> None:
    """(scheme, host, port), lower-cased, with 80/443 filled in for http/https."""
    assert origin(url) == expected


@pytest.mark.parametrize(
    ("previous", "url"),
    [
        ("https://api.sume.com/v1/a", "https://api.sume.com/v1/b?x=1"),
        ("https://api.sume.com/v1", "https://API.SUME.COM:443/v2"),
        ("http://api.sume.com/", "https://api.sume.com/"),
        ("http://api.sume.com:80/", "https://api.sume.com:443/"),
    ],
)
def test_same_origin_or_https_upgrade_stays(previous: str, url: str) -> None:
    """Same scheme, host and port stays; so does http:80 upgraded to https:443 on the same host."""
    assert leaves_origin(previous, url) is False


@pytest.mark.parametrize(
    ("previous", "url"),
    [
        ("https://api.sume.com/", "https://evil.example/"),
        ("https://api.sume.com/", "https://cdn.sume.com/"),
        ("https://api.sume.com/", "https://api.sume.com:8443/"),
        ("https://api.sume.com/", "http://api.sume.com/"),
        ("http://api.sume.com:8080/", "https://api.sume.com/"),
        ("http://api.sume.com/", "https://api.sume.com:8443/"),
        ("http://api.sume.com/", "https://evil.example/"),
    ],
)
def test_other_host_port_or_downgrade_leaves(previous: str, url: str) -> None:
    """Another host or port leaves the origin, and so does an https to http downgrade."""
    assert leaves_origin(previous, url) is True


# --- StrEnum -----------------------------------------------------------------------------------


class Color(StrEnum):
    """A test enum."""

    RED = "red"


def test_str_enum_str_is_its_value() -> None:
    """str(), format() and == all see the value, as enum.StrEnum does on 3.11."""
    assert str(Color.RED) == "red"
    assert f"{Color.RED}" == "red"
    assert Color.RED == "red"  # type: ignore[comparison-overlap]  # mypy cannot see the str mixin
    assert isinstance(Color.RED, str)
    assert str(Outcome.RETRIED_OK) == "retried_ok"
    assert str(Verdict.NO_RETRY) == "no_retry"
    assert Color("red") is Color.RED
