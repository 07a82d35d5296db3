"""Every Python example in the README runs, against the fake server where it talks to Sume."""

from __future__ import annotations

import pathlib
import re
from typing import List

import pytest

from sume_urllib3.testing import FakeSume, Reply, no_sleep

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("source", python_blocks(), ids=lambda s: s.strip().splitlines()[0][:50])
def test_readme_example_runs(source: str, fake: FakeSume, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example executes without error (Sume calls go to FakeSume, nothing sleeps)."""
    if "contrib.django" in source:
        pytest.skip("run with Django configured: tests/contrib/django/test_readme_django.py")
    if "contrib.opentelemetry" in source:
        pytest.importorskip("opentelemetry", reason="the tracing example needs the opentelemetry extra")
    if "contrib.celery" in source:
        pytest.importorskip("celery", reason="the Celery example needs the celery extra")
    fake.script(
        "POST", "/v1/avatars", Reply.error(503, "service_unavailable"), Reply(201, json={"id": "av_1"})
    )
    fake.script("GET", "/v1/me", Reply(200, json={"user": "ada"}))
    job = fake.job(
        "job_1", ["queued", "processing", ("completed", {"video_url": "https://cdn.example/v/job_1.mp4"})]
    )
    fake.script("POST", "/v1/models/sume/avatar-video/v1.0/runs", job.submitted())
    monkeypatch.setenv("SUME_API_KEY", "sk_readme")
    monkeypatch.setenv("SUME_API_BASE_URL", fake.url + "/v1")

    with no_sleep():
        exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})


def test_readme_commands_are_present() -> None:
    """The README opens with the demo command and the test command CI runs."""
    text = README.read_text(encoding="utf-8")

    assert text.index("python -m sume_urllib3 demo") < text.index("python -m pytest")
    assert "<!-- test-command -->" in text


def test_readme_policy_table_is_the_cli_output() -> None:
    """The table shown in the README is exactly what `python -m sume_urllib3 table` prints."""
    from sume_urllib3 import Policy
    from sume_urllib3._cli import render_table

    shown = re.search(r"```text\n(status .*?)```", README.read_text(encoding="utf-8"), flags=re.S)

    assert shown is not None
    assert render_table(Policy()).rstrip("\n") == shown.group(1).rstrip("\n")
