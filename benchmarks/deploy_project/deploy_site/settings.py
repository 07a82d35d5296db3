"""Settings for the deployment benchmark: no database, no middleware, one app.

From the environment (``benchmarks/deploy.py`` sets them for gunicorn):

- ``SUME_API_KEY`` and ``SUME_API_BASE_URL``: read by sume-urllib3 itself (here: the quota
  server on 127.0.0.1);
- ``DEPLOY_SUME_FLEET``: ``SUME["FLEET"]`` as JSON (``{"REDIS_URL": "redis://...", "RATE": "10/s"}``),
  or ``default`` to leave the key out and keep the library's default pacing.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any, Dict, List

# No sessions, cookies or signing are used; a random key keeps Django satisfied.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or secrets.token_hex(32)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "deploy_site.urls"
WSGI_APPLICATION = "deploy_site.wsgi.application"
INSTALLED_APPS = ["sume_urllib3.contrib.django"]
MIDDLEWARE: List[str] = []
DATABASES: Dict[str, Any] = {}
USE_TZ = True

SUME: Dict[str, Any] = {"API_KEY": os.environ.get("SUME_API_KEY")}
_fleet = os.environ.get("DEPLOY_SUME_FLEET", "default")
if _fleet != "default":
    SUME["FLEET"] = json.loads(_fleet)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    # WARNING and above: a Redis fallback or a give-up shows in gunicorn's error log.
    "loggers": {"sume_urllib3": {"handlers": ["console"], "level": "WARNING"}},
}
