"""Every setting is checked where it is given, and what construction accepts works on every request.

One table lists each argument of ``Policy``, ``SumeRetry``, ``SumeAdapter`` and ``SumeSession``,
each environment variable the library reads and each key of Django's ``SUME`` setting, with the
values it cannot use: NaN, inf, negatives, sizes past what ``time.sleep`` and socket timeouts
accept, wrong types, an unparsable base URL or port. Each is refused at construction with a
``ConfigurationError`` that names the argument and says what it accepts. Then the largest and
oddest values construction does accept go through a retried request on a loopback server.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
from typing import Any, Callable, Dict, List, Tuple

import pytest
import requests
from urllib3.util.timeout import Timeout

from sume_urllib3 import ConfigurationError, Policy, SumeAdapter, SumeRetry, SumeSession, sume_record
from sume_urllib3._config import MAX_SECONDS
from sume_urllib3.observe import SumeMetrics
from sume_urllib3.pacing import LocalFleet, RetryBudget
from sume_urllib3.testing import FakeSume, Reply

SECRET = "sk_live_SETTINGSsecret0123456789"
TOO_LONG = MAX_SECONDS * 10  # 1e10 s: a socket timeout this long raises OverflowError
NOT_NUMBERS = ("5", None, True, [5])
BAD_SECONDS = (math.nan, math.inf, -math.inf, -1, TOO_LONG, 10**400, "5", True)
BAD_FLAGS = ("false", 1, None, "yes")
BAD_CALLABLES = (5, "time.sleep", object())
BAD_RNGS = (5, "seed", object(), 0.5)
BAD_TIMEOUTS = (
    0,
    -1,
    math.nan,
    math.inf,
    TOO_LONG,
    "5",
    True,
    (5,),
    (5, 1, 1),
    (5, "30"),
    (math.nan, 5),
    (5, TOO_LONG),
    Timeout(connect=5, read=TOO_LONG),
    Timeout(total=TOO_LONG),
)
BAD_BASE_URLS = (
    "http://127.0.0.1:abc/v1",
    "http://127.0.0.1:99999/v1",
    "http://127.0.0.1:0/v1",
    "http://[::1/v1",
    "http://exa mple.com/v1",
    "ftp://api.sume.com/v1",
    "https:///v1",
    "api.sume.com/v1",
    f"https://user:{SECRET}@api.sume.com/v1",
    f"https://api.sume.com/v1?token={SECRET}",
    5,
    b"https://api.sume.com/v1",
)


def session(**kwargs: Any) -> SumeSession:
    """A SumeSession with a key, and the arguments under test."""
    kwargs.setdefault("api_key", "sk_test")
    return SumeSession(**kwargs)


#: What builds each constructor from keyword arguments.
BUILD: Dict[str, Callable[..., Any]] = {
    "Policy": Policy,
    "SumeRetry": SumeRetry,
    "SumeAdapter": SumeAdapter,
    "SumeSession": session,
}
SHARED: Dict[str, Tuple[Any, ...]] = {
    "policy": (5, {"max_retries": 3}, "Policy()"),
    "sleep": BAD_CALLABLES,
    "clock": BAD_CALLABLES,
    "rng": BAD_RNGS,
    "retry_budget": (5, "10%", True),
    "observers": (5, "LoggingObserver", [object()]),
}
SENDING: Dict[str, Tuple[Any, ...]] = {
    "timeout": BAD_TIMEOUTS,
    "raise_on_give_up": BAD_FLAGS,
    "fleet": (5, "local", LocalFleet),
}
#: (constructor, argument): the values it cannot use.
TABLE: Dict[Tuple[str, str], Tuple[Any, ...]] = {
    ("Policy", "max_elapsed"): (*BAD_SECONDS, 0),
    ("Policy", "backoff_base"): BAD_SECONDS,
    ("Policy", "backoff_max"): BAD_SECONDS,
    ("Policy", "in_use_wait"): BAD_SECONDS,
    ("Policy", "retry_after_spread"): BAD_SECONDS,
    ("Policy", "retry_after_jitter"): (*BAD_SECONDS, 1.5),
    ("Policy", "max_retries"): (-1, 1.5, "3", True, None, 10**6),
    ("Policy", "peek_limit"): (-1, 1.5, "3", True, None, 2**40),
    ("Policy", "jitter"): ((0.5,), (1, 0.5), (0, 2), (0, 0), "0.5,1", (math.nan, 1)),
    ("Policy", "trust_body"): BAD_FLAGS,
    ("Policy", "rules"): (
        5,
        "429",
        [(429,)],
        [(999, None, "retry")],
        [(429, None, "maybe")],
        [(429, None, "retry", TOO_LONG)],
        [(429, None, "retry", math.nan)],
        [("429", None, "retry")],
    ),
    **{
        (owner, name): values
        for owner in ("SumeRetry", "SumeAdapter", "SumeSession")
        for name, values in SHARED.items()
    },
    **{(owner, name): values for owner in ("SumeAdapter", "SumeSession") for name, values in SENDING.items()},
    ("SumeRetry", "total"): ("3", 1.5, math.nan, [3]),
    **{
        ("SumeRetry", name): ("3", 1.5, math.nan)
        for name in ("connect", "read", "redirect", "status", "other")
    },
    ("SumeRetry", "allowed_methods"): (None, "GET", ["GET", "CONNECT"]),
    ("SumeRetry", "status_forcelist"): ("503", ["503"], 503),
    ("SumeRetry", "backoff_factor"): (0.5, 2),
    ("SumeRetry", "remove_headers_on_redirect"): (5, [5]),
    ("SumeAdapter", "max_retries"): (3, "3", SumeRetry),
    **{
        (owner, name): values
        for owner in ("SumeAdapter", "SumeSession")
        for name, values in (
            ("pool_connections", (0, -1, "10", 1.5, 10**7)),
            ("pool_maxsize", (0, -1, "10", 1.5, 10**7)),
            ("pool_block", BAD_FLAGS),
        )
    },
    ("SumeSession", "api_key"): (5, b"sk_test", f"{SECRET} ", f"{SECRET}\n"),
    ("SumeSession", "base_url"): BAD_BASE_URLS,
    ("SumeSession", "auth_header"): ("basic", 5, SECRET),
    ("SumeSession", "metrics"): (5, "prometheus", {}),
}


def test_the_table_covers_every_argument() -> None:
    """Every Policy field and every named parameter of SumeRetry, SumeAdapter and SumeSession has a row."""
    expected = {("Policy", field.name) for field in dataclasses.fields(Policy)}
    for owner, cls in (("SumeRetry", SumeRetry), ("SumeAdapter", SumeAdapter), ("SumeSession", SumeSession)):
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                expected.add((owner, name))

    assert set() == expected - set(TABLE)


def _shown(value: Any) -> str:
    """``value``'s repr without memory addresses, so every pytest process names the case alike."""
    return repr(value).split(" at 0x")[0]


CASES = [
    pytest.param(owner, argument, value, id=f"{owner}-{argument}-{_shown(value):.40}")
    for (owner, argument), values in TABLE.items()
    for value in values
]


@pytest.mark.parametrize(("owner", "argument", "value"), CASES)
def test_a_value_that_cannot_work_is_refused_where_it_is_given(
    owner: str, argument: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The constructor raises ConfigurationError naming the argument and what it accepts, no secret."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    monkeypatch.delenv("SUME_API_BASE_URL", raising=False)

    with pytest.raises(ConfigurationError) as refused:
        BUILD[owner](**{argument: value})

    message = str(refused.value)
    assert argument in message
    accepted = ("must", "are not", "may never", "would", "not used", "give ")
    assert any(word in message for word in accepted), message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("variable", "value", "argument"),
    [
        ("SUME_API_KEY", f"{SECRET} ", "api_key"),
        ("SUME_API_KEY", "sk with space", "api_key"),
        ("SUME_API_BASE_URL", "http://127.0.0.1:abc/v1", "base_url"),
        ("SUME_API_BASE_URL", "http://[::1/v1", "base_url"),
        ("SUME_API_BASE_URL", f"https://api.sume.com/v1?token={SECRET}", "base_url"),
        ("SUME_API_BASE_URL", "ftp://api.sume.com/v1", "base_url"),
    ],
)
def test_an_environment_variable_that_cannot_work_is_refused_by_name(
    variable: str, value: str, argument: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SumeSession() reading a bad variable names the variable and the argument it stands for."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as refused:
        SumeSession()

    assert variable in str(refused.value)
    assert argument in str(refused.value)
    assert SECRET not in str(refused.value)


#: Each key of Django's SUME setting with values it cannot use.
DJANGO: Dict[str, Tuple[Any, ...]] = {
    "RULES": ([(999, None, "retry")], "429"),
    "MAX_RETRIES": ("3", -1),
    "MAX_ELAPSED": (TOO_LONG, math.nan, 0),
    "BACKOFF_BASE": (-1, math.inf),
    "BACKOFF_MAX": (-1, TOO_LONG),
    "JITTER": ((1, 0.5), "0.5"),
    "IN_USE_WAIT": (TOO_LONG, "1"),
    "TRUST_BODY": ("false",),
    "PEEK_LIMIT": (2**40, 1.5),
    "RETRY_AFTER_JITTER": (2, math.nan),
    "RETRY_AFTER_SPREAD": (TOO_LONG, -1),
    "API_KEY": (f"{SECRET}\n", 5),
    "BASE_URL": ("http://127.0.0.1:abc/v1", "http://[::1/v1", "http://exa mple.com/v1"),
    "AUTH_HEADER": ("basic", SECRET),
    "TIMEOUT": ([5, TOO_LONG], math.inf, "5"),
    "RAISE_ON_GIVE_UP": ("yes", 1),
    "RETRY_BUDGET": (1, "no"),
    "OBSERVERS": (5, ["no.such.Observer"]),
    "FLEET": (5, {"RATE": "ten a minute"}),
}


def test_the_django_table_covers_every_key() -> None:
    """Every key SUME may have is in the table above."""
    conf = pytest.importorskip("sume_urllib3.contrib.django.conf")

    assert sorted(conf.VALID_KEYS) == sorted(DJANGO)


@pytest.mark.parametrize(
    ("key", "value"),
    [(key, value) for key, values in DJANGO.items() for value in values],
    ids=lambda v: repr(v)[:30],
)
def test_a_django_setting_that_cannot_work_is_an_error_naming_its_key(key: str, value: Any) -> None:
    """``SUME = {KEY: bad}`` is a system check error that names SUME["KEY"], and echoes no secret."""
    conf = pytest.importorskip("sume_urllib3.contrib.django.conf")

    resolved = conf.resolve({key: value}, {})

    assert resolved.errors, resolved.problems
    assert any(f'SUME["{key}"]' in problem.msg for problem in resolved.errors)
    assert not any(SECRET in problem.msg or SECRET in problem.hint for problem in resolved.problems)


def test_a_django_environment_base_url_that_cannot_work_is_an_error_naming_the_variable() -> None:
    """SUME_API_BASE_URL with a port that is not a number is reported under its own name."""
    conf = pytest.importorskip("sume_urllib3.contrib.django.conf")

    resolved = conf.resolve({}, {"SUME_API_BASE_URL": "http://127.0.0.1:abc/v1"})

    assert [problem.msg for problem in resolved.errors if "SUME_API_BASE_URL" in problem.msg]


# -- what construction accepts works ---------------------------------------------------------------

#: name: (SumeSession keyword arguments besides the base URL) at the edges of what is accepted.
ACCEPTED: Dict[str, Dict[str, Any]] = {
    "longest max_elapsed, no read timeout": {"policy": Policy(max_elapsed=MAX_SECONDS), "timeout": (5, None)},
    "longest max_elapsed, no timeout": {"policy": Policy(max_elapsed=MAX_SECONDS), "timeout": None},
    "longest timeouts": {"timeout": (MAX_SECONDS, MAX_SECONDS)},
    "longest urllib3 Timeout": {"timeout": Timeout(connect=MAX_SECONDS, read=MAX_SECONDS, total=MAX_SECONDS)},
    "longest backoff and waits": {
        "policy": Policy(backoff_max=MAX_SECONDS, in_use_wait=MAX_SECONDS, retry_after_spread=MAX_SECONDS)
    },
    "SystemRandom": {"rng": random.SystemRandom()},
    "a callable rng": {"rng": lambda: 0.999},
    "a Random": {"rng": random.Random(3)},
    "no fleet, no budget": {"fleet": None, "retry_budget": None},
    "a fleet and a budget of its own": {"fleet": LocalFleet(), "retry_budget": RetryBudget()},
    "metrics of its own": {"metrics": SumeMetrics()},
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_construction_accepts_works_on_a_retried_request(name: str) -> None:
    """A 503 then a 201 on a loopback server: retried once and answered, on real time and real sockets."""
    kwargs = dict(ACCEPTED[name])
    policy = kwargs.pop("policy", Policy())
    # Short real waits: the retry sleeps for real, so the values under test meet real sockets and clocks.
    policy = policy.replace(backoff_base=0.01, jitter=(0.5, 1.0))
    with FakeSume() as fake, SumeSession(
        "sk_test", base_url=fake.url + "/v1/", policy=policy, **kwargs
    ) as session:
        fake.script("POST", "/v1/avatars", Reply.error(503, "queue_full"), Reply(201, json={"id": "av_1"}))

        response = session.post("/avatars", json={})

    record = sume_record(response)
    assert record is not None
    assert (201, 2) == (response.status_code, record.attempts)


def test_a_base_url_with_a_port_is_accepted_and_used() -> None:
    """An explicit port in the base URL, checked at construction, is the port requests go to."""
    with FakeSume() as fake:
        port = int(fake.url.rsplit(":", 1)[1])
        fake.script("GET", "/v1/me", Reply(200, json={"ok": True}))
        with SumeSession("sk_test", base_url=f"http://127.0.0.1:{port}/v1") as session:
            assert 200 == session.get("/me").status_code


def accepted_rows() -> List[Tuple[str, Callable[[], Any]]]:
    """Values at the edge of each check that must still be accepted."""
    return [
        ("max_elapsed at the limit", lambda: Policy(max_elapsed=MAX_SECONDS)),
        ("waits of 0", lambda: Policy(backoff_base=0, backoff_max=0, in_use_wait=0)),
        ("an int number of seconds", lambda: Policy(max_elapsed=30)),
        ("SumeRetry(3)", lambda: SumeRetry(3)),
        ("SumeRetry(total=False)", lambda: SumeRetry(total=False)),
        ("SumeRetry(redirect=0)", lambda: SumeRetry(redirect=0)),
        ("a callable rng", lambda: SumeRetry(rng=random.random)),
        ("pool sizes", lambda: SumeAdapter(pool_connections=1, pool_maxsize=1, pool_block=True)),
        ("timeout as a urllib3 Timeout", lambda: SumeAdapter(timeout=Timeout(connect=1, read=None))),
        ("a session without any argument", lambda: SumeSession()),
        ("a base URL with a trailing slash", lambda: SumeSession(base_url="https://api.sume.com:8443/v1/")),
    ]


@pytest.mark.parametrize(("name", "build"), accepted_rows(), ids=[row[0] for row in accepted_rows()])
def test_values_at_the_edge_of_each_check_are_accepted(
    name: str, build: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks refuse what cannot work, not what is merely unusual."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    monkeypatch.delenv("SUME_API_BASE_URL", raising=False)

    built = build()

    assert built is not None
    if isinstance(built, requests.Session):
        built.close()
