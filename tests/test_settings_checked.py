"""Every setting is checked where it is given, and what construction accepts works on every request.

One table lists each argument of ``Policy``, ``SumeRetry``, ``SumeAdapter`` and ``SumeSession``,
each environment variable the library reads and each key of Django's ``SUME`` setting, with the
values it cannot use: NaN, inf, negatives, sizes past what ``time.sleep`` and socket timeouts
accept, wrong types, an unparsable base URL or port. Each is refused at construction with a
``ConfigurationError`` that names the argument and says what it accepts. Then the largest and
oddest values construction does accept go through a retried request on a loopback server.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import requests
from urllib3.util.timeout import Timeout

from sume_urllib3 import (
    ConfigurationError,
    LocalFleet,
    Policy,
    RetryBudget,
    SumeAdapter,
    SumeMetrics,
    SumeRetry,
    SumeSession,
)
from sume_urllib3._checks import MAX_SECONDS
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

#: (constructor, argument, build(value), bad values)
Row = Tuple[str, str, Callable[[Any], Any], Tuple[Any, ...]]


def rows() -> Iterator[Row]:
    """Every argument of every constructor, with the values it cannot use."""
    for field in ("max_elapsed",):
        yield "Policy", field, lambda v, f=field: Policy(**{f: v}), (*BAD_SECONDS, 0)
    for field in ("backoff_base", "backoff_max", "in_use_wait", "retry_after_spread"):
        yield "Policy", field, lambda v, f=field: Policy(**{f: v}), BAD_SECONDS
    yield "Policy", "retry_after_jitter", lambda v: Policy(retry_after_jitter=v), (*BAD_SECONDS, 1.5)
    yield "Policy", "max_retries", lambda v: Policy(max_retries=v), (-1, 1.5, "3", True, None, 10**6)
    yield "Policy", "peek_limit", lambda v: Policy(peek_limit=v), (-1, 1.5, "3", True, None, 2**40)
    yield (
        "Policy",
        "jitter",
        lambda v: Policy(jitter=v),
        ((0.5,), (1, 0.5), (0, 2), (0, 0), "0.5,1", (math.nan, 1)),
    )
    yield "Policy", "trust_body", lambda v: Policy(trust_body=v), BAD_FLAGS
    yield (
        "Policy",
        "rules",
        lambda v: Policy(rules=v),
        (
            5,
            "429",
            [(429,)],
            [(999, None, "retry")],
            [(429, None, "maybe")],
            [(429, None, "retry", TOO_LONG)],
            [(429, None, "retry", math.nan)],
            [("429", None, "retry")],
        ),
    )
    for name, build in (
        ("SumeRetry", lambda **kw: SumeRetry(**kw)),
        ("SumeAdapter", lambda **kw: SumeAdapter(**kw)),
        ("SumeSession", lambda **kw: SumeSession("sk_test", **kw)),
    ):
        yield name, "policy", lambda v, b=build: b(policy=v), (5, {"max_retries": 3}, "Policy()")
        yield name, "sleep", lambda v, b=build: b(sleep=v), BAD_CALLABLES
        yield name, "clock", lambda v, b=build: b(clock=v), BAD_CALLABLES
        yield name, "rng", lambda v, b=build: b(rng=v), BAD_RNGS
        yield name, "retry_budget", lambda v, b=build: b(retry_budget=v), (5, "10%", True)
        yield name, "observers", lambda v, b=build: b(observers=v), (5, "LoggingObserver", [object()])
    for name, build in (
        ("SumeAdapter", lambda **kw: SumeAdapter(**kw)),
        ("SumeSession", lambda **kw: SumeSession("sk_test", **kw)),
    ):
        yield name, "timeout", lambda v, b=build: b(timeout=v), BAD_TIMEOUTS
        yield name, "raise_on_give_up", lambda v, b=build: b(raise_on_give_up=v), BAD_FLAGS
        yield name, "fleet", lambda v, b=build: b(fleet=v), (5, "local", LocalFleet)
    yield "SumeRetry", "total", lambda v: SumeRetry(total=v), ("3", 1.5, math.nan, [3])
    for counter in ("connect", "read", "redirect", "status", "other"):
        yield "SumeRetry", counter, lambda v, c=counter: SumeRetry(**{c: v}), ("3", 1.5, math.nan)
    yield (
        "SumeRetry",
        "allowed_methods",
        lambda v: SumeRetry(allowed_methods=v),
        (None, "GET", ["GET", "CONNECT"]),
    )
    yield "SumeRetry", "status_forcelist", lambda v: SumeRetry(status_forcelist=v), ("503", ["503"], 503)
    yield "SumeRetry", "backoff_factor", lambda v: SumeRetry(backoff_factor=v), (0.5, 2)
    yield (
        "SumeRetry",
        "remove_headers_on_redirect",
        lambda v: SumeRetry(remove_headers_on_redirect=v),
        (5, [5]),
    )
    yield "SumeAdapter", "max_retries", lambda v: SumeAdapter(max_retries=v), (3, "3", SumeRetry)
    yield (
        "SumeAdapter",
        "pool_connections",
        lambda v: SumeAdapter(pool_connections=v),
        (0, -1, "10", 1.5, 10**7),
    )
    yield "SumeAdapter", "pool_maxsize", lambda v: SumeAdapter(pool_maxsize=v), (0, -1, "10", 1.5, 10**7)
    yield "SumeAdapter", "pool_block", lambda v: SumeAdapter(pool_block=v), BAD_FLAGS
    yield "SumeSession", "api_key", lambda v: SumeSession(v), (5, b"sk_test", f"{SECRET} ", f"{SECRET}\n")
    yield "SumeSession", "base_url", lambda v: SumeSession("sk_test", base_url=v), BAD_BASE_URLS
    yield "SumeSession", "auth_header", lambda v: SumeSession("sk_test", auth_header=v), ("basic", 5, SECRET)
    yield "SumeSession", "metrics", lambda v: SumeSession("sk_test", metrics=v), (5, "prometheus", {})


CASES = [
    pytest.param(build, argument, value, id=f"{owner}-{argument}-{value!r:.40}")
    for owner, argument, build, values in rows()
    for value in values
]


@pytest.mark.parametrize(("build", "argument", "value"), CASES)
def test_a_value_that_cannot_work_is_refused_where_it_is_given(
    build: Callable[[Any], Any], argument: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The constructor raises ConfigurationError naming the argument and what it accepts, no secret."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    monkeypatch.delenv("SUME_API_BASE_URL", raising=False)

    with pytest.raises(ConfigurationError) as refused:
        build(value)

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


def django_rows() -> Iterator[Tuple[str, Any]]:
    """Each key of Django's SUME setting with a value it cannot use."""
    yield "MAX_ELAPSED", 1e10
    yield "MAX_ELAPSED", math.nan
    yield "BACKOFF_MAX", -1
    yield "MAX_RETRIES", "3"
    yield "PEEK_LIMIT", 2**40
    yield "TRUST_BODY", "false"
    yield "TIMEOUT", [5, 1e10]
    yield "TIMEOUT", math.inf
    yield "BASE_URL", "http://127.0.0.1:abc/v1"
    yield "BASE_URL", "http://[::1/v1"
    yield "API_KEY", f"{SECRET}\n"
    yield "AUTH_HEADER", "basic"
    yield "RAISE_ON_GIVE_UP", "yes"
    yield "RETRY_BUDGET", 1
    yield "OBSERVERS", 5
    yield "FLEET", 5


@pytest.mark.parametrize(("key", "value"), list(django_rows()), ids=lambda v: repr(v)[:30])
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

    assert (201, 1) == (response.status_code, response.sume.attempts - 1)


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
