"""Fleet state has boundaries: one entry per (origin, key actually sent), on the default fleet.

Each test throttles one (origin, key) with a 429 + ``Retry-After: 30`` on a real loopback
server, then shows which other requests that cooldown holds: with 5 s of budget a held
request is refused unsent (``record.fleet_refused``), a free one goes at once.
"""

from __future__ import annotations

import math
from typing import Iterator, List, Mapping, Optional, Tuple

import pytest
import requests

from sume_urllib3 import Policy, SumeAdapter, SumeRetryError, SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.pacing import _signals as keyid_module
from sume_urllib3.pacing._fleet import Grant, fleet_key
from sume_urllib3.pacing._signals import origin_name
from sume_urllib3.testing import FakeSume, Reply

KEY = "sk_test_boundaries_SECRET_0123456789"
TENANT_A = "sk_test_tenant_A_SECRET_0123456789"
TENANT_B = "sk_test_tenant_B_SECRET_0123456789"
SHORT = Policy(max_elapsed=5.0)  # a 30 s cooldown is past this deadline: refused, not slept


@pytest.fixture
def servers() -> Iterator[Tuple[FakeSume, FakeSume]]:
    """Two servers ("staging" and "production"): /v1/throttled answers 429 Retry-After 30."""
    with FakeSume() as staging, FakeSume() as production:
        for fake in (staging, production):
            fake.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
            fake.script("GET", "/v1/me", 200)
        yield staging, production


def throttle(session: SumeSession, **kwargs: object) -> None:
    """One 429 with Retry-After 30: the policy gives up at once, the fleet starts a cooldown."""
    with pytest.raises(SumeRetryError) as raised:
        session.get("/throttled", **kwargs)  # type: ignore[arg-type]
    record = raised.value.record
    assert (429, 1, False) == (record.status, record.attempts, record.fleet_refused)


def held(session: SumeSession, **kwargs: object) -> bool:
    """True when the request was refused unsent by a cooldown; False when it went at once."""
    refused: Optional[SumeRetryError] = None
    try:
        response = session.get("/me", **kwargs)  # type: ignore[arg-type]
    except SumeRetryError as exc:
        refused = exc
    if refused is None:
        assert (200, 0.0) == (response.status_code, response.sume.paced)
        return False
    assert refused.record.fleet_refused
    assert "cooldown" in (refused.record.reason or "")
    assert refused.retry_in is not None
    assert refused.retry_in > 25.0  # the cooldown's end (held requests are spread after it)
    return True


def test_two_environments_with_one_key_never_share_a_cooldown(servers: Tuple[FakeSume, FakeSume]) -> None:
    """Staging's 429 holds staging's requests only; production with the same key goes at once."""
    staging, production = servers
    on_staging = SumeSession(KEY, base_url=staging.url + "/v1", policy=SHORT)
    on_production = SumeSession(KEY, base_url=production.url + "/v1", policy=SHORT)

    throttle(on_staging)

    assert not held(on_production)
    assert held(on_staging)
    assert [] == staging.requests_for("GET", "/v1/me")  # refused unsent
    assert 1 == len(production.requests_for("GET", "/v1/me"))


def test_tenants_keys_set_per_call_are_paced_apart(servers: Tuple[FakeSume, FakeSume]) -> None:
    """A keyless session sending each tenant's x-api-key: tenant A's 429 never refuses tenant B."""
    fake, _ = servers
    session = SumeSession(base_url=fake.url + "/v1", policy=SHORT)

    throttle(session, headers={"x-api-key": TENANT_A})

    assert not held(session, headers={"x-api-key": TENANT_B})
    assert not held(session)  # keyless calls: an entry of their own
    assert held(session, headers={"x-api-key": TENANT_A})  # the key is held, on every route
    sent = [r.headers.get("x-api-key") for r in fake.requests_for("GET", "/v1/me")]
    assert [TENANT_B, None] == sent


def test_tenants_keys_in_session_headers_are_paced_apart(servers: Tuple[FakeSume, FakeSume]) -> None:
    """session.headers set per tenant (one session reused): paced as the key it sends."""
    fake, _ = servers
    session = SumeSession(base_url=fake.url + "/v1", policy=SHORT)
    session.headers["x-api-key"] = TENANT_A
    throttle(session)

    session.headers["x-api-key"] = TENANT_B
    assert not held(session)
    session.headers["x-api-key"] = TENANT_A
    assert held(session)


def test_a_key_sent_as_bearer_or_x_api_key_is_one_quota(servers: Tuple[FakeSume, FakeSume]) -> None:
    """Tenant A throttled through Authorization: Bearer; A through x-api-key is held too, B is not."""
    fake, _ = servers
    bearer = SumeSession(base_url=fake.url + "/v1", policy=SHORT, auth_header="bearer")
    plain = SumeSession(base_url=fake.url + "/v1", policy=SHORT)

    throttle(bearer, headers={"Authorization": "Bearer " + TENANT_A})

    assert held(plain, headers={"x-api-key": TENANT_A})
    assert not held(bearer, headers={"Authorization": "Bearer " + TENANT_B})


def test_a_call_that_sends_its_own_key_is_paced_as_that_key(servers: Tuple[FakeSume, FakeSume]) -> None:
    """The session's key is throttled; a call overriding x-api-key is paced as the key it sends."""
    fake, _ = servers
    session = SumeSession(KEY, base_url=fake.url + "/v1", policy=SHORT)
    throttle(session)

    assert not held(session, headers={"x-api-key": TENANT_B})
    assert held(session)
    assert [TENANT_B] == [r.headers["x-api-key"] for r in fake.requests_for("GET", "/v1/me")]


def test_keyless_requests_are_paced_per_origin(servers: Tuple[FakeSume, FakeSume]) -> None:
    """No key anywhere: one origin's 429 holds that origin's keyless requests, not another's."""
    staging, production = servers
    on_staging = SumeSession(base_url=staging.url + "/v1", policy=SHORT)
    on_production = SumeSession(base_url=production.url + "/v1", policy=SHORT)
    throttle(on_staging)

    assert not held(on_production)
    assert held(on_staging)


def test_prepare_request_and_send_share_the_sessions_entry(servers: Tuple[FakeSume, FakeSume]) -> None:
    """session.send(session.prepare_request(...)) is paced under the same entry as session.get."""
    fake, _ = servers
    session = SumeSession(KEY, base_url=fake.url + "/v1", policy=SHORT)
    throttle(session)

    prepared = session.prepare_request(requests.Request("GET", "/me"))
    with pytest.raises(SumeRetryError) as raised:
        session.send(prepared)

    assert raised.value.record.fleet_refused
    assert [] == fake.requests_for("GET", "/v1/me")


def test_an_adapter_alone_keys_by_the_origin_and_key_of_each_request(
    servers: Tuple[FakeSume, FakeSume],
) -> None:
    """SumeAdapter on a plain requests.Session: the same key to two servers is two entries."""
    staging, production = servers
    session = requests.Session()
    session.mount("http://", SumeAdapter(Policy(max_elapsed=5.0)))
    headers = {"x-api-key": KEY}

    with pytest.raises(SumeRetryError):
        session.get(staging.url + "/v1/throttled", headers=headers, timeout=5)

    assert 200 == session.get(production.url + "/v1/me", headers=headers, timeout=5).status_code
    assert 200 == session.get(staging.url + "/v1/me", headers={"x-api-key": TENANT_B}, timeout=5).status_code
    with pytest.raises(SumeRetryError) as raised:
        session.get(staging.url + "/v1/me", headers=headers, timeout=5)
    assert raised.value.record.fleet_refused


class KeysSeen:
    """A Fleet that hands every call to a LocalFleet and keeps the entry names it was given."""

    def __init__(self) -> None:
        self.inner = LocalFleet()
        self.keys: List[str] = []

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        self.keys.append(key_id)
        return self.inner.acquire(key_id, time_left=time_left, retry=retry, not_before=not_before)

    def release(
        self, key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> None:
        self.inner.release(key_id, grant, status, headers)


def test_a_fleet_is_given_hashes_of_origin_and_key_never_a_key(fake_sume: FakeSume) -> None:
    """Every entry a fleet sees is fleet_key(key sent, origin): never the key, never "anonymous"."""
    fake_sume.script("GET", "/v1/me", 200)
    fleet = KeysSeen()
    session = SumeSession(KEY, base_url=fake_sume.url + "/v1", fleet=fleet)
    where = origin_name(fake_sume.url)

    session.get("/me")
    session.get("/me", headers={"x-api-key": TENANT_A})
    session.get("/me", headers={"x-api-key": None})  # requests drops a None header: keyless

    assert [fleet_key(KEY, where), fleet_key(TENANT_A, where), fleet_key(KEY, where)] == fleet.keys
    assert not any(KEY in key or TENANT_A in key for key in fleet.keys)


def test_the_success_path_hashes_each_origin_and_key_once(
    fake_sume: FakeSume, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty calls with a tenant's key and fifty with the session's: at most one hash each."""
    fake_sume.script("GET", "/v1/me", 200)
    hashed: List[Optional[str]] = []
    real = keyid_module.fleet_key

    def counting(api_key: Optional[str], origin: str = "") -> str:
        hashed.append(origin)
        return real(api_key, origin)

    monkeypatch.setattr(keyid_module, "fleet_key", counting)
    session = SumeSession(KEY + "_once", base_url=fake_sume.url + "/v1")
    for _ in range(50):
        session.get("/me")
        session.get("/me", headers={"x-api-key": TENANT_A + "_once"})

    assert 2 == len(hashed)
    assert math.isclose(0.0, LocalFleet.default().stats()["waited_cooldown"])
