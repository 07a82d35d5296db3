"""get_session() under ASGI: Django runs every sync view in a thread of the request's own, and
the sessions of those threads still send through one set of pooled connections.

The application is ``asgi_app.py``'s: its ``ASGIHandler`` driven in-process with asgiref, and
once served by uvicorn as a real process; the API is a FakeSume on loopback, which counts the
TCP connections it accepts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from typing import Any, Dict, Iterator, List

import django
import pytest

pytest.importorskip("django")

from asgiref.testing import ApplicationCommunicator
from django.test import override_settings

from sume_urllib3.testing import FakeSume

from .settings import API_KEY

REQUESTS = 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def api() -> Iterator[FakeSume]:
    with FakeSume() as fake:
        fake.script("GET", "/v1/me", 200)
        yield fake


async def _get(application: Any, route: str) -> Dict[str, Any]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": route, "raw_path": route.encode(), "query_string": b"",
        "headers": [(b"host", b"testserver")], "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(timeout=10)
    body = await communicator.receive_output(timeout=10)
    assert 200 == start["status"], body
    answer: Dict[str, Any] = json.loads(body["body"])
    return answer


@pytest.mark.parametrize("route", ["/sync", "/async"])
def test_twenty_asgi_requests_share_one_connection(api: FakeSume, route: str) -> None:
    """20 requests one after another: 20 threads (so 20 sessions), one TCP connection to the API."""
    from .asgi_app import application

    sume = {"API_KEY": API_KEY, "BASE_URL": api.url + "/v1"}
    with override_settings(ROOT_URLCONF="tests.contrib.django.asgi_app", ALLOWED_HOSTS=["*"], SUME=sume):

        async def run() -> List[Dict[str, Any]]:
            return [await _get(application, route) for _ in range(REQUESTS)]

        answers = asyncio.run(run())

    assert {200} == {answer["status"] for answer in answers}
    assert REQUESTS == len(api.requests)
    assert 1 == api.connections
    # The case the pools are shared for: Django (4.0 and later) gives each request a thread of
    # its own; Django 3.2 ran them all in one, where one session was always enough.
    if django.VERSION >= (4, 0):
        assert len({answer["thread"] for answer in answers}) > 1


@pytest.mark.slow
def test_under_uvicorn_twenty_requests_share_one_connection(api: FakeSume, tmp_path: Any) -> None:
    """The same application served by uvicorn as a process of its own."""
    pytest.importorskip("uvicorn")
    env = {**os.environ, "SUME_API_KEY": API_KEY, "SUME_API_BASE_URL": api.url + "/v1", "PYTHONPATH": ROOT}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)  # a deployment: its default host file, here the test's own
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "uvicorn", "tests.contrib.django.asgi_app:application",
               "--host", "127.0.0.1", "--port", "0", "--no-access-log"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = _started(server)
        for route in ("/sync", "/async"):
            for _ in range(REQUESTS // 2):
                with urllib.request.urlopen(url + route, timeout=30) as response:
                    assert 200 == json.loads(response.read())["status"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert REQUESTS == len(api.requests)
    assert 1 == api.connections


def _started(server: subprocess.Popen[str]) -> str:
    assert server.stderr is not None
    deadline = time.monotonic() + 60
    lines: List[str] = []
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        lines.append(line)
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            return found.group(1)
        if not line and server.poll() is not None:
            break
    raise AssertionError("uvicorn did not start:\n" + "".join(lines))
