"""System checks for ``settings.SUME`` (tag ``sume_urllib3``), run by ``manage.py check``."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from django.core import checks

from . import conf

#: What each check id means (the table in docs/guide/django.md comes from here).
CHECK_IDS = {
    "sume_urllib3.E001": "SUME is not a dict",
    "sume_urllib3.E002": "SUME has an unknown key (probably a typo)",
    "sume_urllib3.E003": "a Policy value is invalid",
    "sume_urllib3.E004": "a session value is invalid: API_KEY, BASE_URL (or SUME_API_BASE_URL), TIMEOUT, "
    "RAISE_ON_GIVE_UP, RETRY_BUDGET",
    "sume_urllib3.E005": "BASE_URL (or SUME_API_BASE_URL) uses plain http to a host that is not loopback",
    "sume_urllib3.E006": "AUTH_HEADER is not 'x-api-key' or 'bearer'",
    "sume_urllib3.E007": "an OBSERVERS entry cannot be imported or built, or is not an observer",
    "sume_urllib3.E008": "FLEET is invalid (not a dict or None, unknown key, bad REDIS_URL, RATE, BURST, "
    "PREFIX or TIMEOUT) or its fleet cannot be built",
    "sume_urllib3.W001": "no API key in SUME['API_KEY'] nor in the SUME_API_KEY environment variable",
    "sume_urllib3.W002": "MAX_ELAPSED <= the read timeout: an attempt that times out is never retried",
}


def check_settings(app_configs: Optional[Sequence[Any]] = None, **kwargs: Any) -> List[checks.CheckMessage]:
    """Report every problem with ``settings.SUME``; never shows the API key."""
    if app_configs is not None and not any(config.name == __package__ for config in app_configs):
        return []  # `manage.py check other_app` asks about other apps only
    return list(conf.read().problems)
