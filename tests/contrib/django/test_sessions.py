"""get_session(): per-thread sessions built from SUME, rebuilt by override_settings."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from logging.handlers import BufferingHandler
from typing import Any, Dict, List

import pytest

pytest.importorskip("django")

from django.apps import apps
from django.test import override_settings

import sume_urllib3.contrib.django as package
from sume_urllib3 import ConfigurationError, Policy, SumeSession
from sume_urllib3.contrib.django import close_session, get_session, sessions
from sume_urllib3.contrib.django.apps import SumeConfig
from sume_urllib3.contrib.django.conf import SUME_SETTING, VALID_KEYS
from sume_urllib3.testing import FakeSume, no_sleep

from .settings import API_KEY

GOOD: Dict[str, Any] = {"API_KEY": API_KEY}


def in_thread(count: int = 1) -> List[SumeSession]:
    """get_session() called ``count`` times in one new thread."""
    found: List[SumeSession] = []

    def run() -> None:
        found.extend(get_session() for _ in range(count))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(found) == count
    return found


def test_the_app_is_installed_under_its_label() -> None:
    config = apps.get_app_config("sume_urllib3")
    assert isinstance(config, SumeConfig)
    assert config.name == "sume_urllib3.contrib.django"


def test_the_package_exports_only_what_the_readme_documents() -> None:
    """get_session and close_session; the settings internals stay in conf."""
    assert ["close_session", "get_session"] == package.__all__
    assert not hasattr(package, "VALID_KEYS")


def test_public_names() -> None:
    assert SUME_SETTING == "SUME"
    assert "MAX_RETRIES" in VALID_KEYS
    assert "RULES" in VALID_KEYS
    assert "API_KEY" in VALID_KEYS


def test_session_is_built_from_settings(dj_settings: Any) -> None:
    dj_settings.SUME = {
        "API_KEY": API_KEY,
        "BASE_URL": "https://eu.api.sume.com/v1/",
        "AUTH_HEADER": "Bearer",
        "TIMEOUT": [3, 20],
        "RAISE_ON_GIVE_UP": False,
        "RETRY_BUDGET": False,
        "MAX_RETRIES": 2,
        "MAX_ELAPSED": 45,
        "JITTER": [0.0, 1.0],
        "TRUST_BODY": False,
    }
    session = get_session()
    assert isinstance(session, SumeSession)
    assert session.has_api_key
    assert session.base_url == "https://eu.api.sume.com/v1"
    assert session.auth_header == "bearer"
    assert session.timeout == (3.0, 20.0)
    assert session.raise_on_give_up is False
    assert session.retry_budget is None
    assert session.policy == Policy(max_retries=2, max_elapsed=45, jitter=(0.0, 1.0), trust_body=False)
    assert API_KEY not in repr(session)


def test_missing_setting_gives_defaults_and_the_environment_applies(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    del dj_settings.SUME
    monkeypatch.setenv("SUME_API_KEY", API_KEY)
    monkeypatch.setenv("SUME_API_BASE_URL", "https://staging.sume.test/v1")
    session = get_session()
    assert session.has_api_key
    assert session.base_url == "https://staging.sume.test/v1"
    assert session.policy == Policy()
    assert session.timeout == (5.0, 60.0)
    assert session.retry_budget is not None


def test_same_session_within_a_thread() -> None:
    assert get_session() is get_session()
    first, second = in_thread(count=2)
    assert first is second


def test_close_session_closes_and_forgets_this_threads_session(monkeypatch: pytest.MonkeyPatch) -> None:
    old = get_session()
    closed: List[bool] = []
    monkeypatch.setattr(old, "close", lambda: closed.append(True))
    close_session()
    assert closed == [True]
    assert get_session() is not old
    close_session()
    close_session()  # nothing left to close: a no-op


def test_different_sessions_across_threads() -> None:
    mine = get_session()
    (a,) = in_thread()
    (b,) = in_thread()
    assert len({id(mine), id(a), id(b)}) == 3


def test_threads_share_one_retry_budget() -> None:
    mine = get_session()
    (other,) = in_thread()
    assert mine.retry_budget is not None
    assert other.retry_budget is mine.retry_budget


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_retry_budget_of_its_own(fake: FakeSume, dj_settings: Any) -> None:
    """A worker forked after the parent spent the budget starts with a budget of its own."""
    fake.script("GET", "/v1/parent", 503, 200)
    fake.script("GET", "/v1/child", 503, 200)
    dj_settings.SUME = {"API_KEY": API_KEY, "BASE_URL": fake.url + "/v1", "RAISE_ON_GIVE_UP": False}
    budget = get_session().retry_budget
    assert budget is not None
    while budget.try_spend():
        pass

    with no_sleep():
        parent = get_session().get("/parent").sume  # type: ignore[attr-defined]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            code = 1
            try:
                os.close(read)
                child = get_session()
                assert child.retry_budget is not None
                room = child.retry_budget.balance  # before its own request: a fresh budget
                record = child.get("/child").sume  # type: ignore[attr-defined]
                shared = child.retry_budget is budget
                os.write(write, f"{record.outcome.value} {shared} {room}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as pipe:
            child_report = pipe.read()
        _, status = os.waitpid(pid, 0)

    assert 0 == status
    outcome, shared, child_room = child_report.split()
    assert ("retried_ok", "False") == (outcome, shared)
    assert float(child_room) >= 1  # the parent's spending did not cross the fork
    # A spent budget delays an error retry until a unit is free (refused only past the deadline).
    assert ("retried_ok", 2) == (parent.outcome.value, parent.attempts)
    assert budget is get_session().retry_budget


def test_many_threads_at_once_each_get_their_own(dj_settings: Any) -> None:
    dj_settings.SUME = GOOD
    barrier = threading.Barrier(8)
    found: Dict[int, List[SumeSession]] = {}

    def run(index: int) -> None:
        barrier.wait()
        found[index] = [get_session(), get_session()]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(first is second for first, second in found.values())
    assert len({id(first) for first, _ in found.values()}) == 8


def test_override_settings_rebuilds_the_session() -> None:
    before = get_session()
    with override_settings(SUME={**GOOD, "BASE_URL": "https://one.sume.test/v1"}):
        one = get_session()
        assert one is not before
        assert one.base_url == "https://one.sume.test/v1"
        assert get_session() is one
        with override_settings(SUME={**GOOD, "BASE_URL": "https://two.sume.test/v1", "MAX_RETRIES": 1}):
            two = get_session()
            assert two.base_url == "https://two.sume.test/v1"
            assert two.policy.max_retries == 1
        # Leaving an override is a change too.
        assert get_session().base_url == "https://one.sume.test/v1"
    after = get_session()
    assert after.base_url == "https://api.sume.com/v1"
    assert after.policy.max_retries == 3


def test_override_reaches_other_threads_on_their_next_call() -> None:
    sessions: List[SumeSession] = []
    changed = threading.Event()
    checked = threading.Event()

    def run() -> None:
        sessions.append(get_session())
        changed.wait(5)
        sessions.append(get_session())
        checked.set()

    thread = threading.Thread(target=run)
    thread.start()
    with override_settings(SUME={**GOOD, "BASE_URL": "https://three.sume.test/v1"}):
        changed.set()
        assert checked.wait(5)
    thread.join()
    old, new = sessions
    assert old is not new
    assert new.base_url == "https://three.sume.test/v1"


def test_pytest_django_settings_fixture_rebuilds(dj_settings: Any) -> None:
    dj_settings.SUME = {**GOOD, "BASE_URL": "https://fixture.sume.test/v1"}
    assert get_session().base_url == "https://fixture.sume.test/v1"
    dj_settings.SUME = {**GOOD, "BASE_URL": "https://fixture2.sume.test/v1"}
    assert get_session().base_url == "https://fixture2.sume.test/v1"


def test_other_settings_do_not_rebuild() -> None:
    session = get_session()
    with override_settings(DEBUG=True, SOMETHING_ELSE=1):
        assert get_session() is session


def test_the_replaced_session_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    old = get_session()
    closed: List[bool] = []
    monkeypatch.setattr(old, "close", lambda: closed.append(True))
    with override_settings(SUME={**GOOD, "MAX_RETRIES": 1}):
        get_session()
    assert closed == [True]


def test_invalid_settings_raise_with_the_check_id() -> None:
    with override_settings(SUME={**GOOD, "MAX_RETRIES": -1}), pytest.raises(ConfigurationError) as info:
        get_session()
    message = str(info.value)
    assert "sume_urllib3.E003" in message
    assert 'SUME["MAX_RETRIES"]: max_retries must be between 0 and 1000' in message


def test_unknown_keys_are_rejected() -> None:
    with override_settings(SUME={**GOOD, "MAX_RETRYS": 1}), pytest.raises(ConfigurationError) as info:
        get_session()
    assert 'sume_urllib3.E002: SUME["MAX_RETRYS"] is not a known setting' in str(info.value)


def test_not_a_dict_is_rejected() -> None:
    with override_settings(SUME="api_key"), pytest.raises(ConfigurationError, match=r"sume_urllib3\.E001"):
        get_session()


@pytest.mark.parametrize(
    ("sume", "check_id"),
    [
        ({**GOOD, "RULES": [(200, None, "retry", -1)]}, "E003"),
        ({**GOOD, "BASE_URL": "https://user:pw@api.sume.com/v1"}, "E004"),
        ({**GOOD, "RETRY_BUDGET": "yes"}, "E004"),
        ({**GOOD, "BASE_URL": "http://api.sume.com/v1"}, "E005"),
        ({**GOOD, "AUTH_HEADER": "basic"}, "E006"),
    ],
)
def test_get_session_refuses_what_the_checks_report(sume: Dict[str, Any], check_id: str) -> None:
    with override_settings(SUME=sume), pytest.raises(ConfigurationError) as info:
        get_session()
    assert f"sume_urllib3.{check_id}: " in str(info.value)


def test_malformed_key_in_the_environment_is_refused(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    del dj_settings.SUME
    monkeypatch.setenv("SUME_API_KEY", "sk_live_SECRET with space")
    with pytest.raises(ConfigurationError) as info:
        get_session()
    assert "sume_urllib3.E004: the SUME_API_KEY environment variable" in str(info.value)
    assert "SECRET" not in str(info.value)


def test_a_session_error_the_checks_missed_still_names_a_check_id(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> SumeSession:
        raise ConfigurationError("timeout must be something new")

    monkeypatch.setattr(sessions, "SumeSession", refuse)
    with pytest.raises(ConfigurationError, match=r"sume_urllib3\.E004: timeout must be something new"):
        get_session()


def test_warnings_do_not_stop_the_session(dj_settings: Any) -> None:
    dj_settings.SUME = {"MAX_ELAPSED": 1}  # W001 and W002
    session = get_session()
    assert not session.has_api_key
    assert session.policy.max_elapsed == 1.0


def test_a_fixed_setting_works_again() -> None:
    with override_settings(SUME={**GOOD, "TIMEOUT": 0}), pytest.raises(ConfigurationError, match="E004"):
        get_session()
    assert (5, 30) == get_session().timeout


def test_error_text_never_contains_the_api_key() -> None:
    bad = {"API_KEY": API_KEY + "\n", "PEEK_LIMIT": API_KEY, "AUTH_HEADER": API_KEY}
    with override_settings(SUME=bad), pytest.raises(ConfigurationError) as info:
        get_session()
    assert API_KEY not in str(info.value)
    assert "E003" in str(info.value)
    assert "E006" in str(info.value)


def capture_handler() -> BufferingHandler:
    """The handler that the test settings' LOGGING attached to the sume_urllib3 logger."""
    (handler,) = [h for h in logging.getLogger("sume_urllib3").handlers if isinstance(h, BufferingHandler)]
    return handler


def test_retries_are_logged_through_django_logging() -> None:
    handler = capture_handler()
    handler.flush()
    with FakeSume() as fake, no_sleep() as recorder:
        fake.script("GET", "/v1/me", 503, 200)
        with override_settings(SUME={**GOOD, "BASE_URL": fake.url + "/v1"}):
            response = get_session().get("/me")
        assert response.status_code == 200
        assert response.sume.outcome == "retried_ok"  # type: ignore[attr-defined]
        assert len(fake.requests_for("GET", "/v1/me")) == 2
        assert fake.requests[0].headers["x-api-key"] == API_KEY
    assert len(recorder.waits) == 1
    records = [r for r in handler.buffer if r.name == "sume_urllib3" and r.levelno == logging.INFO]
    (record,) = [r for r in records if getattr(r, "sume_event", None) == "retry"]
    assert record.getMessage().startswith("retrying GET /v1/me after 503")
    assert getattr(record, "sume_status", None) == 503
    for r in handler.buffer:
        assert API_KEY not in r.getMessage()


def test_nothing_outside_contrib_django_imports_django() -> None:
    code = (
        "import sys, sume_urllib3, sume_urllib3.testing, sume_urllib3.contrib; "
        "assert 'django' not in sys.modules, sorted(m for m in sys.modules if 'django' in m)"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_without_django_the_import_names_the_extra() -> None:
    """As the other contribs do: the error says which extra to install, in a process without Django."""
    code = (
        "import sys; sys.modules['django'] = None\n"
        "try:\n    import sume_urllib3.contrib.django\n"
        "except ImportError as exc:\n    print(exc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert "pip install 'sume-urllib3[django]'" in out.stdout


def test_a_changed_environment_rebuilds(dj_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """SUME_API_BASE_URL changing (say, monkeypatch.setenv in a test) gives a new session."""
    dj_settings.SUME = {"API_KEY": "sk_env"}
    monkeypatch.setenv("SUME_API_BASE_URL", "https://one.example/v1")
    first = get_session()
    monkeypatch.setenv("SUME_API_BASE_URL", "https://two.example/v1")

    second = get_session()

    assert (first is not second, "https://two.example/v1") == (True, second.base_url)
    assert second is get_session()
