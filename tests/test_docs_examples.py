"""Every Python example in README.md and docs/ runs, against the fake server where it talks to Sume.

A block that must not run is marked just before its fence with ``<!-- not-run: why -->``, which
the reader sees in the page source and this test reports as a skip naming the reason.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import pytest

from sume_urllib3 import (
    Policy,
)
from sume_urllib3.testing import FakeSume, Reply, no_sleep

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: A fenced Python block, with the not-run mark that may precede it.
BLOCK = re.compile(r"^(?:<!-- not-run: (?P<why>[^\n]*?) -->\n)?```python\n(?P<source>.*?)^```", re.S | re.M)
#: Packages some examples need that not every leg installs (the docs extra, the legacy stack, Python
#: below 3.10 for vcrpy): their examples skip without them.
OPTIONAL = ("celery", "opentelemetry", "requests_cache", "cachecontrol", "requests_mock", "responses", "vcr")


class Example(NamedTuple):
    """One fenced Python block: where it is, its source, and why it is not run (None: it runs)."""

    page: pathlib.Path
    line: int
    source: str
    not_run: Optional[str]

    @property
    def name(self) -> str:
        """``docs/guide/jobs.md:12``: where a reader finds it."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> List[pathlib.Path]:
    """README.md and every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def examples(among: Sequence[pathlib.Path] = ()) -> List[Example]:
    """Every Python block of ``among`` (default: every page), in order."""
    found: List[Example] = []
    for page in among or pages():
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("source")) + 1
            found.append(Example(page, line, match.group("source"), match.group("why")))
    return found


def python_blocks() -> List[str]:
    """The source of every Python block, in page order."""
    return [example.source for example in examples()]


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.name)
def test_the_example_runs(example: Example, fake: FakeSume, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example executes without error (Sume calls go to FakeSume, nothing sleeps)."""
    if example.not_run is not None:
        pytest.skip(f"marked not-run: {example.not_run}")
    if "contrib.django" in example.source:
        pytest.skip("run with Django configured: tests/contrib/django/test_docs_django.py")
    for module in OPTIONAL:
        # Its own import, or the contrib module built on it (sume_urllib3.contrib.opentelemetry).
        if re.search(rf"^\s*(?:from|import) (?:sume_urllib3\.contrib\.)?{module}\b", example.source, re.M):
            pytest.importorskip(module, reason=f"the example needs {module}")
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

    namespace: Dict[str, Any] = {"__name__": "docs_example"}
    with no_sleep():
        exec(compile(example.source, example.name, "exec"), namespace)
    for name, test in namespace.items():  # a pytest example: its tests run with the plugin's fixtures
        if name.startswith("test_") and callable(test):
            with FakeSume() as fake_sume, no_sleep() as sume_no_sleep:
                test(fake_sume=fake_sume, sume_no_sleep=sume_no_sleep)


def test_every_guide_page_has_examples_and_every_unrun_one_says_why() -> None:
    """Each user guide page shows code that runs; a block left unrun gives its reason."""
    found = examples()
    shown = {e.page.name for e in found if e.page.parent.name == "guide"}
    assert {page.name for page in (DOCS / "guide").glob("*.md")} == shown
    assert all(e.not_run is None or e.not_run.strip() for e in found)


def test_a_not_run_mark_is_read_with_its_reason(tmp_path: pathlib.Path) -> None:
    """The mark just before a fence keeps that block alone from running, and carries the reason."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n<!-- not-run: needs a GPU -->\n```python\nprint(2)\n```\n",
        encoding="utf-8",
    )

    assert [(2, "print(1)\n", None), (7, "print(2)\n", "needs a GPU")] == [
        (e.line, e.source, e.not_run) for e in examples([page])
    ]


def test_readme_commands_are_present() -> None:
    """The README opens with the demo command and the test command CI runs."""
    text = README.read_text(encoding="utf-8")

    assert text.index("python -m sume_urllib3 demo") < text.index("python -m pytest")
    assert "<!-- test-command -->" in text


def test_the_policy_table_shown_is_the_cli_output() -> None:
    """The table Getting started shows is exactly what `python -m sume_urllib3 table` prints."""
    from sume_urllib3._cli import render_table

    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(status .*?)```", page, flags=re.S)

    assert shown is not None
    assert render_table(Policy()).rstrip("\n") == shown.group(1).rstrip("\n")


def test_the_readme_example_is_in_the_typing_tests() -> None:
    """The README's "Use it" block and tests/typing/readme_example.py make the same calls."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "tests", "typing", "readme_example.py"), encoding="utf-8") as f:
        typed = f.read()
    for call in (
        "SumeSession()",
        'session.post("/avatars"',
        "except SumeRetryError as error",
        "sume_record(",
    ):
        assert call in typed
