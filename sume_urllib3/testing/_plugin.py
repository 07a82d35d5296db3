"""pytest plugin: the ``fake_sume`` and ``sume_no_sleep`` fixtures."""

from __future__ import annotations

from typing import Iterator

import pytest

from .._sleeping import SleepRecorder
from ._nosleep import no_sleep
from ._server import FakeSume


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
