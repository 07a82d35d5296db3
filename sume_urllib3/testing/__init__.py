"""Test your Sume code without the network and without waiting.

``FakeSume`` is a scriptable fake Sume API on a real loopback socket; ``no_sleep()``
makes retries record their waits instead of sleeping; ``RecordingObserver`` keeps every
retry event and outcome record; ``reset_fleets()`` forgets every fleet's pacing. With
pytest, the fixtures ``fake_sume`` and ``sume_no_sleep`` are available automatically, and
every test starts with fleets that know nothing.
"""

from __future__ import annotations

from .._sleeping import SleepRecorder
from ._isolation import reset_fleets
from ._nosleep import no_sleep
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
