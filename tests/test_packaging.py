"""What the package index gets: the README's links, the project's URLs, an sdist without a broken suite."""

from __future__ import annotations

import email
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_sdist_ships_the_package_with_its_urls_and_no_test_suite(tmp_path: pathlib.Path) -> None:
    """The suite needs the repository (benchmarks/, fixtures): an sdist carries the package and the
    examples (the demo among them), not the tests."""
    pytest.importorskip("setuptools")  # not in a Python 3.12+ venv unless installed
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    name = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    with tarfile.open(tmp_path / name) as sdist:
        members = sdist.getnames()
        info = sdist.extractfile(next(m for m in members if m.endswith("/PKG-INFO")))
        assert info is not None
        metadata = email.message_from_bytes(info.read())
    top = {member.split("/")[1] for member in members if member.count("/") >= 1}
    assert not top & {"tests", "benchmarks"}
    assert any(member.endswith("sume_urllib3/contrib/redis/acquire.lua") for member in members)
    template = "sume_urllib3/contrib/django/templates/sume_urllib3/pace.html"  # the admin's pace page
    assert any(member.endswith(template) for member in members)
    assert any(member.endswith("/examples/demo.py") for member in members)
    urls = dict(value.split(", ", 1) for value in metadata.get_all("Project-URL") or [])
    assert {"Source", "Changelog", "Issues", "Documentation"} <= set(urls)
