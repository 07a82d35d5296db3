"""The pytest plugin, once opted into, isolates fleets per test: nothing one test learned holds the next.

The leak needs tests that share an origin (a module-scoped server, a reused port) or a
fleet (the application's module-level one); the subprocess runs below have both, once with
the plugin and once with its two fixtures alone (imported by a conftest, no autouse
isolation) to show what the plugin's autouse fixture prevents.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import Dict, Iterator

import pytest

from sume_urllib3 import Policy, SumeRetryError, SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import FakeSume, Reply, reset_fleets

from .test_user_suite import OPT_IN, run_pytest

KEY = "sk_test_plugin_isolation_0123456789"

LEAKY_SUITE = textwrap.dedent(
    '''
    from typing import Iterator

    import pytest

    from sume_urllib3 import Policy, SumeRetryError, SumeSession
    from sume_urllib3.pacing import LocalFleet
    from sume_urllib3.testing import FakeSume, Reply, SleepRecorder

    KEY = "sk_test_one_key_for_every_test"
    APP_FLEET = LocalFleet(rate="10/min")  # the application's quota, built at import


    @pytest.fixture(scope="module")
    def api() -> Iterator[FakeSume]:
        """One server for the module: every test talks to the same origin."""
        with FakeSume() as fake:
            fake.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
            fake.script("GET", "/v1/me", 200)
            yield fake


    def session(api: FakeSume, **kwargs) -> SumeSession:
        return SumeSession(KEY, base_url=api.url + "/v1", **kwargs)


    def test_1_throttled(api: FakeSume) -> None:
        with pytest.raises(SumeRetryError):
            session(api, policy=Policy(max_elapsed=5)).get("/throttled")


    def test_2_same_server_goes_at_once(api: FakeSume) -> None:
        response = session(api, policy=Policy(max_elapsed=5)).get("/me")
        assert (200, 0.0) == (response.status_code, response.sume.paced)


    def test_3_no_wait_recorded_that_was_never_asked_for(api: FakeSume, sume_no_sleep: SleepRecorder) -> None:
        assert 200 == session(api).get("/me").status_code
        assert [] == sume_no_sleep.waits


    def test_4_app_quota_spent_in_virtual_time(api: FakeSume, sume_no_sleep: SleepRecorder) -> None:
        for _ in range(10):
            session(api, fleet=APP_FLEET).get("/me")
        assert len(sume_no_sleep.waits) == 9


    def test_5_app_quota_owes_nothing_to_the_last_test(api: FakeSume) -> None:
        response = session(api, fleet=APP_FLEET, policy=Policy(max_elapsed=5)).get("/me")
        assert (200, 0.0) == (response.status_code, response.sume.paced)


    def test_6_fake_quota_learned(fake_sume: FakeSume, sume_no_sleep: SleepRecorder) -> None:
        fake_sume.quota("10/min")
        fake_sume.script("POST", "/v1/runs", 201)
        s = SumeSession(KEY, base_url=fake_sume.url + "/v1")
        assert [201, 201] == [s.post("/runs", json={}).status_code for _ in range(2)]


    def test_7_no_pace_inherited_from_a_quota(fake_sume: FakeSume) -> None:
        fake_sume.script("POST", "/v1/runs", 201)
        s = SumeSession(KEY, base_url=fake_sume.url + "/v1", policy=Policy(max_elapsed=5))
        assert [0.0] * 5 == [s.post("/runs", json={}).sume.paced for _ in range(5)]
    '''
)


def outcomes(stdout: str) -> Dict[str, str]:
    return dict(
        (name, word)
        for name, word in re.findall(r"^test_leaky\.py::(\w+) (PASSED|FAILED|ERROR)", stdout, re.M)
    )


@pytest.fixture
def leaky(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "test_leaky.py").write_text(LEAKY_SUITE, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(OPT_IN, encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_with_the_plugin_no_test_inherits_anything(leaky: pathlib.Path) -> None:
    """No cooldown, no owed turn, no recorded wait, no learned pace passes from test to test."""
    result = run_pytest(leaky, "-v")

    passed = outcomes(result.stdout)
    assert 7 == len(passed), result.stdout + result.stderr
    assert {"PASSED"} == set(passed.values()), result.stdout


@pytest.mark.slow
def test_without_the_autouse_fixture_the_same_tests_leak(leaky: pathlib.Path) -> None:
    """The control: the same fixtures, imported without the plugin, and state leaks."""
    (leaky / "conftest.py").write_text(
        "from sume_urllib3.testing.plugin import fake_sume, sume_no_sleep  # noqa: F401\n", encoding="utf-8"
    )
    result = run_pytest(leaky, "-v")

    assert {
        "test_1_throttled": "PASSED",
        "test_2_same_server_goes_at_once": "FAILED",  # refused: "next turn in 4x s"
        "test_3_no_wait_recorded_that_was_never_asked_for": "FAILED",  # records the cooldown
        "test_4_app_quota_spent_in_virtual_time": "PASSED",
        "test_5_app_quota_owes_nothing_to_the_last_test": "FAILED",  # 54 s of virtual turns owed
        "test_6_fake_quota_learned": "PASSED",
        "test_7_no_pace_inherited_from_a_quota": "PASSED",  # another origin: per-origin keys
    } == outcomes(result.stdout), result.stdout + result.stderr


def test_every_test_gets_the_autouse_fixture(request: pytest.FixtureRequest) -> None:
    """Our own suite opts into the shipped plugin as users do: tests/conftest.py resets nothing."""
    assert "sume_isolated_fleets" in request.fixturenames
    conftest = (pathlib.Path(__file__).resolve().parent.parent / "conftest.py").read_text(encoding="utf-8")
    assert "reset" not in conftest
    assert OPT_IN in conftest


def test_installing_the_package_loads_no_plugin() -> None:
    """Opt-in only: no ``pytest11`` entry point puts our fixtures into every project's tests."""
    found = importlib.metadata.entry_points()
    # Python < 3.10 answers a dict of groups; later ones an EntryPoints with select().
    group = found.select(group="pytest11") if hasattr(found, "select") else found.get("pytest11", ())  # type: ignore[attr-defined,unused-ignore]
    assert not [entry for entry in group if entry.value.startswith("sume_urllib3")]


@pytest.fixture
def throttled() -> Iterator[FakeSume]:
    with FakeSume() as fake:
        fake.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
        fake.script("GET", "/v1/me", 200)
        yield fake


def test_reset_fleets_forgets_the_default_and_user_built_fleets(throttled: FakeSume) -> None:
    """For unittest and Django's runner: call reset_fleets() in setUp."""
    own = LocalFleet(rate="10/min")
    default_session = SumeSession(KEY, base_url=throttled.url + "/v1", policy=Policy(max_elapsed=5))
    paced_session = SumeSession(KEY, base_url=throttled.url + "/v1", policy=Policy(max_elapsed=5), fleet=own)
    with pytest.raises(SumeRetryError):
        default_session.get("/throttled")
    assert 200 == paced_session.get("/me").status_code
    with pytest.raises(SumeRetryError, match="pace 10/min"):
        paced_session.get("/me")  # the next turn is 6 s away, past the 5 s deadline
    with pytest.raises(SumeRetryError, match="cooldown"):
        default_session.get("/me")

    reset_fleets()

    assert (200, 0.0) == (default_session.get("/me").status_code, default_session.get("/me").sume.paced)
    assert (200, 0.0) == (paced_session.get("/me").status_code, 0.0)


def test_reset_fleets_rebuilds_djangos_sessions_only_when_django_is_loaded(tmp_path: pathlib.Path) -> None:
    """reset_fleets never imports Django; once the integration is loaded, its sessions are rebuilt."""
    pytest.importorskip("django")
    code = textwrap.dedent(
        """
        import sys
        from sume_urllib3.testing import reset_fleets
        reset_fleets()
        print("django" in sys.modules)
        import django
        from django.conf import settings
        settings.configure(INSTALLED_APPS=["sume_urllib3.contrib.django"], SUME={"API_KEY": "sk_test"})
        django.setup()
        from sume_urllib3.contrib.django import get_session
        first = get_session()
        print(get_session() is first)
        reset_fleets()
        print(get_session() is first)
        """
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        # Outside pytest the Django default is the host fleet at the default path: the test's own.
        env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)},
    )
    assert ["False", "True", "False"] == shown.stdout.split()
