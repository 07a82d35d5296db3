"""A user's suite (user_suite.py: 43 tests, one loopback server each, one test key, 429s with
Retry-After 30) passes in one process in any order, in under 10 s, with the shipped plugin only.

It runs in a subprocess from a folder whose conftest only opts into the plugin, nothing reset
by hand, exactly what ``pip install sume-urllib3`` and one line give a user. Before issue 23 it
passed 17 of 43.
"""

from __future__ import annotations

import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, List

import pytest

SUITE = pathlib.Path(__file__).with_name("user_suite.py")
TESTS = 43
BUDGET = 10.0  # seconds for the whole run, interpreter start included
#: The one line a user adds to their top-level conftest.py.
OPT_IN = 'pytest_plugins = ["sume_urllib3.testing.plugin"]\n'


def run_pytest(folder: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a fresh interpreter in ``folder``, with the environment a user's CI would have."""
    env: Dict[str, str] = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST_", "SUME_")) and name != "DJANGO_SETTINGS_MODULE"
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("user_suite")
    (folder / "conftest.py").write_text(OPT_IN, encoding="utf-8")
    shutil.copy(SUITE, folder / "test_user_suite.py")
    return folder


@pytest.fixture(scope="module")
def node_ids(suite: pathlib.Path) -> List[str]:
    """The suite's tests in the order they are written."""
    listed = run_pytest(suite, "--collect-only", "-q")
    ids = [line for line in listed.stdout.splitlines() if line.startswith("test_user_suite.py::")]
    assert TESTS == len(ids), listed.stdout + listed.stderr
    return ids


ORDERS = ["as written", "reversed", "shuffled 1", "shuffled 2", "shuffled 3", "shuffled 4"]


@pytest.mark.slow  # a pytest run in a subprocess per order: CI's slow step runs them
@pytest.mark.parametrize("order", ORDERS)
def test_a_users_suite_passes_in_any_order_in_under_ten_seconds(
    order: str, suite: pathlib.Path, node_ids: List[str]
) -> None:
    ids = list(node_ids)
    if order == "reversed":
        ids.reverse()
    elif order.startswith("shuffled"):
        random.Random(int(order.split()[1])).shuffle(ids)

    started = time.monotonic()
    result = run_pytest(suite, "-v", "-p", "no:randomly", *ids)
    elapsed = time.monotonic() - started

    output = result.stdout + result.stderr
    ran = re.findall(r"^(test_user_suite\.py::\S+) PASSED", result.stdout, flags=re.M)
    assert (0, f"{TESTS} passed") == (result.returncode, _summary(result.stdout)), output
    assert ids == ran  # run in the order asked for, every test passed
    assert elapsed < BUDGET, f"{elapsed:.1f}s"


def _summary(stdout: str) -> str:
    found = re.search(r"=+ (.*?) in [\d.]+s", stdout.strip().splitlines()[-1])
    return found.group(1) if found else stdout[-300:]
