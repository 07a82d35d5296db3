"""pytest plugin: the ``fake_sume`` and ``sume_no_sleep`` fixtures, and fleets isolated per test.

Opt in from your top-level ``conftest.py``::

    pytest_plugins = ["sume_urllib3.testing.plugin"]

Installing the package loads nothing into pytest by itself.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from . import reset_fleets
from ._nosleep import SleepRecorder, no_sleep
from ._server import FakeSume


@pytest.fixture(autouse=True)
def sume_isolated_fleets() -> Iterator[None]:
    """Every test starts and ends with fleets that know nothing (see ``reset_fleets``).

    Autouse, rather than a duty of ``fake_sume``/``sume_no_sleep``: the tests that leak are
    the ones that use neither (their own loopback server, a module-level fleet), and a
    cooldown or pace learned under ``no_sleep``'s virtual clock means nothing to the next
    test's clock.
    """
    reset_fleets()
    yield
    reset_fleets()


@pytest.fixture
def fake_sume() -> Iterator[FakeSume]:
    """A started FakeSume on 127.0.0.1, stopped after the test; script it per route."""
    with FakeSume() as server:
        yield server


@pytest.fixture
def sume_no_sleep() -> Iterator[SleepRecorder]:
    """Retries record their waits instead of sleeping; the recorder lists them."""
    with no_sleep() as recorder:
        yield recorder
