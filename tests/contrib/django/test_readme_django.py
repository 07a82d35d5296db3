"""The README's Django section works: its SUME passes the checks and its view calls Sume."""

from __future__ import annotations

from typing import Any, Dict

import pytest

django = pytest.importorskip("django")

from sume_urllib3.contrib.django import conf  # noqa: E402
from sume_urllib3.testing import FakeSume, no_sleep  # noqa: E402
from tests.test_readme import python_blocks  # noqa: E402


def django_blocks() -> Dict[str, Any]:
    """Run the README's Django blocks in one namespace (settings, then the view)."""
    namespace: Dict[str, Any] = {"__name__": "readme_django"}
    for source in python_blocks():
        if "contrib.django" in source:
            exec(compile(source, "README.md", "exec"), namespace)
    return namespace


def test_the_readme_settings_pass_the_system_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key in the README's SUME dict is valid: no errors, no warnings with a key set."""
    monkeypatch.setenv("SUME_API_KEY", "sk_readme")

    settings = django_blocks()["SUME"]

    assert () == conf.resolve(settings, {"SUME_API_KEY": "sk_readme"}).errors


def test_the_readme_view_calls_sume(fake: FakeSume, dj_settings: Any) -> None:
    """The README's view makes its call through get_session()."""
    fake.script("GET", "/v1/me", 503, 200)
    dj_settings.SUME = {"API_KEY": "sk_readme", "BASE_URL": fake.url + "/v1"}

    with no_sleep():
        django_blocks()["view"](None)

    assert 2 == len(fake.requests_for("GET", "/v1/me"))


def test_the_readme_lists_every_check_id() -> None:
    """The README's check table has exactly the ids the checks can report."""
    import pathlib
    import re

    from sume_urllib3.contrib.django.checks import CHECK_IDS

    readme = (pathlib.Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")

    assert sorted(CHECK_IDS) == sorted(set(re.findall(r"`(sume_urllib3\.[EW]\d{3})`", readme)))
