"""A Django ASGI application whose views call the Sume API through ``get_session()``.

``test_asgi.py`` drives its ``ASGIHandler`` in-process (settings from this folder's conftest,
``ROOT_URLCONF`` pointed here) and serves it under uvicorn as a process of its own, where
this module configures Django itself (``SUME_API_KEY`` and ``SUME_API_BASE_URL`` from the
environment).
"""

from __future__ import annotations

import threading

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path

from sume_urllib3.contrib.django import get_session


def _call() -> JsonResponse:
    session = get_session()
    response = session.get("/me")
    return JsonResponse(
        {"status": response.status_code, "session": id(session), "thread": threading.get_ident()}
    )


def sync_view(request: HttpRequest) -> JsonResponse:
    """A plain sync view: Django runs it in a thread of the request's own."""
    return _call()


async def async_view(request: HttpRequest) -> JsonResponse:
    """An async view handing the call to sync code the usual way (thread_sensitive=True)."""
    response: JsonResponse = await sync_to_async(_call)()
    return response


urlpatterns = [path("sync", sync_view), path("async", async_view)]

if not settings.configured:  # served by uvicorn: this module is the project
    settings.configure(
        SECRET_KEY="tests-only-not-secret",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        INSTALLED_APPS=["sume_urllib3.contrib.django"],
        DATABASES={},
    )
    django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402 - after the settings

application = get_asgi_application()
