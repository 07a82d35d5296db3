"""A Django site with the admin and the Sume app, served as a real process for the pace page's tests.

``python -m tests.contrib.django.admin_site PORT BASE_URL FLEET_JSON``: a SQLite database in a
temporary directory, the tables migrated, a staff user ``staff`` and a non-staff ``visitor``
(password ``pw-for-tests``), ``SUME`` with ``BASE_URL``, the held herd's key (``tests/pace_herd.py``) and
``FLEET`` as given; served (static files too) on 127.0.0.1:PORT until killed. Prints ``ready`` once it serves.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, List

from django.urls import path

PASSWORD = "pw-for-tests"
urlpatterns: List[Any] = []


def main(port: int, base_url: str, fleet: Any) -> None:
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    import django
    from django.conf import settings
    from django.contrib import admin
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    from ...pace_herd import HOLD_KEY

    settings.configure(
        DEBUG=False, SECRET_KEY="tests-only-not-secret", ALLOWED_HOSTS=["127.0.0.1"], USE_TZ=True,
        ROOT_URLCONF=__name__, STATIC_URL="/static/",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": os.path.join(tempfile.mkdtemp(), "site.sqlite3")}},
        INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
                        "sume_urllib3.contrib.django"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.common.CommonMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                       "django.contrib.auth.context_processors.auth",
                                                       "django.contrib.messages.context_processors.messages"]}}],
        SUME={"API_KEY": HOLD_KEY, "BASE_URL": base_url, "FLEET": fleet},
    )
    django.setup()
    urlpatterns.append(path("admin/", admin.site.urls))
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User

    User.objects.create_user("staff", password=PASSWORD, is_staff=True)
    User.objects.create_user("visitor", password=PASSWORD)

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", port, StaticFilesHandler(get_wsgi_application()), Server, Quiet)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]))
