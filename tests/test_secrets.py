"""The API key never leaks: not in logs (ours or urllib3's, at DEBUG), errors, reprs or records.

Every fault path of ``test_faults.py`` is replayed with a distinctive key, and everything a
caller or an operator could see afterwards is searched for it: log lines and their structured
extras, exception messages, reprs and tracebacks, records and their pickles, observer events,
and the reprs of the session, adapter and retry.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import traceback
from typing import Any, Callable, Iterable, Iterator, List

import pytest
import requests

from sume_urllib3 import (
    ConfigurationError,
    Policy,
    RetryEvent,
    SumeRecord,
    SumeRetryError,
    SumeSession,
)
from sume_urllib3.testing import FakeSume, RecordingObserver, Reply

MakeSession = Callable[..., SumeSession]
API_KEY = "sk_live_Q7zLEAKCHECKx9f3a91c2e5b8d046"
#: Any of these in a text means (part of) the key escaped.
FRAGMENTS = (API_KEY, API_KEY[8:], "LEAKCHECK")



def texts_of(thing: Any) -> Iterator[str]:
    """Every text a person or a log pipeline could get out of ``thing``."""
    yield repr(thing)
    yield str(thing)
    if isinstance(thing, BaseException):
        yield "".join(traceback.format_exception(type(thing), thing, thing.__traceback__))
        yield repr(thing.args)
        for linked in (
            thing.__cause__,
            thing.__context__,
            getattr(thing, "sume", None),
            getattr(thing, "record", None),
        ):
            if linked is not None and linked is not thing:
                yield from texts_of(linked)
    if isinstance(thing, SumeRetryError):
        yield pickle.dumps(thing).decode("latin-1")
    if isinstance(thing, (SumeRecord, RetryEvent)):
        yield str(dataclasses.asdict(thing))
        yield pickle.dumps(thing).decode("latin-1")
    if isinstance(thing, requests.Response):
        yield from texts_of(getattr(thing, "sume", None))


def leaks(things: Iterable[Any], caplog: pytest.LogCaptureFixture) -> List[str]:
    texts = [caplog.text]
    for record in caplog.records:
        texts.append(record.getMessage())
        texts.append(repr(vars(record)))  # structured extras too
    for thing in things:
        texts.extend(texts_of(thing))
    return [text[:300] for text in texts if any(fragment in text for fragment in FRAGMENTS)]


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger (sume_urllib3, urllib3, requests) captured at DEBUG on the root."""
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def session(make_session: MakeSession) -> Callable[..., SumeSession]:
    def make(**kwargs: Any) -> SumeSession:
        kwargs.setdefault("policy", Policy(max_retries=2))
        kwargs.setdefault("timeout", (2, 0.1))
        return make_session(api_key=API_KEY, **kwargs)

    return make


def everything(session: SumeSession, collected: RecordingObserver, *outcomes: Any) -> List[Any]:
    """Outcomes plus the objects every caller can repr."""
    seen = [*collected.retries, *collected.outcomes]
    return [*outcomes, session, session.adapter, session.adapter.retry, session.metrics, *seen]


def run(session: SumeSession, method: str, path: str, **kwargs: Any) -> Any:
    """Send and return the response, or the exception it raised."""
    try:
        response = session.request(method, path, **kwargs)
        _ = response.content
        return response
    except requests.exceptions.RequestException as exc:
        return exc


# -- fault paths ------------------------------------------------------------------------------------

FAULTS = {
    "drop": ("GET", [Reply(drop="before_headers")], requests.exceptions.ConnectionError),
    "read-timeout": ("GET", [Reply(200, delay=1.0)], requests.exceptions.ReadTimeout),
    "503-give-up": ("POST", [Reply.error(503, "queue_full", retry_after="1")], SumeRetryError),
    "cut-body": (
        "GET",
        [Reply(200, json={"a": "x" * 100}, chunked=True, truncate=30)],
        requests.exceptions.ChunkedEncodingError,
    ),
    "401": ("GET", [Reply.error(401, "unauthorized", message="bad key")], requests.Response),
    "503-then-ok": ("POST", [Reply.error(503), Reply(201, json={"id": 1})], requests.Response),
}


@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_no_fault_path_leaks_the_key(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture, fault: str, auth_header: str
) -> None:
    """Drop, timeout, give-up, broken body, 401 and retry-then-success: the key shows up nowhere."""
    method, replies, seen = FAULTS[fault]
    fake.script(method, "/v1/x", *replies)
    collected = RecordingObserver()
    sume = session(auth_header=auth_header, observers=[collected])

    outcome = run(sume, method, "/x", json={})

    assert isinstance(outcome, seen)
    assert [] == leaks(everything(sume, collected, outcome), debug_logs)
    assert any(
        r.name.startswith("urllib3") for r in debug_logs.records
    )  # urllib3's DEBUG lines were searched
    sent = fake.requests[0].headers
    assert API_KEY in (sent.get("x-api-key"), (sent.get("Authorization") or "")[len("Bearer ") :])


@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
def test_a_redirect_to_another_host_leaks_the_key_nowhere(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture, auth_header: str
) -> None:
    """Leaving the host strips the key from the request, and nothing logs or records it."""
    other = fake.url.replace("127.0.0.1", "localhost") + "/v1/landing"
    fake.script("GET", "/v1/x", Reply(302, headers={"Location": other}, body=b""))
    fake.script("GET", "/v1/landing", Reply.error(503, "queue_full"))
    collected = RecordingObserver()
    sume = session(auth_header=auth_header, observers=[collected])

    outcome = run(sume, "GET", "/x")

    assert isinstance(outcome, SumeRetryError)
    assert [] == leaks(everything(sume, collected, outcome), debug_logs)
    landed = [r for r in fake.requests if r.path == "/v1/landing"]
    assert 3 == len(landed)
    assert not [r for r in landed if any(f in repr(dict(r.headers)) for f in FRAGMENTS)]


# -- configuration errors ---------------------------------------------------------------------------


def test_both_auth_headers_error_does_not_echo_either_value(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture
) -> None:
    """The "send only one" error names the headers, never their values."""
    sume = session()

    with pytest.raises(ConfigurationError, match="send only one") as info:
        sume.get("/x", headers={"Authorization": "Bearer " + API_KEY})

    assert [] == leaks([info.value, sume], debug_logs)
    assert [] == fake.requests


def test_plain_http_error_does_not_echo_the_key(debug_logs: pytest.LogCaptureFixture) -> None:
    """Refusing to send the key over plain http names the host only."""
    sume = SumeSession(API_KEY, base_url="http://api.example.com/v1")

    with pytest.raises(ConfigurationError, match="plain http") as info:
        sume.get("/me")

    assert [] == leaks([info.value, sume], debug_logs)


@pytest.mark.parametrize(
    "bad_key",
    [
        "sk with space\n",
        API_KEY + " ",
        API_KEY + "\r\nX-Injected: 1",
        "sk_naïve_" + API_KEY,
    ],
    ids=["space-newline", "trailing-space", "header-injection", "non-ascii"],
)
def test_a_malformed_key_is_refused_without_echoing_it(
    bad_key: str, debug_logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key that is not visible ASCII is a ConfigurationError that does not repeat the key."""
    with pytest.raises(ConfigurationError, match="api_key") as direct:
        SumeSession(bad_key)
    monkeypatch.setenv("SUME_API_KEY", bad_key)
    errors: List[Any] = [direct.value]
    with pytest.raises(ConfigurationError, match="api_key") as from_env:
        SumeSession()
    errors.append(from_env.value)

    texts = [t for e in errors for t in texts_of(e)]
    assert not [t for t in texts if "sk with space" in t or any(f in t for f in FRAGMENTS)]
    assert [] == leaks([], debug_logs)


def test_an_empty_key_means_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """SumeSession(os.environ.get("SUME_API_KEY", "")) with nothing set sends no key."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)

    assert not SumeSession("").has_api_key


@pytest.mark.parametrize(
    "base_url", [f"ftp://user:{API_KEY}@api.sume.com/v1", f"http://:{API_KEY}@/v1"], ids=["ftp", "no-host"]
)
def test_a_bad_base_url_error_does_not_echo_credentials(base_url: str) -> None:
    """A base URL carrying a secret is refused without repeating the secret."""
    with pytest.raises(ConfigurationError, match="base_url") as info:
        SumeSession("sk_other", base_url=base_url)

    assert not [t for t in texts_of(info.value) if any(f in t for f in FRAGMENTS)]
