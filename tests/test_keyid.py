"""Fleet entries are named by (origin, key sent): spellings of one origin agree, nothing else does."""

from __future__ import annotations

from typing import Dict, Optional

import pytest
from requests.structures import CaseInsensitiveDict

from sume_urllib3.pacing._fleet import ANONYMOUS, fleet_key
from sume_urllib3.pacing._signals import KeyIds, origin_name, raw_origin, sent_key

KEY = "sk_live_SECRET_0123456789abcdef"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.sume.com/v1/jobs", "https://api.sume.com:443"),
        ("HTTPS://API.Sume.com:443/v1", "https://api.sume.com:443"),
        ("http://127.0.0.1:8080/v1?x=1", "http://127.0.0.1:8080"),
        ("http://127.0.0.1", "http://127.0.0.1:80"),
        ("http://[::1]:9000/v1", "http://::1:9000"),
    ],
)
def test_origin_name_writes_scheme_host_and_port(url: str, expected: str) -> None:
    assert expected == origin_name(url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.sume.com/v1/jobs", "https://api.sume.com"),
        ("http://127.0.0.1:8080?x=/y", "http://127.0.0.1:8080"),
        ("http://h#frag", "http://h"),
        ("http://h", "http://h"),
    ],
)
def test_raw_origin_is_the_text_up_to_the_path(url: str, expected: str) -> None:
    assert expected == raw_origin(url)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-api-key": KEY}, KEY),
        ({"X-Api-Key": KEY}, KEY),
        ({"Authorization": "Bearer " + KEY}, KEY),
        ({"authorization": "bearer  " + KEY}, KEY),
        ({"Authorization": ("Bearer " + KEY).encode()}, KEY),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "Basic dXNlcjpwYXNz"),
        ({"x-api-key": KEY, "Authorization": "Bearer other"}, KEY),
        ({"x-api-key": ""}, None),
        ({"Accept": "application/json"}, None),
    ],
)
def test_the_key_sent_is_read_from_either_auth_header(
    headers: Dict[str, object], expected: Optional[str]
) -> None:
    """x-api-key first (a SumeSession refuses both); a Bearer token is the key itself."""
    assert expected == sent_key(CaseInsensitiveDict(headers))
    assert expected == sent_key(dict(headers))


def test_one_key_at_one_origin_is_one_entry_however_it_is_spelled() -> None:
    ids = KeyIds()
    entry = ids("https://api.sume.com", KEY)

    assert entry == fleet_key(KEY, "https://api.sume.com:443")
    assert entry == ids("HTTPS://api.SUME.com:443", KEY)
    assert entry == ids.for_request("https://api.sume.com/v1/jobs?page=2", {"Authorization": "Bearer " + KEY})
    assert entry == ids.for_request("https://api.sume.com/v1/me", {"x-api-key": KEY})


def test_other_origins_keys_and_keyless_requests_are_other_entries() -> None:
    ids = KeyIds()
    production = ids("https://api.sume.com", KEY)
    staging = ids("https://staging.sume.com", KEY)
    tenant = ids("https://api.sume.com", "sk_live_tenant_b")
    keyless = ids("https://api.sume.com", None)

    assert len({production, staging, tenant, keyless}) == 4
    assert keyless == fleet_key(None, "https://api.sume.com:443") != ANONYMOUS
    assert keyless.startswith("o")
    assert production.startswith("k")
    assert ids("https://staging.sume.com", None) != keyless


def test_entries_are_hashes_and_the_cache_never_shows_a_key() -> None:
    ids = KeyIds()
    entry = ids("https://api.sume.com", KEY)

    assert KEY not in entry
    assert KEY not in repr(ids)
    assert "cached=1" in repr(ids)


def test_the_cache_is_bounded_and_stays_correct_past_its_bound() -> None:
    """A process sending many tenants' keys keeps a bounded cache; answers never change."""
    ids = KeyIds()
    first = ids("https://api.sume.com", "sk_tenant_0")
    for n in range(3000):
        ids("https://api.sume.com", f"sk_tenant_{n}")

    assert int(repr(ids).split("cached=")[1].rstrip(">")) <= 1024
    again = ids("https://api.sume.com", "sk_tenant_0")
    assert first == again == fleet_key("sk_tenant_0", "https://api.sume.com:443")
