"""Under the `responses` mock: keys, table decisions and bodies (it never sleeps or times)."""

from __future__ import annotations

from typing import Iterator

import pytest

responses = pytest.importorskip("responses")

from sume_urllib3 import Outcome, SumeSession  # noqa: E402

BASE = "https://api.sume.com/v1"


@pytest.fixture
def mocked() -> Iterator[object]:
    """An active responses mock."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def error(code: str) -> dict:  # type: ignore[type-arg]
    return {"error": {"code": code, "message": code}, "request_id": "req_" + code}


def test_the_key_is_added_even_though_add_headers_never_runs(mocked: responses.RequestsMock) -> None:
    """The Idempotency-Key is injected in send(), which responses still calls."""
    mocked.add(responses.POST, BASE + "/avatars", json={"id": 1}, status=201)

    with SumeSession("sk_test") as session:
        session.post("/avatars", json={})

    assert 36 == len(mocked.calls[0].request.headers["Idempotency-Key"])


def test_table_decisions_and_bodies_hold_under_responses(mocked: responses.RequestsMock) -> None:
    """A 402 is returned as fix with its body; the call is made once."""
    mocked.add(responses.POST, BASE + "/runs", json=error("insufficient_credits"), status=402)

    with SumeSession("sk_test") as session:
        response = session.post("/runs", json={})

    assert (Outcome.FIX, "insufficient_credits") == (response.sume.outcome, response.json()["error"]["code"])
    assert 1 == len(mocked.calls)


def test_retry_then_success_under_responses(mocked: responses.RequestsMock) -> None:
    """503 then 201: retried once (responses skips the sleep), same key on both calls."""
    mocked.add(responses.POST, BASE + "/runs", json=error("service_unavailable"), status=503)
    mocked.add(responses.POST, BASE + "/runs", json={"id": 7}, status=201)

    with SumeSession("sk_test", sleep=lambda s: None) as session:
        response = session.post("/runs", json={})

    keys = {c.request.headers["Idempotency-Key"] for c in mocked.calls}
    assert (201, Outcome.RETRIED_OK, 1) == (response.status_code, response.sume.outcome, len(keys))


def test_body_override_under_responses(mocked: responses.RequestsMock) -> None:
    """A 503 with retryable=false in the body is not retried; its body stays readable."""
    body = {"error": {"code": "maintenance", "retryable": False}, "request_id": "req_m"}
    mocked.add(responses.GET, BASE + "/me", json=body, status=503)

    with SumeSession("sk_test") as session:
        response = session.get("/me")

    assert (Outcome.NO_RETRY, "req_m") == (response.sume.outcome, response.sume.request_id)
    assert "maintenance" == response.json()["error"]["code"]
