"""System checks: `manage.py check` reports bad SUME settings with our ids, never the key."""

from __future__ import annotations

import io
from typing import Any, Dict, List

import pytest

pytest.importorskip("django")

from django.apps import apps
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from urllib3 import Timeout

from sume_urllib3.contrib.django import get_session
from sume_urllib3.contrib.django.checks import CHECK_IDS, check_settings
from sume_urllib3.contrib.django.conf import resolve

from .settings import API_KEY

GOOD: Dict[str, Any] = {"API_KEY": API_KEY}


def issues() -> List[checks.CheckMessage]:
    """The messages of our checks only."""
    messages: List[checks.CheckMessage] = checks.run_checks(tags=["sume_urllib3"])
    return messages


def ids() -> List[str]:
    """The ids of our check messages, in order."""
    return [str(message.id) for message in issues()]


def check_fails(fail_level: str = "ERROR") -> str:
    """Run `manage.py check`; return the text of the SystemCheckError it must raise."""
    with pytest.raises(SystemCheckError) as info:
        call_command("check", fail_level=fail_level, stdout=io.StringIO(), stderr=io.StringIO())
    return str(info.value)


def test_all_ids_are_documented() -> None:
    assert sorted(CHECK_IDS) == [
        *(f"sume_urllib3.E00{n}" for n in range(1, 9)),
        "sume_urllib3.W001",
        "sume_urllib3.W002",
    ]


def test_good_settings_pass_manage_py_check() -> None:
    out = io.StringIO()
    call_command("check", fail_level="WARNING", stdout=out, stderr=io.StringIO())
    assert "no issues" in out.getvalue()
    assert ids() == []


def test_the_checks_are_registered_with_their_tag() -> None:
    assert checks.registry.registry.tag_exists("sume_urllib3")
    registered: List[Any] = list(checks.registry.registry.get_checks())
    assert check_settings in registered


def test_missing_setting_means_all_defaults(dj_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    del dj_settings.SUME
    monkeypatch.setenv("SUME_API_KEY", API_KEY)
    assert ids() == []


def test_checks_of_other_apps_skip_ours(dj_settings: Any) -> None:
    dj_settings.SUME = "broken"
    assert check_settings(app_configs=[]) == []
    ours = apps.get_app_config("sume_urllib3")
    assert [m.id for m in check_settings(app_configs=[ours])] == ["sume_urllib3.E001"]


@pytest.mark.parametrize("value", [None, "API_KEY=x", [("API_KEY", API_KEY)], 3])
def test_e001_sume_is_not_a_dict(dj_settings: Any, value: Any) -> None:
    dj_settings.SUME = value
    text = check_fails()
    assert "sume_urllib3.E001" in text
    assert "SUME must be a dict" in text
    (message,) = issues()
    assert message.hint


def test_e002_unknown_key_suggests_the_closest(dj_settings: Any) -> None:
    dj_settings.SUME = {**GOOD, "MAX_RETRYS": 2, "timeout": 5, 7: "x", "NONSENSE_ENTIRELY": 1}
    text = check_fails()
    assert "sume_urllib3.E002" in text
    messages = issues()
    assert [m.id for m in messages] == ["sume_urllib3.E002"] * 4
    by_msg = {m.msg: m.hint or "" for m in messages}
    assert 'Did you mean SUME["MAX_RETRIES"]?' in by_msg['SUME["MAX_RETRYS"] is not a known setting']
    assert 'Did you mean SUME["TIMEOUT"]?' in by_msg['SUME["timeout"] is not a known setting']
    assert "Did you mean" not in by_msg["SUME[7] is not a known setting"]
    hint = by_msg['SUME["NONSENSE_ENTIRELY"] is not a known setting']
    assert "Did you mean" not in hint
    assert "Valid keys: API_KEY, BASE_URL, AUTH_HEADER" in hint
    assert "MAX_RETRIES" in hint
    assert "RULES" in hint


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("MAX_RETRIES", -1, "max_retries must be between 0 and 1000"),
        ("MAX_RETRIES", "3", "max_retries must be an int"),
        ("MAX_ELAPSED", 0, "max_elapsed must be finite and > 0"),
        ("BACKOFF_BASE", float("nan"), "backoff_base must be finite"),
        ("BACKOFF_MAX", True, "backoff_max must be a number of seconds"),
        ("JITTER", (1.0, 0.5), "jitter range is inverted"),
        ("JITTER", 0.5, "jitter must be a (low, high) pair"),
        ("IN_USE_WAIT", -1, "in_use_wait must be finite and >= 0"),
        ("TRUST_BODY", "yes", "trust_body must be a bool"),
        ("PEEK_LIMIT", 2**40, "peek_limit must be between"),
        ("RULES", [(999, None, "retry")], "rules: status 999 is not an HTTP status"),
        ("RULES", [(503, None, "maybe")], "rules: unknown verdict 'maybe'"),
        ("RULES", "429,503", "rules must be a sequence of Rule"),
    ],
)
def test_e003_invalid_policy_value(dj_settings: Any, key: str, value: Any, expected: str) -> None:
    dj_settings.SUME = {**GOOD, key: value}
    text = check_fails()
    assert "sume_urllib3.E003" in text
    (message,) = issues()
    assert message.id == "sume_urllib3.E003"
    assert message.msg.startswith(f'SUME["{key}"]: ')
    assert expected in message.msg
    assert f'SUME["{key}"]' in (message.hint or "")
    assert "remove it to use" in (message.hint or "")


def test_e003_reports_every_bad_policy_value_at_once(dj_settings: Any) -> None:
    dj_settings.SUME = {**GOOD, "MAX_RETRIES": -1, "JITTER": (2, 1), "PEEK_LIMIT": 10}
    messages = issues()
    assert [m.id for m in messages] == ["sume_urllib3.E003"] * 2
    assert [m.msg.split(":")[0] for m in messages] == ['SUME["MAX_RETRIES"]', 'SUME["JITTER"]']


def test_good_policy_values_pass(dj_settings: Any) -> None:
    dj_settings.SUME = {
        **GOOD,
        "MAX_RETRIES": 0,
        "MAX_ELAPSED": 300,
        "BACKOFF_BASE": 0.5,
        "BACKOFF_MAX": 10,
        "JITTER": [0.0, 1.0],
        "IN_USE_WAIT": 2,
        "TRUST_BODY": False,
        "PEEK_LIMIT": 1024,
        "RULES": [(429, None, "retry"), [503, None, "retry", 5]],
    }
    assert ids() == []


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("API_KEY", "has space", "api_key must be non-empty visible ASCII"),
        ("API_KEY", 12345, "api_key must be a str"),
        ("BASE_URL", "ftp://api.sume.com/v1", "base_url must be an http(s) URL"),
        ("BASE_URL", "api.sume.com/v1", "base_url must be an http(s) URL"),
        ("BASE_URL", "", "base_url must be an http(s) URL"),
        ("BASE_URL", "https://api.sume.com/v1?debug=1", "must not carry credentials, a query"),
        ("BASE_URL", ["https://api.sume.com/v1"], "base_url must be a str"),
        ("TIMEOUT", 0, "timeout must be seconds > 0"),
        ("TIMEOUT", (5, 30, 60), "timeout must be seconds > 0"),
        ("TIMEOUT", "30", "timeout must be seconds > 0"),
        ("RAISE_ON_GIVE_UP", "false", "raise_on_give_up must be True or False"),
        ("RAISE_ON_GIVE_UP", None, "raise_on_give_up must be True or False"),
        ("RETRY_BUDGET", 1, "retry_budget must be True or False"),
    ],
)
def test_e004_invalid_session_value(dj_settings: Any, key: str, value: Any, expected: str) -> None:
    dj_settings.SUME = {**GOOD, key: value}
    text = check_fails()
    assert "sume_urllib3.E004" in text
    messages = [m for m in issues() if m.id != "sume_urllib3.W001"]
    (message,) = messages
    assert message.id == "sume_urllib3.E004"
    assert message.msg.startswith(f'SUME["{key}"]: ')
    assert expected in message.msg
    assert message.hint


def test_e004_invalid_base_url_from_the_environment(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dj_settings.SUME = GOOD
    monkeypatch.setenv("SUME_API_BASE_URL", "api.sume.com")
    (message,) = issues()
    assert message.id == "sume_urllib3.E004"
    assert message.msg.startswith("the SUME_API_BASE_URL environment variable: base_url must be")


def test_e004_malformed_api_key_from_the_environment(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dj_settings.SUME = {"MAX_RETRIES": 2}
    monkeypatch.setenv("SUME_API_KEY", "sk live with spaces")
    (message,) = issues()
    assert message.id == "sume_urllib3.E004"
    assert message.msg.startswith("the SUME_API_KEY environment variable: api_key must be")
    assert "sk live with spaces" not in message.msg


def test_setting_base_url_wins_over_the_environment(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dj_settings.SUME = {**GOOD, "BASE_URL": "https://eu.api.sume.com/v1"}
    monkeypatch.setenv("SUME_API_BASE_URL", "not a url")
    assert ids() == []


@pytest.mark.parametrize(
    "url", ["http://api.sume.com/v1", "http://10.0.0.5:8000/v1", "http://localhost.example.com/v1"]
)
def test_e005_plain_http_to_a_remote_host(dj_settings: Any, url: str) -> None:
    dj_settings.SUME = {**GOOD, "BASE_URL": url}
    text = check_fails()
    assert "sume_urllib3.E005" in text
    (message,) = issues()
    assert message.msg.startswith('SUME["BASE_URL"] uses plain http to ')
    assert "https" in (message.hint or "")


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8000/v1", "http://127.0.0.1:9999", "http://[::1]:8080/v1", "http://api.localhost/v1"],
)
def test_plain_http_to_loopback_is_fine(dj_settings: Any, url: str) -> None:
    dj_settings.SUME = {**GOOD, "BASE_URL": url}
    assert ids() == []


def test_e005_from_the_environment(dj_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    dj_settings.SUME = GOOD
    monkeypatch.setenv("SUME_API_BASE_URL", "http://api.sume.com/v1")
    (message,) = issues()
    assert message.id == "sume_urllib3.E005"
    assert "SUME_API_BASE_URL" in message.msg


@pytest.mark.parametrize(
    ("mode", "got"),
    [
        ("Authorization", "a str of 13 characters"),
        ("token", "a str of 5 characters"),
        ("", "a str of 0 characters"),
        (None, "NoneType"),
        (1, "int"),
    ],
)
def test_e006_bad_auth_header(dj_settings: Any, mode: Any, got: str) -> None:
    dj_settings.SUME = {**GOOD, "AUTH_HEADER": mode}
    text = check_fails()
    assert "sume_urllib3.E006" in text
    (message,) = issues()
    assert message.msg == f"SUME[\"AUTH_HEADER\"] must be 'x-api-key' or 'bearer', got {got}"
    assert "bearer" in (message.hint or "")


def test_a_key_pasted_into_auth_header_is_never_echoed(dj_settings: Any) -> None:
    """ "Bearer sk_live_..." in AUTH_HEADER is the key itself: no message may show it."""
    dj_settings.SUME = {"AUTH_HEADER": "Bearer sk_live_SECRET_0123456789"}
    messages = issues()
    assert "sume_urllib3.E006" in [str(m.id) for m in messages]
    assert [] == [m for m in messages if "SECRET" in m.msg + (m.hint or "")]


def test_an_empty_api_key_means_not_set(dj_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """API_KEY = os.environ.get("SUME_API_KEY", "") with no variable is W001, not an error."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    dj_settings.SUME = {**GOOD, "API_KEY": ""}
    assert ["sume_urllib3.W001"] == ids()


@pytest.mark.parametrize("mode", ["x-api-key", "bearer", "Bearer", "X-API-KEY"])
def test_auth_header_modes_are_case_insensitive(dj_settings: Any, mode: str) -> None:
    dj_settings.SUME = {**GOOD, "AUTH_HEADER": mode}
    assert ids() == []


def test_w001_no_api_key(dj_settings: Any) -> None:
    dj_settings.SUME = {"MAX_RETRIES": 2}
    out = io.StringIO()
    # A warning alone does not fail `manage.py check`...
    call_command("check", stdout=out, stderr=out)
    assert "sume_urllib3.W001" in out.getvalue()
    # ...unless asked to.
    assert "sume_urllib3.W001" in check_fails(fail_level="WARNING")
    (message,) = issues()
    assert message.level == checks.WARNING
    assert 'SUME["API_KEY"]' in message.msg
    assert "SUME_API_KEY" in message.msg


def test_w001_not_raised_when_the_environment_has_the_key(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dj_settings.SUME = {"MAX_RETRIES": 2, "API_KEY": None}
    monkeypatch.setenv("SUME_API_KEY", API_KEY)
    assert ids() == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"MAX_ELAPSED": 30}, "(30s) is not longer than the read timeout of one attempt (60s, the default"),
        ({"MAX_ELAPSED": 20, "TIMEOUT": 20}, "(20s) is not longer than the read timeout of one attempt (20s"),
        ({"TIMEOUT": [5, 300]}, "(120s) is not longer than the read timeout of one attempt (300s, SUME"),
    ],
)
def test_w002_deadline_shorter_than_one_read_timeout(
    dj_settings: Any, extra: Dict[str, Any], needle: str
) -> None:
    dj_settings.SUME = {**GOOD, **extra}
    assert "sume_urllib3.W002" in check_fails(fail_level="WARNING")
    (message,) = issues()
    assert message.level == checks.WARNING
    assert message.msg.startswith('SUME["MAX_ELAPSED"] ')
    assert needle in message.msg
    assert 'SUME["TIMEOUT"]' in (message.hint or "")


@pytest.mark.parametrize("extra", [{"MAX_ELAPSED": 31}, {"TIMEOUT": None, "MAX_ELAPSED": 1}, {"TIMEOUT": 5}])
def test_no_w002_when_a_retry_fits(dj_settings: Any, extra: Dict[str, Any]) -> None:
    dj_settings.SUME = {**GOOD, "TIMEOUT": (5, 30), **extra}
    assert ids() == []


def test_no_w002_on_top_of_an_invalid_timeout(dj_settings: Any) -> None:
    dj_settings.SUME = {**GOOD, "TIMEOUT": -1, "MAX_ELAPSED": 1}
    assert ids() == ["sume_urllib3.E004"]


def test_the_api_key_never_appears_in_check_output(
    dj_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_key = "sk_live_ENVIRONMENT_SECRET_42"
    monkeypatch.setenv("SUME_API_KEY", env_key)
    monkeypatch.setenv("SUME_API_BASE_URL", f"ftp://{env_key}@api.sume.com")
    dj_settings.SUME = {
        "API_KEY": API_KEY + " ",  # malformed, so it is reported
        "MAX_RETRIES": API_KEY,  # a key pasted into the wrong setting is echoed by validation
        "BACKOFF_MAX": [API_KEY],
        "AUTH_HEADER": API_KEY,
        "TIMEOUT": API_KEY,
        API_KEY: 1,
    }
    messages = issues()
    assert {m.id for m in messages} >= {
        "sume_urllib3.E002",
        "sume_urllib3.E003",
        "sume_urllib3.E004",
        "sume_urllib3.E006",
    }
    text = check_fails()
    for secret in (API_KEY, env_key, API_KEY.strip()):
        assert secret not in text
        for message in messages:
            assert secret not in message.msg
            assert secret not in (message.hint or "")
    assert "***" in text


@pytest.mark.parametrize(
    ("api_key", "pasted"),
    [
        ("sk_x1", "sk_x1"),  # a short key, as test keys are
        (bytearray(b"sk_live_BYTES_42"), "sk_live_BYTES_42"),
        ("sk_live\tTAB_42\n", "sk_live\tTAB_42"),  # malformed, pasted elsewhere stripped
    ],
    ids=["short", "bytearray", "stripped-with-escapes"],
)
def test_a_key_in_any_form_is_never_echoed_by_another_setting(api_key: Any, pasted: str) -> None:
    """Validation echoes a value (its repr), so every form of the key is masked in every message."""
    problems = resolve({"API_KEY": api_key, "MAX_RETRIES": pasted, "TIMEOUT": pasted}, {}).problems
    assert {"sume_urllib3.E003", "sume_urllib3.E004"} <= {problem.id for problem in problems}
    text = "\n".join(f"{problem.msg} {problem.hint}" for problem in problems)
    for shown in (pasted, repr(pasted)[1:-1]):
        assert shown not in text
    assert "***" in text


def test_manage_py_check_lists_every_problem(dj_settings: Any) -> None:
    dj_settings.SUME = {
        "API_KEY": API_KEY,
        "MAX_RETRIES": 99999,
        "BASE_URL": "http://api.sume.com/v1",
        "AUTH_HEADER": "basic",
        "TIMEOUT": 0,
        "RETRIES": 3,
    }
    text = check_fails()
    for check_id in ("E002", "E003", "E004", "E005", "E006"):
        assert f"sume_urllib3.{check_id}" in text
    assert "HINT:" in text


@pytest.mark.parametrize(
    "timeout", [(5, None), [5, None], Timeout(connect=5, read=None), Timeout(total=30), Timeout(5, read=20)]
)
def test_every_documented_timeout_form_passes_check_and_builds_a_session(
    dj_settings: Any, timeout: Any
) -> None:
    """A read without limit and a urllib3 Timeout are what SumeSession(timeout=...) accepts:
    manage.py check and get_session() take them too (they crashed with a bare TypeError)."""
    dj_settings.SUME = {**GOOD, "TIMEOUT": timeout}
    call_command("check", fail_level="WARNING", stdout=io.StringIO(), stderr=io.StringIO())
    expected = tuple(timeout) if isinstance(timeout, list) else timeout
    assert expected == get_session().timeout


@pytest.mark.parametrize("timeout", [Timeout(connect=5, read=60), Timeout(total=60), (5, 60)])
def test_w002_reads_a_urllib3_timeout_as_it_reads_a_pair(dj_settings: Any, timeout: Any) -> None:
    dj_settings.SUME = {**GOOD, "TIMEOUT": timeout, "MAX_ELAPSED": 30}
    assert ["sume_urllib3.W002"] == ids()
    assert "(60s, SUME" in issues()[0].msg
