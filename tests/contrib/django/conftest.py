"""Configure Django for this folder only: the rest of the suite runs without Django.

There is no global ``DJANGO_SETTINGS_MODULE``: settings come from ``settings.py`` next to
this file, applied with ``settings.configure()``. pytest-django (when installed and not
disabled) then sees configured settings and its ``settings`` fixture works; without it the
``dj_settings`` fixture falls back to ``override_settings``.
"""

from __future__ import annotations

from typing import Any, Iterator, List

import pytest

# Not pytest.importorskip: a Skipped raised by a conftest aborts the whole run when this
# folder is named on the command line. Without Django the test modules skip themselves.
try:
    import django
except ImportError:
    django = None  # type: ignore[assignment,unused-ignore]

collect_ignore_glob: List[str] = []
_NOT_RUN = ""

if django is not None:
    from django.apps import apps
    from django.conf import settings as django_settings
    from django.test import override_settings

    from sume_urllib3.contrib.django import fleet, observers, sessions

    from . import settings as test_settings

    if not django_settings.configured:
        django_settings.configure(
            **{name: getattr(test_settings, name) for name in dir(test_settings) if name.isupper()}
        )
    if not apps.ready:
        django.setup()
    if not apps.is_installed("sume_urllib3.contrib.django"):
        _NOT_RUN = "Django is configured elsewhere without sume_urllib3.contrib.django in INSTALLED_APPS"
        collect_ignore_glob.append("test_*.py")


def pytest_report_header() -> str:
    """Say why the Django tests were not collected, if they were not."""
    return f"tests/contrib/django not run: {_NOT_RUN}" if _NOT_RUN else ""


class _Overrides:
    """pytest-django's ``settings`` fixture in miniature: ``obj.NAME = value``, undone after."""

    def __init__(self) -> None:
        object.__setattr__(self, "_stack", [])

    def __getattr__(self, name: str) -> Any:
        return getattr(django_settings, name)

    def __setattr__(self, name: str, value: Any) -> None:
        override = override_settings(**{name: value})
        override.enable()
        self._stack.append(override)

    def __delattr__(self, name: str) -> None:
        override = override_settings()
        override.enable()
        delattr(django_settings, name)
        self._stack.append(override)

    def undo(self) -> None:
        stack: List[Any] = self._stack
        while stack:
            stack.pop().disable()


@pytest.fixture
def dj_settings(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Django settings to change for one test: pytest-django's ``settings`` when active."""
    if request.config.pluginmanager.has_plugin("django"):
        yield request.getfixturevalue("settings")
        return
    overrides = _Overrides()
    yield overrides
    overrides.undo()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No Sume variables from the outer environment; every test starts with fresh sessions."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)
    monkeypatch.delenv("SUME_API_BASE_URL", raising=False)
    # Deleting a setting sends no setting_changed signal, so start each test afresh.
    sessions.reset()
    sessions.process_metrics().reset()
    observers.forget()
    fleet.forget()
    yield
    sessions.close_session()
    sessions.reset()
