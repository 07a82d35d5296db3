"""WSGI entry point, loaded once in gunicorn's master under ``--preload`` and then forked.

The session is built here, before the fork, as an app that touches the API at import would:
the deployment then exercises the library's after-fork path (each worker drops what it
inherited and builds its own sessions, budget and counters).
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy_site.settings")

application = get_wsgi_application()

from django.urls import get_resolver  # noqa: E402

from sume_urllib3.contrib.django import get_session  # noqa: E402

get_resolver().url_patterns  # noqa: B018  # load the URLconf in the master, not per worker
get_session()
