"""The Django guide works: its SUME passes the checks and its view calls Sume."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

django = pytest.importorskip("django")

from sume_urllib3.contrib.django import conf  # noqa: E402
from sume_urllib3.testing import FakeSume, Reply, no_sleep  # noqa: E402
from tests.test_docs_examples import DOCS, examples  # noqa: E402

GUIDE = DOCS / "guide" / "django.md"


def django_blocks() -> Dict[str, Any]:
    """Run the guide's Django blocks in one namespace (settings, then the view)."""
    namespace: Dict[str, Any] = {"__name__": "docs_django"}
    for example in examples([GUIDE]):
        exec(compile(example.source, example.name, "exec"), namespace)
    return namespace


def test_the_guide_settings_pass_the_system_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key in the guide's SUME dict is valid: no errors, no warnings with a key set."""
    monkeypatch.setenv("SUME_API_KEY", "sk_readme")

    settings = django_blocks()["SUME"]

    assert () == conf.resolve(settings, {"SUME_API_KEY": "sk_readme"}).errors


def test_the_guide_view_calls_sume(fake: FakeSume, dj_settings: Any) -> None:
    """The guide's view makes its call through get_session()."""
    fake.script("GET", "/v1/me", 503, 200)
    dj_settings.SUME = {"API_KEY": "sk_readme", "BASE_URL": fake.url + "/v1"}

    with no_sleep():
        django_blocks()["view"](None)

    assert 2 == len(fake.requests_for("GET", "/v1/me"))


def test_the_guide_lists_every_check_id() -> None:
    """The guide's check table has exactly the ids the checks can report."""
    import re

    from sume_urllib3.contrib.django.checks import CHECK_IDS

    guide = GUIDE.read_text(encoding="utf-8")

    assert sorted(CHECK_IDS) == sorted(set(re.findall(r"`(sume_urllib3\.[EW]\d{3})`", guide)))


def test_the_async_guide_views_call_sume(fake: FakeSume, dj_settings: Any) -> None:
    """docs/guide/async.md: its sync view, and its async view through sync_to_async, call Sume."""
    fake.script("GET", "/v1/me", Reply(200, json={"user": "ada"}))
    dj_settings.SUME = {"API_KEY": "sk_readme", "BASE_URL": fake.url + "/v1"}

    for example in examples([DOCS / "guide" / "async.md"]):
        namespace: Dict[str, Any] = {"__name__": "docs_async"}
        exec(compile(example.source, example.name, "exec"), namespace)
        answer = namespace["profile"](None)
        if asyncio.iscoroutine(answer):
            asyncio.run(answer)

    assert 2 == len(fake.requests_for("GET", "/v1/me"))
