"""SumeSession reads the environment's proxies and CA bundle as requests does, and again only
when the environment changes (sume_urllib3/_environment.py)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

import pytest
import requests
import requests.sessions

from sume_urllib3 import SumeSession
from sume_urllib3._environment import ENVIRONMENT_ONLY, MAX_KEPT

from .raw_server import KEY, Loopback
from .test_session import URLS

pytestmark = pytest.mark.skipif(
    not ENVIRONMENT_ONLY, reason="urllib reads this platform's proxies from more than the environment"
)

_PROXY_VARIABLES = [name for name in os.environ if name.lower().endswith("_proxy")] + [
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
]


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment with no proxy or CA-bundle variable."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def environment_reads(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The URLs requests looked the environment's proxies up for, one per look."""
    reads: List[str] = []
    original = requests.sessions.get_environ_proxies

    def counted(url: str, no_proxy: Any = None) -> Dict[str, str]:
        reads.append(url)
        return original(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    return reads


def _session(url: str) -> SumeSession:
    return SumeSession(KEY, base_url=url + "/v1", timeout=5)


def test_requests_reads_the_environment_once_while_it_holds(
    raw_server: Callable[..., Loopback], monkeypatch: pytest.MonkeyPatch, environment_reads: List[str]
) -> None:
    api = raw_server()
    with _session(api.url) as session:
        for _ in range(3):
            session.get("/things")
        assert len(environment_reads) == 1
        monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")  # any change: requests is asked again
        session.get("/things")
        session.get("/things")
        assert len(environment_reads) == 2
        other = api.url.replace("127.0.0.1", "localhost") + "/v1/things"  # another origin
        session.get(other)
        session.get(other)
        session.get("/things")
        assert len(environment_reads) == 3


def test_what_it_returns_is_the_callers_to_change(environment_reads: List[str]) -> None:
    session = SumeSession(KEY, base_url="https://api.sume.test/v1")
    session.merge_environment_settings(URLS[0], {}, None, None, None)["proxies"]["https"] = "changed"
    assert session.merge_environment_settings(URLS[0], {}, None, None, None)["proxies"] == {}
    assert len(environment_reads) == 1


def test_a_setting_that_cannot_be_kept_is_merged_by_requests_every_time(environment_reads: List[str]) -> None:
    session = SumeSession(KEY, base_url="https://api.sume.test/v1")
    for _ in range(3):
        settings = session.merge_environment_settings(URLS[0], {}, None, None, ["/c", "/k"])  # a list
        assert settings["cert"] == ["/c", "/k"]
    assert len(environment_reads) == 3


def test_what_is_kept_is_bounded(environment_reads: List[str]) -> None:
    session = SumeSession(KEY, base_url="https://api.sume.test/v1")
    for n in range(MAX_KEPT * 3):
        session.merge_environment_settings(f"https://host{n}.test/", {}, None, None, None)
        session.merge_environment_settings(f"https://host{n}.test/", {}, None, None, None)  # kept
    assert len(environment_reads) == MAX_KEPT * 3  # each origin asked once
    assert len(session._environment[1]) <= MAX_KEPT
