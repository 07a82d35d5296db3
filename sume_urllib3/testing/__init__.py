"""Test your Sume code without the network and without waiting.

``FakeSume`` is a scriptable fake Sume API on a real loopback socket; ``no_sleep()``
makes retries record their waits instead of sleeping; ``RecordingObserver`` keeps every
retry event and outcome record; ``reset_fleets()`` forgets every fleet's pacing. With
pytest, ``pytest_plugins = ["sume_urllib3.testing.plugin"]`` in your ``conftest.py`` gives
the fixtures ``fake_sume`` and ``sume_no_sleep``, and every test fleets that know nothing.
"""

from __future__ import annotations

import sys

from .. import pacing
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


def reset_fleets() -> None:
    """Forget every local and host fleet's cooldowns, pace and turns, in this process.

    The process-wide ``LocalFleet.default()`` and every fleet built by the code under test (a
    module-level ``LocalFleet(rate="10/min")`` or ``HostFleet()``, the one ``SUME["FLEET"]``
    builds) start again knowing nothing (see ``sume_urllib3.pacing.reset_fleets``: a
    ``RedisFleet`` is left alone), and Django's ``get_session()`` builds new sessions (a fresh
    retry budget) in every thread. The pytest plugin calls it around every test; call it in
    ``setUp`` under unittest or Django's test runner.
    """
    pacing.reset_fleets()
    # Only when the code under test loaded the Django integration: never import Django here.
    django_sessions = sys.modules.get("sume_urllib3.contrib.django.sessions")
    if django_sessions is not None:
        django_sessions.reset()
