"""Minimal Django settings for the integration tests (applied by this folder's conftest)."""

from __future__ import annotations

from typing import Any, Dict

# Not a real Sume key: the tests assert it never shows up in check messages or logs.
API_KEY = "sk_test_django_SECRET_0123456789abcdef"

SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
INSTALLED_APPS = ["sume_urllib3.contrib.django"]
DATABASES: Dict[str, Any] = {}

SUME = {
    "API_KEY": API_KEY,
    "MAX_RETRIES": 3,
    "TIMEOUT": (5, 30),
}

LOGGING = {
    "version": 1,
    # Other tests in the same process use their own loggers; leave them alone.
    "disable_existing_loggers": False,
    "handlers": {
        "sume_capture": {
            "class": "logging.handlers.BufferingHandler",
            "capacity": 10000,
            "level": "INFO",
        },
    },
    "loggers": {
        # propagate stays on so pytest's caplog keeps working for the rest of the suite.
        "sume_urllib3": {"handlers": ["sume_capture"], "level": "INFO", "propagate": True},
    },
}
