"""WSGI entry point, loaded once in the master (gunicorn ``--preload``, uWSGI's default) and then forked.

The session is built here, before the fork, and used once (``DEPLOY_WARM_UP_URL``, a GET that
costs the quota nothing), as an app that checks the API at start-up would: the master then holds a
pooled keep-alive connection, and with Redis a fleet client id, before any worker exists. The
deployment exercises the library's after-fork path: each worker drops what it inherited and
builds its own sessions, budget and counters, whether the fork ran Python's at-fork hooks
(gunicorn) or not (uWSGI forks from C). Under uWSGI's ``--lazy-apps`` each worker loads this
module itself, after the fork.
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
if os.environ.get("DEPLOY_WARM_UP_URL"):
    get_session().get(os.environ["DEPLOY_WARM_UP_URL"]).raise_for_status()
