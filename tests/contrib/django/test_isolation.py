"""override_settings(SUME=...) gives a test fresh sessions and a fresh fleet, so a Django suite
is isolated too (Django's own runner has no pytest plugin: the setting_changed signal does it).

Each test throttles a key with a 429 + Retry-After 30 on one server inside one
``override_settings`` block, then shows that the next block starts clean while the same
block still holds the key.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, Tuple

import pytest

pytest.importorskip("django")

from django.test import override_settings

from sume_urllib3 import SumeRetryError
from sume_urllib3.contrib.django import get_session
from sume_urllib3.contrib.django.fleet import build_fleet
from sume_urllib3.pacing import HostFleet, LocalFleet
from sume_urllib3.pacing.host import default_path
from sume_urllib3.testing import FakeSume, Reply, SleepRecorder, reset_fleets

from .settings import API_KEY


@pytest.fixture
def api() -> Iterator[FakeSume]:
    with FakeSume() as fake:
        fake.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
        fake.script("GET", "/v1/me", 200)
        yield fake


def sume(api: FakeSume, **extra: Any) -> Dict[str, Any]:
    return {"API_KEY": API_KEY, "BASE_URL": api.url + "/v1", "MAX_ELAPSED": 5.0, **extra}


def throttle() -> None:
    with pytest.raises(SumeRetryError) as raised:
        get_session().get("/throttled")
    assert not raised.value.record.fleet_refused


def test_a_new_override_starts_without_the_last_ones_cooldown(api: FakeSume) -> None:
    with override_settings(SUME=sume(api)):
        first = get_session()
        assert isinstance(first.fleet, HostFleet)  # no FLEET: the host fleet, the test run's file
        throttle()
        with pytest.raises(SumeRetryError) as raised:
            get_session().get("/me")  # the same block: the key is cooling down
        assert raised.value.record.fleet_refused

    with override_settings(SUME=sume(api)):  # the very same value, in the next test
        response = get_session().get("/me")

        assert get_session() is not first
        assert (200, 0.0) == (response.status_code, response.sume.paced)


def test_leaving_the_override_leaves_nothing_behind(api: FakeSume) -> None:
    """The signal is sent on the way out too: the outer settings' sessions start clean."""
    with override_settings(SUME=sume(api)):
        throttle()
    with override_settings(SUME=sume(api, MAX_RETRIES=1)):
        assert 200 == get_session().get("/me").status_code


def test_a_configured_fleet_is_built_again_for_each_override(
    api: FakeSume, sume_no_sleep: SleepRecorder
) -> None:
    """SUME["FLEET"] = {"RATE": "10/min"}: a new block gets a new fleet that owes no turns."""
    setting = sume(api, FLEET={"RATE": "10/min"}, MAX_ELAPSED=60.0)
    with override_settings(SUME=setting):
        fleet = get_session().fleet
        for _ in range(3):
            get_session().get("/me")
        assert [6.0, 6.0] == pytest.approx(sume_no_sleep.waits, abs=0.1)

    sume_no_sleep.clear()
    with override_settings(SUME=setting):
        response = get_session().get("/me")

        assert isinstance(get_session().fleet, LocalFleet)
        assert get_session().fleet is not fleet
        assert (200, 0.0, []) == (response.status_code, response.sume.paced, sume_no_sleep.waits)


def test_other_settings_leave_the_fleet_alone(api: FakeSume) -> None:
    """Only SUME rebuilds sessions and fleets: an unrelated override keeps the cooldown."""
    with override_settings(SUME=sume(api)):
        session = get_session()
        throttle()
        with override_settings(USE_TZ=False):
            assert get_session() is session
            with pytest.raises(SumeRetryError) as raised:
                get_session().get("/me")
        assert raised.value.record.fleet_refused


def test_a_host_fleet_from_settings_starts_clean_in_the_next_override(api: FakeSume) -> None:
    """SUME["FLEET"] = {"HOST": True}: the file's cooldown does not outlive the block either."""
    setting = sume(api, FLEET={"HOST": True})
    with override_settings(SUME=setting):
        assert isinstance(get_session().fleet, HostFleet)
        throttle()
        with pytest.raises(SumeRetryError) as raised:
            get_session().get("/me")
        assert raised.value.record.fleet_refused

    with override_settings(SUME=setting):
        response = get_session().get("/me")
        assert (200, 0.0) == (response.status_code, response.sume.paced)


@pytest.mark.parametrize("extra", [{"FLEET": {"HOST": True}}, {}], ids=["host", "default"])
def test_reset_fleets_forgets_the_host_fleet_of_the_settings(api: FakeSume, extra: Dict[str, Any]) -> None:
    """Django's runner calls reset_fleets() in setUp: it reaches the settings' host fleet too."""
    with override_settings(SUME=sume(api, **extra)):
        throttle()
        reset_fleets()
        assert 200 == get_session().get("/me").status_code


@pytest.mark.slow  # real time: runs in CI's slow step
def test_host_true_is_a_file_of_the_test_runs_own() -> None:
    """While tests run, HOST True is a file in a temporary directory of this run, not the default
    path that runserver or a deployment on this host uses; outside tests it is the default."""
    path = build_fleet({"HOST": True}).path
    assert path != default_path()
    assert os.path.dirname(os.path.dirname(path)) == tempfile.gettempdir()

    code = (
        "import sys, django\n"
        "from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['sume_urllib3.contrib.django'])\n"
        "django.setup()\n"
        "from sume_urllib3.contrib.django.fleet import _host_place\n"
        "print(_host_place(True).get('path'))\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()\n"  # what Django's test runner and pytest-django call
        "print(_host_place(True).get('path'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert 0 == run.returncode, run.stderr
    outside, inside = run.stdout.split()
    assert "None" == outside  # HostFleet(None): the default path
    assert os.path.basename(inside) == "host.fleet"
    assert inside != default_path()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_two_processes_from_the_default_settings_share_a_cooldown(api: FakeSume) -> None:
    """Without FLEET, a worker forked from the same settings shares the host file: the cooldown
    its 429 taught refuses the parent's next request unsent (a test run's own file here)."""
    with override_settings(SUME=sume(api)):
        fleet = get_session().fleet
        assert isinstance(fleet, HostFleet)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 1
            try:
                assert get_session().fleet is fleet  # the same settings: the same fleet and file
                throttle()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert 0 == status

        with pytest.raises(SumeRetryError) as raised:
            get_session().get("/me")

    assert raised.value.record.fleet_refused
    assert ["/v1/throttled"] == [request.path for request in api.requests]


# One process of a deployment, runserver or a test run, from the same settings without FLEET.
_PROCESS = """
import sys, django
from django.conf import settings
settings.configure(INSTALLED_APPS=["sume_urllib3.contrib.django"], SUME={"MAX_ELAPSED": 5.0})
django.setup()
if sys.argv[1] == "runserver":
    import django.core.management.commands.runserver
elif sys.argv[1] == "tests":
    from django.test.utils import setup_test_environment
    setup_test_environment()
from sume_urllib3 import SumeRetryError
from sume_urllib3.contrib.django import get_session
try:
    status = get_session().get(sys.argv[2]).status_code
except SumeRetryError as exc:
    status = "refused" if exc.record.fleet_refused else exc.record.status
print(status, get_session().fleet.path)
"""


@pytest.mark.slow  # real time: runs in CI's slow step
def test_deployment_processes_share_the_default_and_runserver_and_tests_do_not(
    api: FakeSume, tmp_path: Any
) -> None:
    """Real processes of one deployment (one working directory and Python, no FLEET) share a
    cooldown through the default path; runserver and a test run of the same project neither
    see it nor write there."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(XDG_RUNTIME_DIR=str(runtime), SUME_API_KEY=API_KEY, SUME_API_BASE_URL=api.url + "/v1")

    def process(kind: str, path: str) -> Tuple[str, str]:
        run = subprocess.run(
            [sys.executable, "-c", _PROCESS, kind, path], capture_output=True, text=True, env=env,
            cwd=str(tmp_path), timeout=60,
        )
        assert 0 == run.returncode, run.stderr
        status, fleet_path = run.stdout.split()
        return status, fleet_path

    first = process("deployment", "/throttled")
    second = process("deployment", "/me")
    runserver = process("runserver", "/me")
    tests = process("tests", "/me")

    assert ("429", "refused") == (first[0], second[0])
    assert first[1] == second[1]
    assert first[1].startswith(str(runtime / "sume_urllib3") + os.sep)
    assert ("200", os.path.dirname(first[1])) == (runserver[0], os.path.dirname(runserver[1]))
    assert runserver[1].endswith(".runserver.fleet")
    assert "200" == tests[0]
    assert not tests[1].startswith(str(runtime))
    assert 2 == len([r for r in api.requests if r.path == "/v1/me"])  # the refused one never left


_SITE = {
    "site_settings.py": (
        "SECRET_KEY = 'tests-only'\nDEBUG = True\nALLOWED_HOSTS = ['127.0.0.1']\nROOT_URLCONF = 'site_urls'\n"
        "INSTALLED_APPS = ['django.contrib.staticfiles', 'sume_urllib3.contrib.django']\n"
        "STATIC_URL = '/static/'\nDATABASES = {}\nSUME = {'MAX_ELAPSED': 5.0}\n"
    ),
    "site_urls.py": (
        "from django.http import JsonResponse\nfrom django.urls import path\n"
        "from sume_urllib3.contrib.django import get_session\n"
        "def fleet(request):\n    return JsonResponse({'path': get_session().fleet.path})\n"
        "urlpatterns = [path('fleet', fleet)]\n"
    ),
}


@pytest.mark.slow  # a real runserver: runs in CI's slow step
def test_runserver_paces_on_a_file_of_its_own(tmp_path: Any) -> None:
    """``manage.py runserver`` (staticfiles' command, with the autoreloader) serves its views
    with the host fleet at runserver's own file, beside the deployment's default."""
    requests = pytest.importorskip("requests")
    from tests.redis_server import free_port

    for name, text in _SITE.items():
        (tmp_path / name).write_text(text)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        DJANGO_SETTINGS_MODULE="site_settings", PYTHONPATH=str(tmp_path), XDG_RUNTIME_DIR=str(runtime),
        SUME_API_KEY=API_KEY,
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}"], cwd=str(tmp_path), env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        deadline, answer = time.monotonic() + 60, None
        while answer is None and time.monotonic() < deadline and server.poll() is None:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/fleet", timeout=5).json()
            except requests.RequestException:
                time.sleep(0.1)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the autoreloader and the server it runs
        _, errors = server.communicate(timeout=30)
    assert answer is not None, errors
    fleet_path = answer["path"]
    assert os.path.dirname(fleet_path) == str(runtime / "sume_urllib3")
    assert fleet_path.endswith(".runserver.fleet")
