"""Test your Sume code without the network and without waiting.

``FakeSume`` is a scriptable fake Sume API on a real loopback socket; ``no_sleep()``
makes retries record their waits instead of sleeping; ``RecordingObserver`` keeps every
retry event and outcome record; ``reset_fleets()`` forgets every fleet's pacing. With
pytest, ``pytest_plugins = ["sume_urllib3.testing.plugin"]`` in your ``conftest.py`` gives
the fixtures ``fake_sume`` and ``sume_no_sleep``, and every test fleets that know nothing.
"""

from __future__ import annotations

from ._isolation import reset_fleets
from ._nosleep import SleepRecorder, no_sleep
from ._recording import RecordingObserver
from ._server import FakeSume, RecordedRequest, Reply

__all__ = [
    "FakeSume",
    "RecordedRequest",
    "RecordingObserver",
    "Reply",
    "SleepRecorder",
    "no_sleep",
    "reset_fleets",
]
