"""The rules of a redirect hop (sume_urllib3/_redirects.py): what is left behind, which body goes on."""

from __future__ import annotations

from sume_urllib3._redirects import left_behind, next_method, redirect_refusal, redirect_wait


def test_a_redirects_retry_after_is_waited_only_when_it_fits() -> None:
    """Retry-After on a redirect: waited when it fits in the time left, else not waited at all."""
    assert redirect_wait(2.0, 5.0) == 2.0
    assert redirect_wait(4.0, 1.0) == 0.0
    assert redirect_wait(None, 1.0) == 0.0
    assert redirect_wait(-1.0, 1.0) == 0.0


def test_a_redirect_that_resends_a_spent_body_is_refused_but_a_303() -> None:
    """A 303 always becomes a GET without a body; urllib3 sends the body again on 301/302/307/308."""
    assert redirect_refusal("PUT", 303, replayable=False, lone=False) is None
    for status in (301, 302, 307, 308):
        refused = redirect_refusal("PUT", status, replayable=False, lone=False) or ""
        assert refused.startswith(f"{status} redirect not followed")
    assert redirect_refusal("PUT", 308, replayable=True, lone=False) is None


def test_what_a_hop_leaves_behind() -> None:
    """Both auth headers when the hop leaves the origin; the key when the hop is no longer keyed."""
    same, other = "https://api.sume.test/v1/a", "https://elsewhere.test/b"
    assert left_behind(same, "https://api.sume.test/v1/b", "POST") == ()
    assert left_behind(same, other, "POST") == ("x-api-key", "Authorization")
    assert left_behind(same, other, "GET") == ("x-api-key", "Authorization", "Idempotency-Key")
    assert left_behind(same, "https://api.sume.test/v1/b", "GET") == ("Idempotency-Key",)
    assert left_behind("", other, "PATCH") == ()


def test_the_next_method_is_requests_own() -> None:
    """A 303 makes any method but HEAD a GET, a 302 too, a 301 only a POST; 307/308 keep it."""
    assert [next_method("POST", s) for s in (301, 302, 303, 307, 308)] == [
        "GET",
        "GET",
        "GET",
        "POST",
        "POST",
    ]
    assert [next_method("PUT", s) for s in (301, 302, 303, 307)] == ["PUT", "GET", "GET", "PUT"]
    assert next_method("HEAD", 303) == "HEAD"
